-- Bosun schema v38: policies as code. An org's policies (Rego, uploaded as files or read
-- from a git repository at a branch's head), each with its decision points, mode and
-- attachment (stack labels, environments; none: the whole org); every evaluation of one
-- on a run, with what it said and who overrode it; what the policies hold a stack run
-- or a plan run for; and the plan's JSON (`show -json`) a runner uploads for them to read.
CREATE TABLE policies (
    org_id        TEXT NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    name          TEXT NOT NULL,
    mode          TEXT NOT NULL,
    on_error      TEXT NOT NULL,
    points        TEXT NOT NULL,          -- JSON array of decision points
    labels        TEXT NOT NULL,          -- JSON array of stack labels
    environments  TEXT NOT NULL,          -- JSON array of environment ids
    source        TEXT NOT NULL,          -- JSON: {"files": {name: text}} or {"repository", "branch", "path"}
    version       TEXT NOT NULL,          -- uploaded files: their digest; git: the branch
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    updated_by    TEXT NOT NULL,
    PRIMARY KEY (org_id, name)
);

CREATE TABLE policy_evaluations (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    org_id           TEXT NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    subject          TEXT NOT NULL,       -- the run (stack run or plan run)
    point            TEXT NOT NULL,
    policy           TEXT NOT NULL,
    version          TEXT NOT NULL,       -- the digest or commit evaluated
    mode             TEXT NOT NULL,
    outcome          TEXT NOT NULL,
    messages         TEXT NOT NULL,       -- JSON {deny, warn, require_approval, errors}
    duration_ms      INTEGER NOT NULL,
    evaluated_at     INTEGER NOT NULL,
    overridden_by    TEXT,
    override_reason  TEXT,
    overridden_at    INTEGER
);
CREATE INDEX policy_evaluations_subject ON policy_evaluations(subject, id);

ALTER TABLE runs ADD COLUMN policy_hold TEXT;
-- A real plan run waits (paused) for the policies' verdict on its dry run, then for what
-- they hold it for: check, override or approval.
ALTER TABLE plan_runs ADD COLUMN policy_hold TEXT;

CREATE TABLE run_plan_json (
    run_id  TEXT PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
    body    BLOB NOT NULL
);
