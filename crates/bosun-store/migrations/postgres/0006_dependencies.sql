-- Stack dependencies (SPEC §2.7). A tracked run of an upstream stack holds one queued
-- run of each downstream stack (trigger `dependency`) until it ends: released when its
-- outputs changed (or the dependency says trigger_always), removed when they did not,
-- skipped when the upstream failed. `consumed` records which upstream outputs, from
-- which state versions, a run was given.
ALTER TABLE runs ADD COLUMN upstream_run TEXT COLLATE "C";
ALTER TABLE runs ADD COLUMN held BIGINT NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN consumed TEXT COLLATE "C";
CREATE INDEX runs_upstream ON runs (upstream_run) WHERE upstream_run IS NOT NULL;
