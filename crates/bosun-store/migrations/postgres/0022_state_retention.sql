-- Bosun schema (PostgreSQL) v22: state version retention. The retention duty deletes old
-- versions of a stack, but never one a run still names: the upstream versions a
-- dependency run was given its inputs from (`runs.consumed`) are recorded here, one row
-- per run and version, so the prune asks for them by key instead of reading every run's
-- JSON. Deleting a version stays allowed (the immutability trigger refuses UPDATE only).
CREATE TABLE state_version_refs (
    org_id      TEXT COLLATE "C" NOT NULL,
    stack_id    TEXT COLLATE "C" NOT NULL,
    version     BIGINT NOT NULL,
    run_id      TEXT COLLATE "C" NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    PRIMARY KEY (org_id, stack_id, version, run_id)
);
CREATE INDEX state_version_refs_run ON state_version_refs(run_id);

-- Every run that consumed upstream outputs before v22.
INSERT INTO state_version_refs (org_id, stack_id, version, run_id)
SELECT DISTINCT r.org_id, c ->> 'stack', (c ->> 'version')::bigint, r.id
FROM runs r,
     jsonb_array_elements(CASE WHEN jsonb_typeof(r.consumed::jsonb) = 'array'
                               THEN r.consumed::jsonb ELSE '[]'::jsonb END) c
WHERE r.consumed IS NOT NULL
  AND jsonb_typeof(c -> 'stack') = 'string'
  AND jsonb_typeof(c -> 'version') = 'number'
ON CONFLICT DO NOTHING;

-- The stacks that have written more than the versions retention keeps (their head's
-- version number), found without counting every version of the store.
CREATE INDEX state_heads_versions ON state_heads(current_version);
