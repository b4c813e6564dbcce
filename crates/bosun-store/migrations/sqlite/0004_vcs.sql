-- Bosun schema v4: VCS — repository keys, GitHub App bindings, deliveries and their
-- decisions, VCS tokens handed to runs, and the git poller's heads.

-- The pull request a proposed run plans, and the delivery (webhook or poll) that started it.
ALTER TABLE runs ADD COLUMN pull_request INTEGER;
ALTER TABLE runs ADD COLUMN delivery_id INTEGER;
CREATE INDEX runs_pull_request ON runs(org_id, stack_id, pull_request)
    WHERE pull_request IS NOT NULL;

-- The key events are routed by (`Repository::key`): `github:owner/repo` in lower case, or
-- the git URL as written.
ALTER TABLE stacks ADD COLUMN repo_key TEXT NOT NULL DEFAULT '';
UPDATE stacks SET repo_key = CASE
    WHEN substr(repository, 1, 7) = 'github:' THEN lower(repository)
    ELSE repository
END;
CREATE INDEX stacks_repo_key ON stacks(repo_key, branch);

-- Which installation of the GitHub App covers a repository.
CREATE TABLE github_bindings (
    repository    TEXT PRIMARY KEY,          -- owner/repo, lower case
    installation  INTEGER NOT NULL,
    account       TEXT NOT NULL,
    suspended     INTEGER NOT NULL DEFAULT 0,
    updated_at    INTEGER NOT NULL
);
CREATE INDEX github_bindings_installation ON github_bindings(installation);

-- Every delivery received, duplicates included (they point at the first one).
CREATE TABLE deliveries (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    source        TEXT NOT NULL CHECK (source IN ('github', 'poll')),
    guid          TEXT NOT NULL,
    event         TEXT NOT NULL,
    action        TEXT,
    repository    TEXT,
    git_ref       TEXT,
    before_sha    TEXT,
    after_sha     TEXT,
    pull_request  INTEGER,
    summary       TEXT NOT NULL,
    duplicate_of  INTEGER REFERENCES deliveries(id),
    received_at   INTEGER NOT NULL
);
-- A guid is applied once per source.
CREATE UNIQUE INDEX deliveries_guid ON deliveries(source, guid) WHERE duplicate_of IS NULL;

-- The verdict of a delivery on each stack it concerned: a stack's trigger history.
CREATE TABLE trigger_decisions (
    delivery_id  INTEGER NOT NULL REFERENCES deliveries(id) ON DELETE CASCADE,
    org_id       TEXT NOT NULL,
    stack_id     TEXT NOT NULL,
    run_id       TEXT,
    reason       TEXT NOT NULL,
    PRIMARY KEY (delivery_id, org_id, stack_id),
    FOREIGN KEY (org_id, stack_id) REFERENCES stacks(org_id, id) ON DELETE CASCADE
);
CREATE INDEX trigger_decisions_stack ON trigger_decisions(org_id, stack_id, delivery_id DESC);

-- Short-lived VCS credentials handed to runs, kept until revoked.
CREATE TABLE vcs_tokens (
    token       TEXT PRIMARY KEY,
    run_id      TEXT NOT NULL,
    expires_at  INTEGER NOT NULL
);
CREATE INDEX vcs_tokens_run ON vcs_tokens(run_id);

-- The last commit the poller saw on a git remote's branch.
CREATE TABLE poll_heads (
    repository  TEXT NOT NULL,
    branch      TEXT NOT NULL,
    commit_sha  TEXT NOT NULL,
    checked_at  INTEGER NOT NULL,
    PRIMARY KEY (repository, branch)
);
