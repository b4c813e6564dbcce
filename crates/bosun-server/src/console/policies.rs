//! The policies a run's page shows (a stack run's and a plan run's alike): one row per
//! recorded evaluation, and what the policies hold the run for, in words.

use bosun_api::PolicyEvaluationView;

/// One policy evaluation, as a run page shows it.
pub struct PolicyRow {
    pub policy: String,
    pub point: String,
    pub outcome: String,
    pub mode: String,
    pub version: String,
    /// "deny: …", "warn: …" lines.
    pub messages: Vec<String>,
    pub overridden: Option<String>,
    pub duration_ms: u64,
}

pub fn rows(all: &[PolicyEvaluationView]) -> Vec<PolicyRow> {
    all.iter().map(row).collect()
}

fn row(e: &PolicyEvaluationView) -> PolicyRow {
    let mut messages = Vec::new();
    for (kind, all) in [
        ("deny", &e.deny),
        ("require approval", &e.require_approval),
        ("skip", &e.skip),
        ("trigger", &e.trigger),
        ("warn", &e.warn),
        ("error", &e.errors),
    ] {
        messages.extend(all.iter().map(|m| format!("{kind}: {m}")));
    }
    PolicyRow {
        policy: e.policy.clone(),
        point: e.point.replace('_', " "),
        outcome: e.outcome.clone(),
        mode: e.mode.replace('_', "-"),
        version: e.version.chars().take(16).collect(),
        messages,
        overridden: match (&e.overridden_by, &e.override_reason) {
            (Some(by), Some(reason)) => Some(format!("overridden by {by}: “{reason}”")),
            _ => None,
        },
        duration_ms: e.duration_ms,
    }
}

/// What the policies hold run `id` for (`policy_hold`), in words: who lifts it, and how.
pub fn hold_words(hold: Option<&str>, id: &str) -> Option<String> {
    Some(match hold? {
        "override" => format!(
            "A soft-mandatory policy denied this run: an org admin may override it with a reason (bosun run override {id} --reason …)."
        ),
        "check" => "The policies have not decided on this run's dry run (its preview) yet: it waits for their verdict.".into(),
        _ => "A policy asks for approval: the run waits in the approvals inbox.".into(),
    })
}
