-- Bosun schema v25: the approvals inbox pages through the runs waiting for approval in
-- (creation, id) order, each kind from a partial index holding just its waiting runs —
-- never every org's unconfirmed runs, nor a whole org's sorted.
CREATE INDEX runs_unconfirmed ON runs(org_id, created_at, id)
    WHERE state = 'unconfirmed' AND kind = 'tracked';
CREATE INDEX plan_runs_paused ON plan_runs(org_id, created_at, id) WHERE state = 'paused';
