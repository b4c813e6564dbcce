-- Bosun schema v26: /metrics reads its run and trigger-decision counts from a small table
-- of deltas, never by counting every run and every decision at each scrape. Triggers add
-- a row per change (a run's kind and state: +1 for the new, -1 for the old; a decision:
-- +1 for its outcome, never taken back, as a counter is); the metric-counts duty folds
-- the rows into one per metric every minute.
--
-- `metric`: `runs:<kind>:<state>`, `decisions:triggered|ignored|duplicate`.
CREATE TABLE metric_counts (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    metric  TEXT NOT NULL,
    n       INTEGER NOT NULL
);
INSERT INTO metric_counts (metric, n)
SELECT 'runs:' || kind || ':' || state, COUNT(*) FROM runs GROUP BY kind, state;
INSERT INTO metric_counts (metric, n)
SELECT CASE WHEN d.duplicate_of IS NOT NULL THEN 'decisions:duplicate'
            WHEN t.run_id IS NOT NULL THEN 'decisions:triggered'
            ELSE 'decisions:ignored' END,
       COUNT(*)
FROM trigger_decisions t JOIN deliveries d ON d.id = t.delivery_id
GROUP BY 1;

CREATE TRIGGER runs_counted_insert AFTER INSERT ON runs BEGIN
    INSERT INTO metric_counts (metric, n) VALUES ('runs:' || NEW.kind || ':' || NEW.state, 1);
END;
CREATE TRIGGER runs_counted_update AFTER UPDATE OF kind, state ON runs
WHEN OLD.kind <> NEW.kind OR OLD.state <> NEW.state BEGIN
    INSERT INTO metric_counts (metric, n)
    VALUES ('runs:' || OLD.kind || ':' || OLD.state, -1),
           ('runs:' || NEW.kind || ':' || NEW.state, 1);
END;
CREATE TRIGGER runs_counted_delete AFTER DELETE ON runs BEGIN
    INSERT INTO metric_counts (metric, n) VALUES ('runs:' || OLD.kind || ':' || OLD.state, -1);
END;
CREATE TRIGGER decisions_counted AFTER INSERT ON trigger_decisions BEGIN
    INSERT INTO metric_counts (metric, n)
    VALUES (CASE WHEN (SELECT duplicate_of FROM deliveries WHERE id = NEW.delivery_id) IS NOT NULL
                     THEN 'decisions:duplicate'
                 WHEN NEW.run_id IS NOT NULL THEN 'decisions:triggered'
                 ELSE 'decisions:ignored' END, 1);
END;
