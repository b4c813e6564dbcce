-- Bosun schema v40: hosts from stack outputs. An environment may take hosts from stacks'
-- outputs (`hosts_from`: a JSON list of sources); the hosts a plan run's start resolved
-- from them are kept as hosts of that environment, marked with where they came from
-- (`source_env` and `source`: stack, output and state version), and the run records
-- what it resolved (`plan_runs.sources`).
ALTER TABLE environments ADD COLUMN hosts_from TEXT;
ALTER TABLE hosts ADD COLUMN source_env TEXT COLLATE "C";
ALTER TABLE hosts ADD COLUMN source TEXT;
CREATE INDEX hosts_source ON hosts(org_id, source_env);
ALTER TABLE plan_runs ADD COLUMN sources TEXT;
