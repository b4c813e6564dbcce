-- Bosun schema v34: the index of a stack's downstream stacks carries their ids, so
-- finding them reads that stack's rows alone. Without the id in it, SQLite preferred the
-- primary key (it covers the id) narrowed by the org only, reading every dependency of
-- the org for each stack page and each finished tracked run.
DROP INDEX stack_dependencies_upstream;
CREATE INDEX stack_dependencies_upstream ON stack_dependencies(org_id, upstream, stack_id);
