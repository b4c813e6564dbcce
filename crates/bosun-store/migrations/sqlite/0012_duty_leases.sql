-- Bosun schema v12: duty leases. Several server replicas may share one database; each
-- background duty (stale sweep, revoke, git poll, key rotation, notification delivery,
-- scheduler) runs a pass only while its replica holds the duty's lease. A lease is taken
-- when free or expired, renewed by its holder, refused to anyone else — one
-- compare-and-set (`try_duty_lease`). A dead replica's leases expire within a few of the
-- duty's intervals and another replica takes the duty over.

CREATE TABLE duty_leases (
    duty        TEXT PRIMARY KEY,       -- the duty's name, e.g. `stale_sweep`
    holder      TEXT NOT NULL,          -- the replica id holding it
    expires_at  INTEGER NOT NULL        -- Unix ms
);
