-- Bosun schema v27: VCS deliveries kept for the delivery retention (90 days by default) —
-- the retention duty deletes the oldest with their trigger decisions, and the
-- redeliveries that repeat them.
CREATE INDEX deliveries_received ON deliveries(received_at, id);
CREATE INDEX deliveries_repeats ON deliveries(duplicate_of) WHERE duplicate_of IS NOT NULL;
