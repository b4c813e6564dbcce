-- Bosun schema (PostgreSQL) v26: /metrics reads its run and trigger-decision counts from a
-- small table of deltas, never by counting every run and every decision at each scrape.
-- Triggers add a row per change (a run's kind and state: +1 for the new, -1 for the old;
-- a decision: +1 for its outcome, never taken back, as a counter is); the metric-counts
-- duty folds the rows into one per metric every minute. Rows are only ever inserted by
-- the triggers, so concurrent serializable transactions never contend for a counter.
--
-- `metric`: `runs:<kind>:<state>`, `decisions:triggered|ignored|duplicate`.
CREATE TABLE metric_counts (
    id      BIGSERIAL PRIMARY KEY,
    metric  TEXT COLLATE "C" NOT NULL,
    n       BIGINT NOT NULL
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

CREATE FUNCTION bosun_count_runs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        INSERT INTO metric_counts (metric, n) VALUES ('runs:' || OLD.kind || ':' || OLD.state, -1);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO metric_counts (metric, n) VALUES ('runs:' || NEW.kind || ':' || NEW.state, 1);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER runs_counted AFTER INSERT OR DELETE ON runs
    FOR EACH ROW EXECUTE FUNCTION bosun_count_runs();
CREATE TRIGGER runs_counted_update AFTER UPDATE OF kind, state ON runs
    FOR EACH ROW WHEN (OLD.kind <> NEW.kind OR OLD.state <> NEW.state)
    EXECUTE FUNCTION bosun_count_runs();

CREATE FUNCTION bosun_count_decisions() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO metric_counts (metric, n)
    VALUES (CASE WHEN (SELECT duplicate_of FROM deliveries WHERE id = NEW.delivery_id) IS NOT NULL
                     THEN 'decisions:duplicate'
                 WHEN NEW.run_id IS NOT NULL THEN 'decisions:triggered'
                 ELSE 'decisions:ignored' END, 1);
    RETURN NULL;
END $$;
CREATE TRIGGER decisions_counted AFTER INSERT ON trigger_decisions
    FOR EACH ROW EXECUTE FUNCTION bosun_count_decisions();
