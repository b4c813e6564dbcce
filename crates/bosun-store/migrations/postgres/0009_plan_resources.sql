-- Bosun schema (PostgreSQL) v9: what plans run against — per-org environments (with the users granted
-- approval on them), hosts, and the plan files themselves (source as uploaded, versioned).

CREATE TABLE environments (
    org_id              TEXT COLLATE "C" NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    id                  TEXT COLLATE "C" NOT NULL,
    vars                TEXT COLLATE "C" NOT NULL,          -- JSON object
    requires_approval   BIGINT NOT NULL DEFAULT 0,
    protected           BIGINT NOT NULL DEFAULT 0,
    created_at          BIGINT NOT NULL,
    updated_at          BIGINT NOT NULL,
    updated_by          TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (org_id, id)
);

-- Users granted approval on a (protected) environment.
CREATE TABLE environment_grants (
    org_id          TEXT COLLATE "C" NOT NULL,
    environment_id  TEXT COLLATE "C" NOT NULL,
    user_id         TEXT COLLATE "C" NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    granted_at      BIGINT NOT NULL,
    granted_by      TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (org_id, environment_id, user_id),
    FOREIGN KEY (org_id, environment_id) REFERENCES environments(org_id, id) ON DELETE CASCADE
);

-- A host's environment cannot be deleted from under it (no cascade): the store refuses
-- naming the hosts.
CREATE TABLE hosts (
    org_id          TEXT COLLATE "C" NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    name            TEXT COLLATE "C" NOT NULL,
    address         TEXT COLLATE "C" NOT NULL,
    port            BIGINT NOT NULL CHECK (port BETWEEN 1 AND 65535),
    "user"            TEXT COLLATE "C",
    connection      TEXT COLLATE "C" NOT NULL CHECK (connection IN ('ssh', 'local')),
    labels          TEXT COLLATE "C" NOT NULL,              -- JSON array of strings
    vars            TEXT COLLATE "C" NOT NULL,              -- JSON object
    environment_id  TEXT COLLATE "C",
    identity_file   TEXT COLLATE "C",
    host_key        TEXT COLLATE "C",
    known_hosts     TEXT COLLATE "C",
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL,
    updated_by      TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (org_id, name),
    FOREIGN KEY (org_id, environment_id) REFERENCES environments(org_id, id)
);
CREATE INDEX hosts_environment ON hosts(org_id, environment_id);

CREATE TABLE plans (
    org_id      TEXT COLLATE "C" NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    name        TEXT COLLATE "C" NOT NULL,
    source      TEXT COLLATE "C" NOT NULL,              -- the YAML exactly as uploaded
    version     BIGINT NOT NULL,           -- 1 on create, +1 per update
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL,
    updated_by  TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (org_id, name)
);
