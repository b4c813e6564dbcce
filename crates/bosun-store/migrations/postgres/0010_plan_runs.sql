-- Bosun schema (PostgreSQL) v10: runs of host plans — the record (with a snapshot of the plan source it
-- runs, its resolved target hosts and the lease fields of the runner protocol), per-host
-- results per step, and logs in numbered chunks like stack runs.
--
-- No foreign key to `plans`: a run's history outlives the plan file it ran.

CREATE TABLE plan_runs (
    id                  TEXT COLLATE "C" PRIMARY KEY,
    org_id              TEXT COLLATE "C" NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    plan                TEXT COLLATE "C" NOT NULL,
    plan_version        BIGINT NOT NULL,
    source              TEXT COLLATE "C" NOT NULL,          -- the plan YAML the run executes
    inputs              TEXT COLLATE "C" NOT NULL,          -- JSON object
    dry_run             BIGINT NOT NULL,
    state               TEXT COLLATE "C" NOT NULL,
    reason              TEXT COLLATE "C",
    requested_by        TEXT COLLATE "C" NOT NULL,
    trigger             TEXT COLLATE "C" NOT NULL CHECK (trigger IN ('manual', 'schedule')),
    hosts               TEXT COLLATE "C" NOT NULL,          -- JSON array: target hosts, inventory order
    gated_environments  TEXT COLLATE "C" NOT NULL,          -- JSON array
    concurrent          BIGINT NOT NULL,       -- the plan allowed overlapping runs
    needs_lease         BIGINT NOT NULL,
    leased              BIGINT NOT NULL DEFAULT 0,
    started             BIGINT NOT NULL DEFAULT 0,
    cancel_requested    BIGINT NOT NULL DEFAULT 0,
    runner_id           TEXT COLLATE "C",
    fencing             BIGINT NOT NULL DEFAULT 0,
    last_heartbeat      BIGINT,
    report              TEXT COLLATE "C",                   -- JSON: the dry-run report / run summary
    created_at          BIGINT NOT NULL,
    updated_at          BIGINT NOT NULL,
    ended_at            BIGINT
);
CREATE INDEX plan_runs_dispatch ON plan_runs(needs_lease, created_at);
CREATE INDEX plan_runs_plan ON plan_runs(org_id, plan, created_at);
CREATE INDEX plan_runs_active ON plan_runs(org_id, plan, state);
CREATE INDEX plan_runs_executing ON plan_runs(leased, last_heartbeat);

-- One row per step and host; a runner reports a step's results as the step ends, again
-- if it resends (the last report wins).
CREATE TABLE plan_run_results (
    run_id       TEXT COLLATE "C" NOT NULL REFERENCES plan_runs(id) ON DELETE CASCADE,
    step         BIGINT NOT NULL,      -- 1-based
    step_name    TEXT COLLATE "C" NOT NULL,
    module       TEXT COLLATE "C" NOT NULL,
    host         TEXT COLLATE "C" NOT NULL,
    status       TEXT COLLATE "C" NOT NULL,
    ignored      BIGINT NOT NULL DEFAULT 0,
    changed      BIGINT,
    exit_code    BIGINT,
    stdout       TEXT COLLATE "C" NOT NULL,
    stderr       TEXT COLLATE "C" NOT NULL,
    duration_ms  BIGINT NOT NULL,
    message      TEXT COLLATE "C" NOT NULL,
    diff         TEXT COLLATE "C",
    PRIMARY KEY (run_id, step, host)
);

CREATE TABLE plan_run_logs (
    run_id  TEXT COLLATE "C" NOT NULL REFERENCES plan_runs(id) ON DELETE CASCADE,
    seq     BIGINT NOT NULL,
    text    TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (run_id, seq)
);
