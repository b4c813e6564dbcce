-- Bosun schema v24: the scheduler and the drift dashboard read drift schedules by index, never
-- every drift-checked stack at once.
--
-- `stale_at`: when checking turns stale (the last successful check, or `since`, plus
-- twice the schedule's interval), kept by the store whenever either changes; NULL until
-- computed (rows from before v24, filled by the scheduler's first passes), and the largest
-- integer for a schedule that never turns stale. `alert_at`: `stale_at` while its
-- stale-check alert is still to be raised, NULL once raised.
ALTER TABLE drift_schedules ADD COLUMN stale_at INTEGER;
ALTER TABLE drift_schedules ADD COLUMN alert_at INTEGER;
-- The dashboard's order (stale first, most overdue first) and its stale count.
CREATE INDEX drift_schedules_stale ON drift_schedules(org_id, stale_at, stack_id);
-- The scheduler's due schedules, alerts to raise, and rows still to compute.
CREATE INDEX drift_schedules_due ON drift_schedules(next_at);
CREATE INDEX drift_schedules_alert ON drift_schedules(alert_at) WHERE alert_at IS NOT NULL;
CREATE INDEX drift_schedules_unknown ON drift_schedules(org_id, stack_id) WHERE stale_at IS NULL;

-- Stacks whose drift settings were saved and that the scheduler has not (re)armed since:
-- written with the stack, taken by the scheduler's next pass. `queued_at` tells a pass's
-- ticket from a later save of the same stack.
CREATE TABLE drift_arming (
    org_id      TEXT NOT NULL,
    stack_id    TEXT NOT NULL,
    queued_at   INTEGER NOT NULL,
    PRIMARY KEY (org_id, stack_id),
    FOREIGN KEY (org_id, stack_id) REFERENCES stacks(org_id, id) ON DELETE CASCADE
);
-- Every drift-checked stack is looked at once after the upgrade.
INSERT INTO drift_arming (org_id, stack_id, queued_at)
SELECT org_id, id, 0 FROM stacks WHERE drift_detection IS NOT NULL;
-- A stack whose drift detection was turned off no longer keeps its schedule.
DELETE FROM drift_schedules WHERE NOT EXISTS (
    SELECT 1 FROM stacks s
    WHERE s.org_id = drift_schedules.org_id AND s.id = drift_schedules.stack_id
      AND s.drift_detection IS NOT NULL);
