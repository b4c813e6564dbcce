-- Bosun schema (PostgreSQL) v30: /metrics names at most a bounded number of stacks: the most overdue
-- stale drift checks and the oldest held state locks, each read in age order from an
-- index of its own, and counted per org from the same index — never one series per
-- drift-checked stack or per held lock of the whole store.
CREATE INDEX drift_schedules_stale_by_age ON drift_schedules(stale_at);
CREATE INDEX state_heads_lock_age ON state_heads(lock_acquired_at) WHERE lock_id IS NOT NULL;
