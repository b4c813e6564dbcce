-- Bosun schema (PostgreSQL) v14: notification retention. The delivery duty prunes settled deliveries
-- and then events that have none left, both by age, in small batches: these indexes
-- find the old rows without a scan, and let deleting an event check (and the prune
-- ask) for its deliveries by event id.

CREATE INDEX notification_deliveries_settled
    ON notification_deliveries(created_at) WHERE next_attempt_at IS NULL;
CREATE INDEX notification_deliveries_event ON notification_deliveries(event_id);
CREATE INDEX notification_events_created ON notification_events(created_at);
