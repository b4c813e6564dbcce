-- Bosun schema (PostgreSQL) v5: run identity — stacks' AWS roles, secrets sealed at rest and the
-- namespaces that own them, OIDC signing keys, and ID-token request tokens.

-- AWS through web identity: JSON {plan_role_arn, apply_role_arn, audience}, or NULL.
ALTER TABLE stacks ADD COLUMN aws TEXT COLLATE "C";

-- A namespace belongs to the first org that stores a secret in it; emptied, it stays theirs.
CREATE TABLE secret_namespaces (
    name        TEXT COLLATE "C" PRIMARY KEY,
    org_id      TEXT COLLATE "C" NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    created_at  BIGINT NOT NULL
);
CREATE INDEX secret_namespaces_org ON secret_namespaces(org_id);

-- Secrets, sealed with the server's secrets key (AEAD): the store never sees plaintext.
CREATE TABLE secrets (
    org_id      TEXT COLLATE "C" NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    namespace   TEXT COLLATE "C" NOT NULL REFERENCES secret_namespaces(name) ON DELETE CASCADE,
    key         TEXT COLLATE "C" NOT NULL,
    ciphertext  BYTEA NOT NULL,
    nonce       BYTEA NOT NULL,
    key_id      TEXT COLLATE "C" NOT NULL,              -- which secrets key sealed it (a fingerprint)
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL,
    updated_by  TEXT COLLATE "C",                       -- the actor of the last put
    PRIMARY KEY (org_id, namespace, key)
);

-- OIDC signing keys: the private half sealed, the public half as published (a JWK).
-- A key is current until a newer one retires it; retired keys stay published while
-- tokens they signed can still be valid, then are pruned.
CREATE TABLE oidc_signing_keys (
    rowid               BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,  -- insertion order
    kid                 TEXT COLLATE "C" PRIMARY KEY,
    private_ciphertext  BYTEA,
    private_nonce       BYTEA,
    key_id              TEXT COLLATE "C",
    public_jwk          TEXT COLLATE "C" NOT NULL,
    created_at          BIGINT NOT NULL,
    retired_at          BIGINT
);
CREATE INDEX oidc_signing_keys_created ON oidc_signing_keys(created_at);

-- Tokens letting one executing phase of a run request OIDC identity tokens.
CREATE TABLE id_request_tokens (
    secret_hash  TEXT COLLATE "C" PRIMARY KEY,          -- SHA-256 of the secret, hex
    run_id       TEXT COLLATE "C" NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    phase        TEXT COLLATE "C" NOT NULL CHECK (phase IN ('plan', 'apply')),
    fencing      BIGINT NOT NULL,
    expires_at   BIGINT NOT NULL
);
CREATE INDEX id_request_tokens_run ON id_request_tokens(run_id);
