-- Bosun schema (PostgreSQL) v23: run logs compressed at rest, and finished runs summarised. Once a run has ended, the
-- retention duty packs its log chunks into blocks of consecutive chunks (their JSON,
-- zlib-compressed) and deletes the rows; readers take rows and blocks as one sequence, so
-- chunks stored before v23 keep reading. `raw_bytes` is a block's inflated length: reading
-- refuses a block that inflates past it. Blocks go with their run.
CREATE TABLE run_log_blocks (
    run_id      TEXT COLLATE "C" NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    first_seq   BIGINT NOT NULL,
    last_seq    BIGINT NOT NULL,
    chunks      BIGINT NOT NULL,
    raw_bytes   BIGINT NOT NULL,
    body        BYTEA NOT NULL,
    PRIMARY KEY (run_id, first_seq)
);

CREATE TABLE plan_run_log_blocks (
    run_id      TEXT COLLATE "C" NOT NULL REFERENCES plan_runs(id) ON DELETE CASCADE,
    first_seq   BIGINT NOT NULL,
    last_seq    BIGINT NOT NULL,
    chunks      BIGINT NOT NULL,
    raw_bytes   BIGINT NOT NULL,
    body        BYTEA NOT NULL,
    PRIMARY KEY (run_id, first_seq)
);

-- Finished runs past the run retention are summarised: their log, saved plan file and the
-- detail of their plan (resource and output changes) deleted, the record kept with its
-- counts; `summarised_at` says when (NULL for every other run). The index finds the runs
-- not yet summarised by age.
ALTER TABLE runs ADD COLUMN summarised_at BIGINT;
CREATE INDEX runs_unsummarised ON runs(updated_at) WHERE summarised_at IS NULL;
