-- Bosun schema (PostgreSQL) v10: runs of host plans — the record (with a snapshot of the plan source it
-- runs, its resolved target hosts and the lease fields of the runner protocol), per-host
-- results per step, and logs in numbered chunks like stack runs.
--
-- No foreign key to `plans`: a run's history outlives the plan file it ran.

CREATE TABLE plan_runs (
    id                  TEXT PRIMARY KEY,
    org_id              TEXT NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    plan                TEXT NOT NULL,
    plan_version        BIGINT NOT NULL,
    source              TEXT NOT NULL,          -- the plan YAML the run executes
    inputs              TEXT NOT NULL,          -- JSON object
    dry_run             BIGINT NOT NULL,
    state               TEXT NOT NULL,
    reason              TEXT,
    requested_by        TEXT NOT NULL,
    trigger             TEXT NOT NULL CHECK (trigger IN ('manual', 'schedule')),
    hosts               TEXT NOT NULL,          -- JSON array: target hosts, inventory order
    gated_environments  TEXT NOT NULL,          -- JSON array
    concurrent          BIGINT NOT NULL,       -- the plan allowed overlapping runs
    needs_lease         BIGINT NOT NULL,
    leased              BIGINT NOT NULL DEFAULT 0,
    started             BIGINT NOT NULL DEFAULT 0,
    cancel_requested    BIGINT NOT NULL DEFAULT 0,
    runner_id           TEXT,
    fencing             BIGINT NOT NULL DEFAULT 0,
    last_heartbeat      BIGINT,
    report              TEXT,                   -- JSON: the dry-run report / run summary
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
    run_id       TEXT NOT NULL REFERENCES plan_runs(id) ON DELETE CASCADE,
    step         BIGINT NOT NULL,      -- 1-based
    step_name    TEXT NOT NULL,
    module       TEXT NOT NULL,
    host         TEXT NOT NULL,
    status       TEXT NOT NULL,
    ignored      BIGINT NOT NULL DEFAULT 0,
    changed      BIGINT,
    exit_code    BIGINT,
    stdout       TEXT NOT NULL,
    stderr       TEXT NOT NULL,
    duration_ms  BIGINT NOT NULL,
    message      TEXT NOT NULL,
    diff         TEXT,
    PRIMARY KEY (run_id, step, host)
);

CREATE TABLE plan_run_logs (
    run_id  TEXT NOT NULL REFERENCES plan_runs(id) ON DELETE CASCADE,
    seq     BIGINT NOT NULL,
    text    TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);
