-- Bosun schema v13: the holders of a held dependency run (SPEC §2.7).
--
-- A tracked run holds one queued run of each stack downstream of its stack, through the
-- whole chain below it; the held run's id comes from that root run and the stack, so a
-- stack reached on several paths (a diamond: D depends on B and C, both on A) gets ONE
-- held run with several holders. Each holder records its outcome when it ends: the held
-- run settles once every holder has one — any `failed` → skipped, else any `released`
-- → queued for a runner, else removed. `runs.upstream_run` stays the first holder.
CREATE TABLE run_holds (
    run_id          TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    upstream_run_id TEXT NOT NULL,      -- the holding run (no reference: it may be removed)
    outcome         TEXT CHECK (outcome IN ('released', 'unchanged', 'failed')),
                                        -- NULL while the holding run has not ended
    reason          TEXT,               -- what the holding run's end said, for the held run
    PRIMARY KEY (run_id, upstream_run_id)
);
CREATE INDEX run_holds_upstream ON run_holds (upstream_run_id) WHERE outcome IS NULL;

-- Every open held run so far had exactly one holder.
INSERT INTO run_holds (run_id, upstream_run_id)
SELECT id, upstream_run FROM runs WHERE held = 1 AND upstream_run IS NOT NULL;
