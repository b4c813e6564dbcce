-- Bosun schema v7: notifications — per-org targets (generic webhook, Slack-compatible),
-- an outbox of events written in the same transaction as their cause, and one delivery
-- row per event and matching target with its attempts.

CREATE TABLE notification_targets (
    org_id          TEXT NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    id              TEXT NOT NULL,
    kind            TEXT NOT NULL,          -- webhook | slack
    url             TEXT NOT NULL,
    -- The webhook's HMAC secret, sealed with the server's secrets key (NULL for slack).
    secret_ciphertext BLOB,
    secret_nonce    BLOB,
    secret_key_id   TEXT,
    rules           TEXT NOT NULL,          -- JSON array of rules; [] means the defaults
    enabled         INTEGER NOT NULL DEFAULT 1,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    updated_by      TEXT NOT NULL,
    PRIMARY KEY (org_id, id)
);

CREATE TABLE notification_events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    org_id      TEXT NOT NULL,
    kind        TEXT NOT NULL,              -- run_ended | late_write | old_lock | stale_drift_check | test
    run_kind    TEXT,                       -- for rules on run events
    run_state   TEXT,
    payload     TEXT NOT NULL,              -- JSON
    -- Events that must be sent once per cause (an old lock: once per lock id).
    dedup_key   TEXT,
    created_at  INTEGER NOT NULL
);
CREATE UNIQUE INDEX notification_events_dedup
    ON notification_events(org_id, dedup_key) WHERE dedup_key IS NOT NULL;

CREATE TABLE notification_deliveries (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id        INTEGER NOT NULL REFERENCES notification_events(id) ON DELETE CASCADE,
    org_id          TEXT NOT NULL,
    target_id       TEXT NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    -- NULL once settled: delivered, or given up after the last attempt.
    next_attempt_at INTEGER,
    last_status     INTEGER,                -- HTTP status of the last attempt, if any
    last_error      TEXT,
    delivered_at    INTEGER,
    created_at      INTEGER NOT NULL,
    FOREIGN KEY (org_id, target_id) REFERENCES notification_targets(org_id, id) ON DELETE CASCADE
);
CREATE INDEX notification_deliveries_due
    ON notification_deliveries(next_attempt_at) WHERE next_attempt_at IS NOT NULL;
CREATE INDEX notification_deliveries_target ON notification_deliveries(org_id, target_id, id);
