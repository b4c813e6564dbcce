-- Bosun schema (PostgreSQL) v32: feedback on GitHub. Which of check runs and the pull-request comment an
-- org wants (a stack may say otherwise), and the outbox of what Bosun owes GitHub: one
-- row per run (its check run, created once then updated) and one per pull request and
-- org (its comment, edited in place). A run's change marks its rows in the transaction
-- that changes it; the feedback duty reports the run as it then is.
ALTER TABLE orgs ADD COLUMN pr_feedback TEXT COLLATE "C" NOT NULL DEFAULT 'both';
ALTER TABLE stacks ADD COLUMN pr_feedback TEXT COLLATE "C";

CREATE TABLE github_checks (
    run_id          TEXT COLLATE "C" PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
    org_id          TEXT COLLATE "C" NOT NULL,
    stack_id        TEXT COLLATE "C" NOT NULL,
    repository      TEXT COLLATE "C" NOT NULL,
    head_sha        TEXT COLLATE "C" NOT NULL,
    pull_request    BIGINT,
    checks          BIGINT NOT NULL,
    comment         BIGINT NOT NULL,
    check_run_id    BIGINT,
    changes         BIGINT NOT NULL,
    synced          BIGINT NOT NULL DEFAULT 0,
    attempts        BIGINT NOT NULL DEFAULT 0,
    next_attempt_at BIGINT,
    last_error      TEXT COLLATE "C",
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL
);
CREATE INDEX github_checks_due ON github_checks(next_attempt_at) WHERE next_attempt_at IS NOT NULL;
CREATE INDEX github_checks_commit ON github_checks(repository, head_sha);
CREATE INDEX github_checks_pr ON github_checks(org_id, repository, pull_request, stack_id, created_at)
    WHERE pull_request IS NOT NULL;

CREATE TABLE github_pr_comments (
    org_id          TEXT COLLATE "C" NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    repository      TEXT COLLATE "C" NOT NULL,
    pull_request    BIGINT NOT NULL,
    delivery_id     BIGINT,
    comment_id      BIGINT,
    create_started  BIGINT NOT NULL DEFAULT 0,
    changes         BIGINT NOT NULL,
    synced          BIGINT NOT NULL DEFAULT 0,
    attempts        BIGINT NOT NULL DEFAULT 0,
    next_attempt_at BIGINT,
    last_error      TEXT COLLATE "C",
    updated_at      BIGINT NOT NULL,
    PRIMARY KEY (org_id, repository, pull_request)
);
CREATE INDEX github_pr_comments_due ON github_pr_comments(next_attempt_at)
    WHERE next_attempt_at IS NOT NULL;
CREATE INDEX github_pr_comments_pr ON github_pr_comments(repository, pull_request);

-- A kind of feedback ('checks', 'comment') a repository's installation refused for want
-- of a permission: shown on its stacks' connection line, not tried again until it passes.
CREATE TABLE github_feedback_refusals (
    repository  TEXT COLLATE "C" NOT NULL,
    kind        TEXT COLLATE "C" NOT NULL,
    message     TEXT COLLATE "C" NOT NULL,
    until_at    BIGINT NOT NULL,
    PRIMARY KEY (repository, kind)
);
