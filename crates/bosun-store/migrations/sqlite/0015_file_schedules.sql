-- Bosun schema v15: plan schedules written in plan files. A plan file's
-- `schedule:` sets the plan's schedule when the file is saved, marked as coming from
-- the file: saving a version without one removes it, and the API refuses to change it
-- (the file is where it is changed). Schedules set through the API are 0.

ALTER TABLE plan_schedules ADD COLUMN from_file INTEGER NOT NULL DEFAULT 0;
