-- Bosun schema (PostgreSQL) v2: the state backend — immutable versions, the current pointer and lock.

-- Upstream stacks a run token may read the state of (JSON array of stack ids).
ALTER TABLE tokens ADD COLUMN read_stacks TEXT COLLATE "C" NOT NULL DEFAULT '[]';

CREATE TABLE state_versions (
    org_id       TEXT COLLATE "C" NOT NULL,
    stack_id     TEXT COLLATE "C" NOT NULL,
    version      BIGINT NOT NULL,          -- 1, 2, 3… per stack
    serial       BIGINT NOT NULL,
    lineage      TEXT COLLATE "C" NOT NULL,
    checksum     TEXT COLLATE "C" NOT NULL,             -- SHA-256 of body, hex
    size         BIGINT NOT NULL,
    writer_kind  TEXT COLLATE "C" NOT NULL CHECK (writer_kind IN ('user', 'run')),
    writer_id    TEXT COLLATE "C" NOT NULL,
    token_id     TEXT COLLATE "C",
    created_at   BIGINT NOT NULL,
    late_write   BIGINT NOT NULL,
    forced       BIGINT NOT NULL,
    outputs      TEXT COLLATE "C" NOT NULL,             -- JSON {name: {value, sensitive}}
    body         BYTEA NOT NULL,
    PRIMARY KEY (org_id, stack_id, version),
    FOREIGN KEY (org_id, stack_id) REFERENCES stacks(org_id, id) ON DELETE CASCADE
);

-- Versions are never rewritten.
CREATE FUNCTION state_versions_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'state versions are immutable';
END
$$;
CREATE TRIGGER state_versions_immutable BEFORE UPDATE ON state_versions
    FOR EACH ROW EXECUTE FUNCTION state_versions_immutable();

-- One row per stack with state: the current version and the lock, if held.
CREATE TABLE state_heads (
    org_id             TEXT COLLATE "C" NOT NULL,
    stack_id           TEXT COLLATE "C" NOT NULL,
    current_version    BIGINT,
    lock_id            TEXT COLLATE "C",
    lock_operation     TEXT COLLATE "C",
    lock_info          TEXT COLLATE "C",
    lock_who           TEXT COLLATE "C",
    lock_version       TEXT COLLATE "C",
    lock_created       TEXT COLLATE "C",
    lock_path          TEXT COLLATE "C",
    lock_holder_kind   TEXT COLLATE "C",
    lock_holder_id     TEXT COLLATE "C",
    lock_acquired_at   BIGINT,
    PRIMARY KEY (org_id, stack_id),
    FOREIGN KEY (org_id, stack_id) REFERENCES stacks(org_id, id) ON DELETE CASCADE
);
