-- Bosun schema (PostgreSQL) v11: the approvals inbox's decisions and plan schedules.
--
-- A decision is written in the transaction that moves its run (approve: a plan run to
-- `queued`, a stack run confirmed; reject: a plan run `rejected`, a stack run discarded),
-- with its audit record. One decision per run: a decided run has left the inbox.

CREATE TABLE approvals (
    subject_id      TEXT PRIMARY KEY,           -- the plan run or stack run decided
    org_id          TEXT NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    subject_kind    TEXT NOT NULL CHECK (subject_kind IN ('plan_run', 'stack_run')),
    target          TEXT NOT NULL,              -- the plan or the stack
    environments    TEXT NOT NULL,              -- JSON array: the gated environments
    requested_by    TEXT NOT NULL,
    decision        TEXT NOT NULL CHECK (decision IN ('approved', 'rejected')),
    decided_by      TEXT NOT NULL,
    comment         TEXT,
    decided_at      BIGINT NOT NULL
);
CREATE INDEX approvals_org ON approvals(org_id, decided_at);

-- One cron schedule per plan, with the scheduler's bookkeeping (like drift_schedules):
-- `armed_cron`/`armed_timezone` are what `next_at` was computed from; a schedule whose
-- settings differ is re-armed from scratch.
CREATE TABLE plan_schedules (
    org_id          TEXT NOT NULL,
    plan            TEXT NOT NULL,
    cron            TEXT NOT NULL,
    timezone        TEXT NOT NULL,
    inputs          TEXT NOT NULL,              -- JSON object: the scheduled runs' inputs
    updated_at      BIGINT NOT NULL,
    updated_by      TEXT NOT NULL,
    armed_cron      TEXT,
    armed_timezone  TEXT,
    since           BIGINT,                    -- when the armed schedule took effect
    next_at         BIGINT,
    last_fire_at    BIGINT,
    last_fire_run   TEXT,                       -- the plan run it created, if any
    last_fire_note  TEXT,                       -- missed fire times, or why no run
    PRIMARY KEY (org_id, plan),
    FOREIGN KEY (org_id, plan) REFERENCES plans(org_id, name) ON DELETE CASCADE
);
