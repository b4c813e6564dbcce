-- Bosun schema v37: a host may be reached through a bastion (`proxy_jump`: the name of
-- another host of its org, itself maybe behind one). The store refuses a bastion the org
-- does not have, a `local` one and a chain that comes back to a host it passed, and
-- refuses deleting a host that others jump through, naming them: they are found by this
-- index.
ALTER TABLE hosts ADD COLUMN proxy_jump TEXT COLLATE "C";
CREATE INDEX hosts_proxy_jump ON hosts(org_id, proxy_jump) WHERE proxy_jump IS NOT NULL;
