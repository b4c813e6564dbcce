-- Bosun schema (PostgreSQL) v17: secret namespaces are per org. A namespace no longer
-- belongs to the first org that used it: `secrets` is keyed by (org, namespace, key)
-- alone, so two orgs may each have a namespace `aws`. Every org's secrets are kept as
-- they are.

-- The foreign key into the claims goes first (by its default name), so dropping the
-- claims deletes no secret.
ALTER TABLE secrets DROP CONSTRAINT secrets_namespace_fkey;
DROP TABLE secret_namespaces;
