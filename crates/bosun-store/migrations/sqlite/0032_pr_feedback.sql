-- Bosun schema v32: feedback on GitHub. Which of check runs and the pull-request comment an
-- org wants (a stack may say otherwise), and the outbox of what Bosun owes GitHub: one
-- row per run (its check run, created once then updated) and one per pull request and
-- org (its comment, edited in place). A run's change marks its rows in the transaction
-- that changes it; the feedback duty reports the run as it then is.
ALTER TABLE orgs ADD COLUMN pr_feedback TEXT NOT NULL DEFAULT 'both';
ALTER TABLE stacks ADD COLUMN pr_feedback TEXT;

CREATE TABLE github_checks (
    run_id          TEXT PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
    org_id          TEXT NOT NULL,
    stack_id        TEXT NOT NULL,
    repository      TEXT NOT NULL,
    head_sha        TEXT NOT NULL,
    pull_request    INTEGER,
    checks          INTEGER NOT NULL,
    comment         INTEGER NOT NULL,
    check_run_id    INTEGER,
    changes         INTEGER NOT NULL,
    synced          INTEGER NOT NULL DEFAULT 0,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER,
    last_error      TEXT,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
);
CREATE INDEX github_checks_due ON github_checks(next_attempt_at) WHERE next_attempt_at IS NOT NULL;
CREATE INDEX github_checks_commit ON github_checks(repository, head_sha);
CREATE INDEX github_checks_pr ON github_checks(org_id, repository, pull_request, stack_id, created_at)
    WHERE pull_request IS NOT NULL;

CREATE TABLE github_pr_comments (
    org_id          TEXT NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    repository      TEXT NOT NULL,
    pull_request    INTEGER NOT NULL,
    delivery_id     INTEGER,
    comment_id      INTEGER,
    create_started  INTEGER NOT NULL DEFAULT 0,
    changes         INTEGER NOT NULL,
    synced          INTEGER NOT NULL DEFAULT 0,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER,
    last_error      TEXT,
    updated_at      INTEGER NOT NULL,
    PRIMARY KEY (org_id, repository, pull_request)
);
CREATE INDEX github_pr_comments_due ON github_pr_comments(next_attempt_at)
    WHERE next_attempt_at IS NOT NULL;
CREATE INDEX github_pr_comments_pr ON github_pr_comments(repository, pull_request);

-- A kind of feedback ('checks', 'comment') a repository's installation refused for want
-- of a permission: shown on its stacks' connection line, not tried again until it passes.
CREATE TABLE github_feedback_refusals (
    repository  TEXT NOT NULL,
    kind        TEXT NOT NULL,
    message     TEXT NOT NULL,
    until_at    INTEGER NOT NULL,
    PRIMARY KEY (repository, kind)
);
