-- Bosun schema v43: a `bosun login` through this machine's browser (a loopback redirect,
-- for providers without the device flow) begins a sign-in like the console's, but is
-- bound to the CLI, not to a browser cookie: `cli_redirect` is the CLI's loopback address
-- the callback sends the browser on to, `cli_challenge` the CLI's PKCE challenge its
-- verifier must answer. Both are set for such a sign-in (its `binding_hash` is empty) and
-- neither for a console sign-in.
ALTER TABLE sign_in_attempts ADD COLUMN cli_redirect TEXT;
ALTER TABLE sign_in_attempts ADD COLUMN cli_challenge TEXT;
