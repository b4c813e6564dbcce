-- Bosun schema (PostgreSQL) v11: the approvals inbox's decisions and plan schedules.
--
-- A decision is written in the transaction that moves its run (approve: a plan run to
-- `queued`, a stack run confirmed; reject: a plan run `rejected`, a stack run discarded),
-- with its audit record. One decision per run: a decided run has left the inbox.

CREATE TABLE approvals (
    subject_id      TEXT COLLATE "C" PRIMARY KEY,           -- the plan run or stack run decided
    org_id          TEXT COLLATE "C" NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    subject_kind    TEXT COLLATE "C" NOT NULL CHECK (subject_kind IN ('plan_run', 'stack_run')),
    target          TEXT COLLATE "C" NOT NULL,              -- the plan or the stack
    environments    TEXT COLLATE "C" NOT NULL,              -- JSON array: the gated environments
    requested_by    TEXT COLLATE "C" NOT NULL,
    decision        TEXT COLLATE "C" NOT NULL CHECK (decision IN ('approved', 'rejected')),
    decided_by      TEXT COLLATE "C" NOT NULL,
    comment         TEXT COLLATE "C",
    decided_at      BIGINT NOT NULL
);
CREATE INDEX approvals_org ON approvals(org_id, decided_at);

-- One cron schedule per plan, with the scheduler's bookkeeping (like drift_schedules):
-- `armed_cron`/`armed_timezone` are what `next_at` was computed from; a schedule whose
-- settings differ is re-armed from scratch.
CREATE TABLE plan_schedules (
    org_id          TEXT COLLATE "C" NOT NULL,
    plan            TEXT COLLATE "C" NOT NULL,
    cron            TEXT COLLATE "C" NOT NULL,
    timezone        TEXT COLLATE "C" NOT NULL,
    inputs          TEXT COLLATE "C" NOT NULL,              -- JSON object: the scheduled runs' inputs
    updated_at      BIGINT NOT NULL,
    updated_by      TEXT COLLATE "C" NOT NULL,
    armed_cron      TEXT COLLATE "C",
    armed_timezone  TEXT COLLATE "C",
    since           BIGINT,                    -- when the armed schedule took effect
    next_at         BIGINT,
    last_fire_at    BIGINT,
    last_fire_run   TEXT COLLATE "C",                       -- the plan run it created, if any
    last_fire_note  TEXT COLLATE "C",                       -- missed fire times, or why no run
    PRIMARY KEY (org_id, plan),
    FOREIGN KEY (org_id, plan) REFERENCES plans(org_id, name) ON DELETE CASCADE
);
