-- Bosun schema (PostgreSQL) v33: how a runner's engines reach the network, as it
-- registered it: 'restricted' (the egress sandbox), 'unrestricted' (no sandbox: a
-- self-hosted runner's default) or 'opted_out' (a hosted runner started with
-- --egress-unrestricted). NULL: the runner did not say (a version that predates the
-- sandbox).
ALTER TABLE runners ADD COLUMN egress TEXT COLLATE "C";
