-- Bosun schema (PostgreSQL) v19: when each log chunk arrived and, for stack runs, the
-- phase that wrote it (NULL for chunks stored before v19); and what a queued run waited
-- for: since when its current blocker holds it back, and every lock it waited behind (a
-- JSON list).
ALTER TABLE run_logs ADD COLUMN received_at BIGINT;
ALTER TABLE run_logs ADD COLUMN phase TEXT COLLATE "C";
ALTER TABLE plan_run_logs ADD COLUMN received_at BIGINT;
ALTER TABLE runs ADD COLUMN blocked_since BIGINT;
ALTER TABLE runs ADD COLUMN lock_waits TEXT COLLATE "C";
