-- Bosun schema v31: a run not yet over carries its stack's runner pool in `pool`, set when
-- the run is created and kept current when the stack changes pool. A runner's lease reads
-- its own pool's waiting runs from their index, so a lease costs the same however many
-- runs wait in other pools.
ALTER TABLE runs ADD COLUMN pool TEXT;
UPDATE runs SET pool = (
    SELECT s.runner_pool FROM stacks s WHERE s.org_id = runs.org_id AND s.id = runs.stack_id)
WHERE state NOT IN ('finished', 'failed', 'discarded', 'canceled', 'interrupted', 'force_failed', 'skipped');
CREATE INDEX runs_lease_pool ON runs(pool, created_at, id) WHERE needs_lease = 1;
