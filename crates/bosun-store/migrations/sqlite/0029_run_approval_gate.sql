-- Bosun schema v29: a tracked run waiting in `unconfirmed` on a stack whose environment
-- requires approval carries that environment in `gate` (NULL for every other run), kept
-- current when the run moves, the stack changes environment, or the environment's rule
-- changes. The approvals inbox pages through the gated runs' own index, so a page costs
-- the same however many runs of the org wait for a plain confirmation.
ALTER TABLE runs ADD COLUMN gate TEXT;
UPDATE runs SET gate = (
    SELECT e.id FROM stacks s JOIN environments e ON e.org_id = s.org_id AND e.id = s.environment
    WHERE s.org_id = runs.org_id AND s.id = runs.stack_id AND e.requires_approval = 1)
WHERE state = 'unconfirmed' AND kind = 'tracked';
CREATE INDEX runs_gated ON runs(org_id, created_at, id) WHERE gate IS NOT NULL;
