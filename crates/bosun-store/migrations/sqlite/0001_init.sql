-- Bosun schema v1: tenancy, tokens, stacks and the audit log.
-- Timestamps are Unix milliseconds (UTC).

CREATE TABLE orgs (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    created_at  INTEGER NOT NULL
);

CREATE TABLE users (
    id            TEXT PRIMARY KEY,
    server_admin  INTEGER NOT NULL DEFAULT 0,
    created_at    INTEGER NOT NULL
);

CREATE TABLE memberships (
    org_id   TEXT NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    user_id  TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    role     TEXT NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    PRIMARY KEY (org_id, user_id)
);
CREATE INDEX memberships_user ON memberships(user_id);

CREATE TABLE tokens (
    id           TEXT PRIMARY KEY,
    kind         TEXT NOT NULL CHECK (kind IN ('personal', 'pool', 'run')),
    secret_hash  TEXT NOT NULL UNIQUE,
    description  TEXT NOT NULL DEFAULT '',
    user_id      TEXT REFERENCES users(id) ON DELETE CASCADE,
    org_id       TEXT REFERENCES orgs(id) ON DELETE CASCADE,
    pool         TEXT,
    run_id       TEXT,
    stack_id     TEXT,
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER,
    revoked_at   INTEGER,
    CHECK (kind <> 'personal' OR user_id IS NOT NULL),
    CHECK (kind <> 'pool' OR (org_id IS NOT NULL AND pool IS NOT NULL)),
    CHECK (kind <> 'run' OR (org_id IS NOT NULL AND run_id IS NOT NULL))
);
CREATE INDEX tokens_user ON tokens(user_id);
CREATE INDEX tokens_org ON tokens(org_id, kind);
CREATE INDEX tokens_run ON tokens(run_id);

CREATE TABLE stacks (
    org_id           TEXT NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    id               TEXT NOT NULL,
    name             TEXT NOT NULL,
    repository       TEXT NOT NULL,
    branch           TEXT NOT NULL,
    path             TEXT NOT NULL,
    watch_paths      TEXT NOT NULL,   -- JSON array of strings
    engine           TEXT NOT NULL,
    engine_binary    TEXT,
    engine_version   TEXT,
    tier             TEXT NOT NULL,
    autodeploy       INTEGER NOT NULL,
    environment      TEXT,
    variables        TEXT NOT NULL,   -- JSON object name -> value
    depends_on       TEXT NOT NULL,   -- JSON array of {stack, outputs, trigger_always}
    drift_detection  TEXT,            -- JSON {schedule, reconcile} or NULL
    runner_pool      TEXT NOT NULL,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    PRIMARY KEY (org_id, id)
);

-- Upstream edges, kept beside the JSON so "who depends on X" is one indexed lookup.
CREATE TABLE stack_dependencies (
    org_id    TEXT NOT NULL,
    stack_id  TEXT NOT NULL,
    upstream  TEXT NOT NULL,
    PRIMARY KEY (org_id, stack_id, upstream),
    FOREIGN KEY (org_id, stack_id) REFERENCES stacks(org_id, id) ON DELETE CASCADE
);
CREATE INDEX stack_dependencies_upstream ON stack_dependencies(org_id, upstream);

CREATE TABLE audit_log (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    at         INTEGER NOT NULL,
    org_id     TEXT,
    actor      TEXT NOT NULL,
    token_id   TEXT,
    action     TEXT NOT NULL,
    target     TEXT NOT NULL,
    detail     TEXT NOT NULL
);
CREATE INDEX audit_log_org ON audit_log(org_id, seq);

-- The audit log is append-only: the database itself refuses edits.
CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
BEGIN SELECT RAISE(ABORT, 'audit_log is append-only'); END;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
BEGIN SELECT RAISE(ABORT, 'audit_log is append-only'); END;
