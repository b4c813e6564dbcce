-- Bosun schema v28: plan runs past the run retention are summarised like stack runs —
-- their log deleted and what each step printed (stdout, stderr, diff) blanked, the record,
-- the per-host statuses and the report kept; `summarised_at` says when (NULL for every
-- other run). The index finds the ended runs not yet summarised by age.
ALTER TABLE plan_runs ADD COLUMN summarised_at INTEGER;
CREATE INDEX plan_runs_unsummarised ON plan_runs(ended_at, id) WHERE summarised_at IS NULL;
