-- Bosun schema (PostgreSQL) v20: plan-run previews. A real plan run that starts paused (a
-- target host's environment requires approval) is created with a dry run of the same plan
-- version, hosts and inputs beside it, its preview, so the approver sees what the run
-- would change. Each names the other; NULL for every other run.
--
-- No foreign keys: the two rows are written in one transaction, and deleted together
-- with their org.
ALTER TABLE plan_runs ADD COLUMN preview TEXT;
ALTER TABLE plan_runs ADD COLUMN preview_of TEXT;
