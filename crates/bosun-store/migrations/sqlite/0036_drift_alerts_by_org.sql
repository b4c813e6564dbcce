-- Bosun schema v36: the drift dashboard counts one org's stale stacks whose alert is not
-- raised yet (`alert_at` passed) from this index, up to the page's cap — not every org's
-- pending alerts filtered to its own. After an outage of the scheduler, every stale stack
-- of every org is pending at once.
CREATE INDEX drift_schedules_alert_by_org ON drift_schedules(org_id, alert_at)
WHERE alert_at IS NOT NULL;
