-- Bosun schema (PostgreSQL) v3: runs, their logs and plan files, and runners.

-- The server's own hosted pool authenticates with a pool token that belongs to no org:
-- rebuild `tokens` to allow org_id NULL for pool tokens.
CREATE TABLE tokens_v3 (
    id           TEXT COLLATE "C" PRIMARY KEY,
    kind         TEXT COLLATE "C" NOT NULL CHECK (kind IN ('personal', 'pool', 'run')),
    secret_hash  TEXT COLLATE "C" NOT NULL UNIQUE,
    description  TEXT COLLATE "C" NOT NULL DEFAULT '',
    user_id      TEXT COLLATE "C" REFERENCES users(id) ON DELETE CASCADE,
    org_id       TEXT COLLATE "C" REFERENCES orgs(id) ON DELETE CASCADE,
    pool         TEXT COLLATE "C",
    run_id       TEXT COLLATE "C",
    stack_id     TEXT COLLATE "C",
    created_at   BIGINT NOT NULL,
    expires_at   BIGINT,
    revoked_at   BIGINT,
    read_stacks  TEXT COLLATE "C" NOT NULL DEFAULT '[]',
    CHECK (kind <> 'personal' OR user_id IS NOT NULL),
    CHECK (kind <> 'pool' OR pool IS NOT NULL),
    CHECK (kind <> 'run' OR (org_id IS NOT NULL AND run_id IS NOT NULL))
);
INSERT INTO tokens_v3 (id, kind, secret_hash, description, user_id, org_id, pool, run_id,
                       stack_id, created_at, expires_at, revoked_at, read_stacks)
SELECT id, kind, secret_hash, description, user_id, org_id, pool, run_id, stack_id,
       created_at, expires_at, revoked_at, read_stacks FROM tokens;
DROP TABLE tokens;
ALTER TABLE tokens_v3 RENAME TO tokens;
CREATE INDEX tokens_user ON tokens(user_id);
CREATE INDEX tokens_org ON tokens(org_id, kind);
CREATE INDEX tokens_run ON tokens(run_id);

CREATE TABLE runs (
    id               TEXT COLLATE "C" PRIMARY KEY,
    org_id           TEXT COLLATE "C" NOT NULL,
    stack_id         TEXT COLLATE "C" NOT NULL,
    kind             TEXT COLLATE "C" NOT NULL,
    trigger          TEXT COLLATE "C" NOT NULL,
    state            TEXT COLLATE "C" NOT NULL,
    phase            TEXT COLLATE "C" NOT NULL,
    needs_lease      BIGINT NOT NULL,
    leased           BIGINT NOT NULL DEFAULT 0,
    started          BIGINT NOT NULL DEFAULT 0,
    cancel_requested BIGINT NOT NULL DEFAULT 0,
    reason           TEXT COLLATE "C",
    triggered_by     TEXT COLLATE "C" NOT NULL,
    commit_sha       TEXT COLLATE "C",
    branch           TEXT COLLATE "C" NOT NULL,
    retry_of         TEXT COLLATE "C",
    plan_summary     TEXT COLLATE "C",            -- JSON PlanSummary
    blocked_by       TEXT COLLATE "C",            -- JSON lock info of a blocking holder
    late_write       BIGINT NOT NULL DEFAULT 0,
    runner_id        TEXT COLLATE "C",
    fencing          BIGINT NOT NULL DEFAULT 0,
    last_heartbeat   BIGINT,
    phase_started_at BIGINT,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    FOREIGN KEY (org_id, stack_id) REFERENCES stacks(org_id, id) ON DELETE CASCADE
);
CREATE INDEX runs_dispatch ON runs(needs_lease, created_at);
CREATE INDEX runs_stack ON runs(org_id, stack_id, created_at);
CREATE INDEX runs_executing ON runs(leased, last_heartbeat);

-- One row per state a run passed through, for phase timings. `rowid` keeps their order
-- (SQLite's implicit rowid).
CREATE TABLE run_phases (
    rowid       BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id      TEXT COLLATE "C" NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    state       TEXT COLLATE "C" NOT NULL,
    started_at  BIGINT NOT NULL,
    ended_at    BIGINT
);
CREATE INDEX run_phases_run ON run_phases(run_id);

CREATE TABLE run_logs (
    run_id  TEXT COLLATE "C" NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    seq     BIGINT NOT NULL,
    text    TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE run_plans (
    run_id  TEXT COLLATE "C" PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
    body    BYTEA NOT NULL
);

CREATE TABLE runners (
    id          TEXT COLLATE "C" PRIMARY KEY,
    org_id      TEXT COLLATE "C",                 -- NULL: the server's hosted pool, every org
    pool        TEXT COLLATE "C" NOT NULL,
    name        TEXT COLLATE "C" NOT NULL,
    version     TEXT COLLATE "C" NOT NULL,
    drained     BIGINT NOT NULL DEFAULT 0,
    last_seen   BIGINT NOT NULL,
    created_at  BIGINT NOT NULL
);
