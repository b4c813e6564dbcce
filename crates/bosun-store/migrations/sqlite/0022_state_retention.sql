-- Bosun schema v22: state version retention. The retention duty deletes old versions of
-- a stack, but never one a run still names: the upstream versions a dependency run was
-- given its inputs from (`runs.consumed`) are recorded here, one row per run and version,
-- so the prune asks for them by key instead of reading every run's JSON. Deleting a
-- version stays allowed (the immutability trigger refuses UPDATE only).
CREATE TABLE state_version_refs (
    org_id      TEXT NOT NULL,
    stack_id    TEXT NOT NULL,
    version     INTEGER NOT NULL,
    run_id      TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    PRIMARY KEY (org_id, stack_id, version, run_id)
);
CREATE INDEX state_version_refs_run ON state_version_refs(run_id);

-- Every run that consumed upstream outputs before v22.
INSERT OR IGNORE INTO state_version_refs (org_id, stack_id, version, run_id)
SELECT r.org_id, json_extract(c.value, '$.stack'), json_extract(c.value, '$.version'), r.id
FROM runs r, json_each(CASE WHEN json_valid(r.consumed) AND json_type(r.consumed) = 'array'
                            THEN r.consumed ELSE '[]' END) c
WHERE r.consumed IS NOT NULL
  AND json_type(c.value, '$.stack') = 'text'
  AND json_type(c.value, '$.version') = 'integer';

-- The stacks that have written more than the versions retention keeps (their head's
-- version number), found without counting every version of the store.
CREATE INDEX state_heads_versions ON state_heads(current_version);
