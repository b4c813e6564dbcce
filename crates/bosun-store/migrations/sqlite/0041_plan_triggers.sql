-- Bosun schema v41: stacks feed plans. A plan file's `on_stack_change` is kept with the
-- plan (`watch_stack`, and `watch_outputs`: a JSON list, empty for any output). When a
-- tracked run of that stack ends having changed a watched output, the transaction that
-- ends it records a `plan_triggers` row; the server then starts the plan's run from it,
-- and the run's own creating transaction deletes the row: the table holds only the
-- triggers no run was started for yet. A run a
-- stack's change started names it in `plan_runs.upstream` (`{stack, run}`); its
-- `trigger` column keeps 'manual', the value its older CHECK allows, and the store reads
-- such a run's trigger as `stack`.
ALTER TABLE plans ADD COLUMN watch_stack TEXT;
ALTER TABLE plans ADD COLUMN watch_outputs TEXT;
CREATE INDEX plans_watch ON plans(org_id, watch_stack);
CREATE TABLE plan_triggers (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    org_id       TEXT NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    plan         TEXT NOT NULL,
    stack        TEXT NOT NULL,
    run_id       TEXT NOT NULL,
    outputs      TEXT NOT NULL,        -- JSON list: the watched outputs the run changed
    created_at   INTEGER NOT NULL
);
ALTER TABLE plan_runs ADD COLUMN upstream TEXT;
