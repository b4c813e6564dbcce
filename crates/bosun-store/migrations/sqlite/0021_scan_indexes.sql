-- Bosun schema v21: indexes for the statements that read every row of a table growing
-- with the store (found by the query-plan guard, crates/bosun-server/tests/query_plans.rs).
--
-- Held locks only: the notification duty's lock-age check and /metrics' held locks.
CREATE INDEX state_heads_locked ON state_heads(org_id, stack_id) WHERE lock_id IS NOT NULL;
-- State versions written late (after their run's lease ended), counted by /metrics.
CREATE INDEX state_versions_late ON state_versions(org_id) WHERE late_write = 1;
-- An org's runners (its own and the hosted pool's, org_id NULL), in registration order.
CREATE INDEX runners_org ON runners(org_id, created_at, id);
-- The poller's stacks (repositories not on GitHub) and the schedules duty's drift-checked
-- stacks: each a partial index holding just those stacks, in (org, id) order.
CREATE INDEX stacks_git_remote ON stacks(org_id, id) WHERE substr(repository, 1, 7) <> 'github:';
CREATE INDEX stacks_drift ON stacks(org_id, id) WHERE drift_detection IS NOT NULL;
