//! The client commands: each module parses its arguments, calls the API through
//! [`Client`], and prints the answer for people or, with `--json`, as the server sent it.

pub mod audit;
pub mod org;
pub mod run;
pub mod runners;
pub mod stack;
pub mod state;
pub mod token;
pub mod user;
pub mod whoami;

use anyhow::Context as _;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::client::Client;
use crate::output;

/// What every client command runs with.
pub struct Ctx {
    pub client: Client,
    /// The org that org-scoped commands act in (`--org` / `BOSUN_ORG`).
    pub org: String,
    pub json: bool,
}

impl Ctx {
    /// Prints a response: the raw JSON with `--json`, else `human` applied to it decoded.
    pub fn show<T: DeserializeOwned>(
        &self,
        value: Value,
        human: impl FnOnce(T) -> String,
    ) -> anyhow::Result<()> {
        if self.json {
            return output::emit_json(&value);
        }
        output::emit(&human(decode(value)?))
    }

    /// Confirms an action whose response has no body; `--json` stays silent so a script
    /// reads only what the server sent.
    pub fn done(&self, message: &str) -> anyhow::Result<()> {
        if self.json {
            return Ok(());
        }
        output::emit(&format!("{message}\n"))
    }
}

/// Decodes a response into its wire type; a mismatch means client and server disagree
/// on the API, which the message says rather than showing a serde error alone.
pub fn decode<T: DeserializeOwned>(value: Value) -> anyhow::Result<T> {
    serde_json::from_value(value).context(
        "unexpected response from the server (are the client and server versions compatible?)",
    )
}
