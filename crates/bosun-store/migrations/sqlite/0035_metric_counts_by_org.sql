-- Bosun schema v35: /metrics' per-org figures that used to be counted at each scrape —
-- held state locks, and drift-checked stacks whose checking is stale — are kept in
-- `metric_counts` by triggers as the run counts are, so a scrape reads a few rows however
-- many stacks are locked or stale; the counts are read through an index of their own.
--
-- `locks:<org>`: held state locks. `drift_stale:<org>`: stacks whose stale-check alert
-- was raised for the current episode (`alert_at` cleared, `stale_at` set and finite);
-- the stacks stale but not alerted yet are the few with `alert_at` past, read from their
-- index at each scrape.
CREATE INDEX metric_counts_metric ON metric_counts(metric, n);

INSERT INTO metric_counts (metric, n)
SELECT 'locks:' || org_id, COUNT(*) FROM state_heads WHERE lock_id IS NOT NULL GROUP BY org_id;
INSERT INTO metric_counts (metric, n)
SELECT 'drift_stale:' || org_id, COUNT(*) FROM drift_schedules
WHERE alert_at IS NULL AND stale_at IS NOT NULL AND stale_at <> 9223372036854775807
GROUP BY org_id;

CREATE TRIGGER locks_counted_insert AFTER INSERT ON state_heads
WHEN NEW.lock_id IS NOT NULL BEGIN
    INSERT INTO metric_counts (metric, n) VALUES ('locks:' || NEW.org_id, 1);
END;
CREATE TRIGGER locks_counted_update AFTER UPDATE OF lock_id ON state_heads
WHEN (OLD.lock_id IS NULL) <> (NEW.lock_id IS NULL) BEGIN
    INSERT INTO metric_counts (metric, n)
    VALUES ('locks:' || NEW.org_id, CASE WHEN NEW.lock_id IS NULL THEN -1 ELSE 1 END);
END;
CREATE TRIGGER locks_counted_delete AFTER DELETE ON state_heads
WHEN OLD.lock_id IS NOT NULL BEGIN
    INSERT INTO metric_counts (metric, n) VALUES ('locks:' || OLD.org_id, -1);
END;

CREATE TRIGGER drift_stale_counted_insert AFTER INSERT ON drift_schedules
WHEN NEW.alert_at IS NULL AND NEW.stale_at IS NOT NULL AND NEW.stale_at <> 9223372036854775807
BEGIN
    INSERT INTO metric_counts (metric, n) VALUES ('drift_stale:' || NEW.org_id, 1);
END;
CREATE TRIGGER drift_stale_counted_update AFTER UPDATE OF alert_at, stale_at ON drift_schedules
WHEN (OLD.alert_at IS NULL AND OLD.stale_at IS NOT NULL AND OLD.stale_at <> 9223372036854775807)
    <> (NEW.alert_at IS NULL AND NEW.stale_at IS NOT NULL AND NEW.stale_at <> 9223372036854775807)
BEGIN
    INSERT INTO metric_counts (metric, n)
    VALUES ('drift_stale:' || NEW.org_id,
            CASE WHEN NEW.alert_at IS NULL AND NEW.stale_at IS NOT NULL
                      AND NEW.stale_at <> 9223372036854775807 THEN 1 ELSE -1 END);
END;
CREATE TRIGGER drift_stale_counted_delete AFTER DELETE ON drift_schedules
WHEN OLD.alert_at IS NULL AND OLD.stale_at IS NOT NULL AND OLD.stale_at <> 9223372036854775807
BEGIN
    INSERT INTO metric_counts (metric, n) VALUES ('drift_stale:' || OLD.org_id, -1);
END;
