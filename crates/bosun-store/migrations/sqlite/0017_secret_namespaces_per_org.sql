-- Bosun schema v17: secret namespaces are per org. A namespace no longer belongs to the
-- first org that used it: `secrets` is keyed by (org, namespace, key) alone, so two orgs
-- may each have a namespace `aws`. Every org's secrets are kept as they are.

-- SQLite cannot drop a foreign key: `secrets` is rebuilt without the one into
-- `secret_namespaces`, copying every row (sealed values untouched), before that table goes.
CREATE TABLE secrets_v17 (
    org_id      TEXT NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    namespace   TEXT NOT NULL,
    key         TEXT NOT NULL,
    ciphertext  BLOB NOT NULL,
    nonce       BLOB NOT NULL,
    key_id      TEXT NOT NULL,              -- which secrets key sealed it (a fingerprint)
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    updated_by  TEXT,                       -- the actor of the last put
    PRIMARY KEY (org_id, namespace, key)
);
INSERT INTO secrets_v17 (org_id, namespace, key, ciphertext, nonce, key_id, created_at,
                         updated_at, updated_by)
SELECT org_id, namespace, key, ciphertext, nonce, key_id, created_at, updated_at, updated_by
FROM secrets;
DROP TABLE secrets;
ALTER TABLE secrets_v17 RENAME TO secrets;

-- Nothing refers to the claims any more; dropping them deletes no secret.
DROP TABLE secret_namespaces;
