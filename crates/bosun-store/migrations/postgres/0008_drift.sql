-- Bosun schema (PostgreSQL) v8: drift detection — each stack's schedule bookkeeping, and the settled
-- result of every ended drift run (with the tracked run a reconcile started).

-- One row per stack the scheduler has armed. `schedule`/`timezone` are what `next_at`
-- was computed from: a stack whose drift settings differ is re-armed from scratch.
CREATE TABLE drift_schedules (
    org_id          TEXT COLLATE "C" NOT NULL,
    stack_id        TEXT COLLATE "C" NOT NULL,
    schedule        TEXT COLLATE "C" NOT NULL,
    timezone        TEXT COLLATE "C" NOT NULL,
    since           BIGINT NOT NULL,   -- when this schedule took effect
    next_at         BIGINT NOT NULL,
    last_fire_at    BIGINT,
    last_fire_run   TEXT COLLATE "C",               -- the drift run it started, if it started one
    last_fire_note  TEXT COLLATE "C",               -- missed fire times, or why it started none
    PRIMARY KEY (org_id, stack_id),
    FOREIGN KEY (org_id, stack_id) REFERENCES stacks(org_id, id) ON DELETE CASCADE
);

CREATE TABLE drift_checks (
    run_id          TEXT COLLATE "C" PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
    org_id          TEXT COLLATE "C" NOT NULL,
    stack_id        TEXT COLLATE "C" NOT NULL,
    result          TEXT COLLATE "C" NOT NULL CHECK (result IN ('no_drift', 'drift_detected', 'failed')),
    checked_at      BIGINT NOT NULL,
    reconcile_run   TEXT COLLATE "C"
);
CREATE INDEX drift_checks_stack ON drift_checks(org_id, stack_id, checked_at);
CREATE INDEX drift_checks_reconcile ON drift_checks(reconcile_run);
CREATE INDEX runs_kind_state ON runs(kind, state);

-- Drift runs that ended before this version are settled as they stand: a reconcile is
-- never started for old news.
INSERT INTO drift_checks (run_id, org_id, stack_id, result, checked_at)
SELECT id, org_id, stack_id,
       CASE
           WHEN state = 'finished' AND (plan_summary::jsonb -> 'has_changes') = 'true'::jsonb
               THEN 'drift_detected'
           WHEN state = 'finished' AND plan_summary IS NOT NULL THEN 'no_drift'
           ELSE 'failed'
       END,
       updated_at
FROM runs
WHERE kind = 'drift'
  AND state IN ('finished', 'failed', 'discarded', 'canceled', 'interrupted', 'force_failed',
                'skipped');
