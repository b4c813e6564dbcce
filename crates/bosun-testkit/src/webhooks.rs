//! GitHub webhooks for tests: the `X-Hub-Signature-256` signature exactly as GitHub
//! computes it, and GitHub's own example payloads from the `@octokit/webhooks-examples`
//! npm package (installed by `scripts/test.sh`), so tests parse what GitHub really sends
//! rather than payloads we wrote ourselves.

use std::io::Write;
use std::path::{Path, PathBuf};

use hmac::{Hmac, Mac};
use serde::Deserialize;
use sha2::Sha256;

/// `sha256=<lowercase hex HMAC-SHA256 of body keyed by secret>`, the value of GitHub's
/// `X-Hub-Signature-256` header.
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// The default location of the examples: `target/npm/...` under the workspace root, where
/// `scripts/test.sh` installs the package.
const DEFAULT_INDEX: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../target/npm/node_modules/@octokit/webhooks-examples/api.github.com/index.json"
);

/// The npm package the examples come from (`scripts/test.sh` installs it).
pub const EXAMPLES_PACKAGE: &str = "@octokit/webhooks-examples";

/// One event of the index: its name (`push`, `pull_request`, …), its actions, and the
/// example payloads.
#[derive(Debug, Clone, Deserialize)]
pub struct WebhookEvent {
    pub name: String,
    #[serde(default)]
    pub actions: Vec<String>,
    #[serde(default)]
    pub examples: Vec<serde_json::Value>,
}

/// GitHub's example webhook payloads, by event.
#[derive(Debug, Clone)]
pub struct WebhookExamples {
    pub events: Vec<WebhookEvent>,
}

impl WebhookExamples {
    /// Where the index is read from: `$BOSUN_WEBHOOK_EXAMPLES` if set, else the workspace's
    /// `target/npm/node_modules/@octokit/webhooks-examples/api.github.com/index.json`.
    pub fn index_path() -> PathBuf {
        match std::env::var_os("BOSUN_WEBHOOK_EXAMPLES") {
            Some(p) if !p.is_empty() => PathBuf::from(p),
            _ => PathBuf::from(DEFAULT_INDEX),
        }
    }

    /// The examples, or `None` when the index file does not exist. A file that exists but
    /// does not parse is a broken install and panics.
    pub fn load() -> Option<WebhookExamples> {
        WebhookExamples::load_from(&Self::index_path())
    }

    /// The examples of the index at `path`, `None` when it does not exist; panics when it
    /// exists but is not an examples index.
    pub fn load_from(path: &Path) -> Option<WebhookExamples> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => panic!("reading {}: {e}", path.display()),
        };
        let events: Vec<WebhookEvent> = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{} is not the examples index: {e}", path.display()));
        Some(WebhookExamples { events })
    }

    /// Every example payload of `event` (empty if the event is unknown).
    pub fn examples(&self, event: &str) -> &[serde_json::Value] {
        self.events
            .iter()
            .find(|e| e.name == event)
            .map(|e| e.examples.as_slice())
            .unwrap_or(&[])
    }

    /// A clone of the first example of `event` for which `pred` holds. Panics naming the
    /// event when there is none.
    pub fn example(
        &self,
        event: &str,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let all = self.examples(event);
        if all.is_empty() {
            panic!(
                "{EXAMPLES_PACKAGE} has no examples for event {event:?} (events: {})",
                self.events
                    .iter()
                    .map(|e| e.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        all.iter().find(|p| pred(p)).cloned().unwrap_or_else(|| {
            panic!(
                "none of the {} {EXAMPLES_PACKAGE} examples for event {event:?} matches the predicate",
                all.len()
            )
        })
    }
}

/// The examples, or `None` after announcing the skip on stderr (outside libtest's output
/// capture, so `scripts/test.sh` sees it). With `BOSUN_REQUIRE_TOOLS=1` a missing package
/// is a failure instead.
pub fn require_examples() -> Option<WebhookExamples> {
    if let Some(examples) = WebhookExamples::load() {
        return Some(examples);
    }
    if std::env::var("BOSUN_REQUIRE_TOOLS").as_deref() == Ok("1") {
        panic!(
            "{EXAMPLES_PACKAGE} is required (BOSUN_REQUIRE_TOOLS=1) but {} does not exist",
            WebhookExamples::index_path().display()
        );
    }
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED (tool missing): {EXAMPLES_PACKAGE} — run scripts/test.sh"
    );
    None
}
