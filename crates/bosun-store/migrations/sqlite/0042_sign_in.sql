-- Bosun schema v42: people sign in through their identity provider (OpenID Connect).
--
-- `identities` links a provider's (issuer, subject) to the Bosun user a first sign-in
-- created: never an email alone. `sign_in_attempts` holds each sign-in begun and not
-- finished (its `state`, hashed; the browser's binding cookie, hashed; the nonce and the
-- PKCE verifier): the callback takes it once, so a replayed `state` finds nothing.
-- `sessions` are the console's sessions, both kinds (a personal token typed in, or a
-- provider's sign-in), kept server-side so an admin can list and end them; the cookie
-- holds a secret whose hash is `secret_hash`. A provider session keeps its refresh token
-- sealed with the server's secrets key. A `bosun login` is a provider session too, whose
-- `token_id` is the short-lived personal token the CLI holds. A membership records where it came from:
-- `manual` (an admin) or `provider` (the rules over the claims at the last sign-in,
-- `source_detail` naming the rule).
CREATE TABLE identities (
    issuer          TEXT NOT NULL,
    subject         TEXT NOT NULL,
    provider        TEXT NOT NULL,
    user_id         TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    email           TEXT,
    username        TEXT,
    created_at      INTEGER NOT NULL,
    last_sign_in_at INTEGER NOT NULL,
    PRIMARY KEY (issuer, subject)
);
CREATE INDEX identities_user ON identities(user_id);

CREATE TABLE sign_in_attempts (
    state_hash   TEXT PRIMARY KEY,
    provider     TEXT NOT NULL,
    binding_hash TEXT NOT NULL,
    nonce        TEXT NOT NULL,
    verifier     TEXT NOT NULL,
    next         TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL
);
CREATE INDEX sign_in_attempts_expiry ON sign_in_attempts(expires_at);

CREATE TABLE sessions (
    id                TEXT PRIMARY KEY,
    secret_hash       TEXT NOT NULL UNIQUE,
    user_id           TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    method            TEXT NOT NULL CHECK (method IN ('token', 'provider')),
    provider          TEXT,
    subject           TEXT,
    token_id          TEXT,
    id_token          TEXT,
    refresh_ciphertext BLOB,
    refresh_nonce     BLOB,
    refresh_key_id    TEXT,
    created_at        INTEGER NOT NULL,
    last_seen_at      INTEGER NOT NULL,
    refreshed_at      INTEGER NOT NULL,
    expires_at        INTEGER NOT NULL,
    ended_at          INTEGER,
    ended_reason      TEXT
);
CREATE INDEX sessions_user ON sessions(user_id, created_at);
CREATE INDEX sessions_token ON sessions(token_id);
CREATE INDEX sessions_sealed ON sessions(id) WHERE refresh_ciphertext IS NOT NULL;
CREATE INDEX sessions_ended ON sessions(ended_at) WHERE ended_at IS NOT NULL;
CREATE INDEX sessions_open_expiry ON sessions(expires_at) WHERE ended_at IS NULL;

ALTER TABLE memberships ADD COLUMN source TEXT NOT NULL DEFAULT 'manual';
ALTER TABLE memberships ADD COLUMN source_detail TEXT;
