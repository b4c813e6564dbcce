//! What feedback says on GitHub: a run's check run (status, conclusion, title, Markdown
//! summary) and a pull request's comment, kept under GitHub's 65,536 characters by
//! trimming the longest plan texts first.

use bosun_api::PlanSummary;
use bosun_core::policy::{Outcome, Verdict};
use bosun_core::run::{RunKind, RunState};
use bosun_store::{PolicyEvaluationRecord, RunRecord};
use serde_json::{json, Value};

/// GitHub's limit on a comment's body and a check run's summary.
pub const GITHUB_TEXT_LIMIT: usize = 65_536;
/// What the comment keeps free under the limit for the trim notes.
const COMMENT_MARGIN: usize = 1_024;
/// Resource changes listed in a check run's summary before "and N more".
const MAX_LISTED_CHANGES: usize = 50;

/// A check run's status and, once completed, its conclusion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckStatus {
    pub status: &'static str,
    pub conclusion: Option<&'static str>,
}

/// What a run's state means on GitHub: queued; in progress while it prepares, plans or
/// applies; completed with `action_required` while it waits for a confirmation or an
/// approval, `success` once planned or applied, `failure` when it failed, was
/// force-failed or interrupted, `neutral` when a newer commit superseded it,
/// `cancelled` when discarded or canceled, `skipped` when its upstream failed.
pub fn check_status(run: &RunRecord) -> CheckStatus {
    let (status, conclusion) = match run.state {
        RunState::Queued => ("queued", None),
        RunState::Preparing | RunState::Planning | RunState::Applying => ("in_progress", None),
        RunState::Unconfirmed => ("completed", Some("action_required")),
        RunState::Finished => ("completed", Some("success")),
        RunState::Failed | RunState::ForceFailed | RunState::Interrupted => {
            ("completed", Some("failure"))
        }
        RunState::Canceled if superseded(run) => ("completed", Some("neutral")),
        RunState::Discarded | RunState::Canceled => ("completed", Some("cancelled")),
        RunState::Skipped => ("completed", Some("skipped")),
    };
    CheckStatus { status, conclusion }
}

fn superseded(run: &RunRecord) -> bool {
    run.reason
        .as_deref()
        .is_some_and(|r| r.starts_with("superseded"))
}

/// The run's plan summary, when it has one.
pub fn plan_of(run: &RunRecord) -> Option<PlanSummary> {
    run.plan_summary
        .as_ref()
        .and_then(|v| serde_json::from_value(v.clone()).ok())
}

/// `+2 ~1 −0, 1 output changes` (and `no changes`).
pub fn counts(plan: &PlanSummary) -> String {
    let outputs = plan
        .output_changes
        .values()
        .filter(|a| a.as_str() != "no-op")
        .count();
    let mut text = format!("+{} ~{} −{}", plan.add, plan.change, plan.destroy);
    if outputs > 0 {
        let s = if outputs == 1 { "" } else { "s" };
        text.push_str(&format!(", {outputs} output change{s}"));
    }
    if !plan.has_changes {
        text.push_str(" (no changes)");
    }
    text
}

/// What a run is doing or did, in a few words.
pub fn state_words(run: &RunRecord, gate: Option<&str>) -> String {
    match run.state {
        RunState::Queued => "queued".into(),
        RunState::Preparing => "preparing".into(),
        RunState::Planning => "planning".into(),
        RunState::Unconfirmed if run.policy_hold == Verdict::Override => "held by a policy".into(),
        RunState::Unconfirmed if gate.is_some() || run.policy_hold == Verdict::Approval => {
            "waiting for approval".into()
        }
        RunState::Unconfirmed => "waiting for confirmation".into(),
        RunState::Applying => "applying".into(),
        RunState::Finished if run.kind == RunKind::Proposed => "planned".into(),
        RunState::Finished => "applied".into(),
        RunState::Canceled if superseded(run) => "superseded".into(),
        other => other.as_str().replace('_', " "),
    }
}

/// The check run's title: the plan's counts once there is a plan, else the state.
pub fn title(run: &RunRecord, gate: Option<&str>) -> String {
    let words = state_words(run, gate);
    match plan_of(run) {
        Some(plan) => format!("{} — {words}", counts(&plan)),
        None => capitalised(&words),
    }
}

fn capitalised(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().collect::<String>() + c.as_str(),
        None => String::new(),
    }
}

/// The check run's Markdown summary: the run and its state, why (its reason), the
/// policies evaluated on its plan, the resource changes, the output changes (names only:
/// no output's value is ever shown), and what it waits for.
pub fn summary(
    run: &RunRecord,
    gate: Option<&str>,
    details_url: &str,
    policies: &[PolicyEvaluationRecord],
) -> String {
    let mut md = format!(
        "**[Run `{}`]({details_url})** of stack `{}` ({} run): **{}**\n",
        run.id,
        run.stack,
        run.kind.as_str(),
        state_words(run, gate)
    );
    if let Some(reason) = run.reason.as_deref().filter(|r| !r.is_empty()) {
        md.push_str(&format!("\n> {}\n", one_line(reason, 500)));
    }
    if !policies.is_empty() {
        md.push_str("\n### Policies\n\n| policy | mode | result | messages |\n|---|---|---|---|\n");
        for p in policies {
            let e = &p.evaluation;
            let said: Vec<&str> = e
                .deny
                .iter()
                .chain(&e.require_approval)
                .chain(&e.skip)
                .chain(&e.trigger)
                .chain(&e.warn)
                .chain(&e.errors)
                .map(String::as_str)
                .collect();
            let overridden = match &p.overridden {
                Some(o) => format!(" (overridden by {})", o.by),
                None => String::new(),
            };
            md.push_str(&format!(
                "| `{}` | {} | {}{overridden} | {} |\n",
                code(&e.policy),
                e.mode.as_str().replace('_', "-"),
                e.outcome.as_str().replace('_', " "),
                one_line(&said.join("; "), 300).replace('|', "\\|")
            ));
        }
    }
    if let Some(plan) = plan_of(run) {
        md.push_str(&format!("\n### Resource changes: {}\n", counts(&plan)));
        let changes: Vec<_> = plan
            .resource_changes
            .iter()
            .filter(|c| c.action != "no-op" && c.action != "read")
            .collect();
        if !changes.is_empty() {
            md.push_str("\n| action | address |\n|---|---|\n");
            for c in changes.iter().take(MAX_LISTED_CHANGES) {
                md.push_str(&format!("| {} | `{}` |\n", c.action, code(&c.address)));
            }
            if changes.len() > MAX_LISTED_CHANGES {
                md.push_str(&format!(
                    "\n…and {} more: see the run.\n",
                    changes.len() - MAX_LISTED_CHANGES
                ));
            }
        }
        let outputs: Vec<_> = plan
            .output_changes
            .iter()
            .filter(|(_, a)| a.as_str() != "no-op")
            .collect();
        if !outputs.is_empty() {
            md.push_str("\n### Output changes\n\n| output | change |\n|---|---|\n");
            for (name, action) in outputs {
                md.push_str(&format!("| `{}` | {action} |\n", code(name)));
            }
            md.push_str("\nValues are not shown here.\n");
        }
    }
    if run.state == RunState::Unconfirmed {
        let what = match (run.policy_hold, gate) {
            (Verdict::Override, _) => {
                "an org admin's override: a soft-mandatory policy denied the plan".into()
            }
            (Verdict::Approval, None) => {
                "an approval a policy asks for, in Bosun's approvals inbox".into()
            }
            (_, Some(env)) => format!(
                "an approval: environment `{}` requires one, in Bosun's approvals inbox",
                code(env)
            ),
            (_, None) => "a confirmation by an operator".into(),
        };
        md.push_str(&format!(
            "\n### Waiting\n\nThis run waits for {what}: [open the run]({details_url}).\n"
        ));
    }
    truncate(&md, GITHUB_TEXT_LIMIT - 1)
}

/// The body of a check-run create (`with_identity`: name, commit and our id) or update.
pub fn check_body(
    run: &RunRecord,
    gate: Option<&str>,
    head_sha: &str,
    details_url: &str,
    with_identity: bool,
    policies: &[PolicyEvaluationRecord],
) -> Value {
    let s = check_status(run);
    let mut body = json!({
        "details_url": details_url,
        "status": s.status,
        "output": {"title": title(run, gate), "summary": summary(run, gate, details_url, policies)},
    });
    if with_identity {
        body["name"] = json!(check_name(&run.stack));
        body["head_sha"] = json!(head_sha);
        body["external_id"] = json!(run.id);
    }
    if s.status != "queued" {
        body["started_at"] = json!(rfc3339(run.created_at));
    }
    if let Some(conclusion) = s.conclusion {
        body["conclusion"] = json!(conclusion);
        body["completed_at"] = json!(rfc3339(run.updated_at));
    }
    body
}

/// A stack's check-run name, the same for every run so branch protection can require it.
pub fn check_name(stack: &str) -> String {
    format!("bosun/{stack}")
}

fn rfc3339(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// One stack's line in the pull request's comment.
pub struct CommentStack<'a> {
    pub run: &'a RunRecord,
    /// The environment whose approval the run waits for.
    pub gate: Option<&'a str>,
    pub url: String,
    /// The plan phase's log, secrets already masked.
    pub plan_text: Option<String>,
    /// The policies evaluated on the run.
    pub policies: Vec<PolicyEvaluationRecord>,
}

/// The pull request's comment: the marker, every stack the PR touched with its latest
/// run (state, plan counts, link) and its plan text folded, then the stacks it did not
/// trigger with why. Over the limit, the longest plan texts are cut first, each saying so.
pub fn comment(
    marker: &str,
    org: &str,
    stacks: &[CommentStack<'_>],
    not_triggered: &[(String, String)],
) -> String {
    let mut plans: Vec<Option<String>> = stacks
        .iter()
        .map(|s| s.plan_text.as_deref().map(clean))
        .collect();
    let mut trimmed = vec![false; plans.len()];
    loop {
        let body = compose(marker, org, stacks, &plans, &trimmed, not_triggered);
        if body.chars().count() <= GITHUB_TEXT_LIMIT - COMMENT_MARGIN
            || plans.iter().all(|p| p.is_none())
        {
            return truncate(&body, GITHUB_TEXT_LIMIT);
        }
        // The longest plan text goes first.
        let longest = plans
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.as_ref().map(|p| (p.chars().count(), i)))
            .max();
        if let Some((_, i)) = longest {
            plans[i] = None;
            trimmed[i] = true;
        }
    }
}

fn compose(
    marker: &str,
    org: &str,
    stacks: &[CommentStack<'_>],
    plans: &[Option<String>],
    trimmed: &[bool],
    not_triggered: &[(String, String)],
) -> String {
    let mut md = format!(
        "{marker}\n### Bosun: stacks of org `{}` in this pull request\n\n",
        code(org)
    );
    if stacks.is_empty() {
        md.push_str("No stack of this org runs for this pull request.\n");
    } else {
        md.push_str("| stack | run | state | plan | policies |\n|---|---|---|---|---|\n");
        for s in stacks {
            let plan = plan_of(s.run)
                .map(|p| counts(&p))
                .unwrap_or_else(|| "—".into());
            md.push_str(&format!(
                "| `{}` | [`{}`]({}) | {} {} | {} | {} |\n",
                code(&s.run.stack),
                s.run.id,
                s.url,
                icon(s.run),
                state_words(s.run, s.gate),
                plan,
                policy_cell(&s.policies)
            ));
        }
        for ((s, plan), trimmed) in stacks.iter().zip(plans).zip(trimmed) {
            if let Some(plan) = plan {
                let fence = fence_for(plan);
                md.push_str(&format!(
                    "\n<details><summary>Plan of <code>{}</code></summary>\n\n{fence}\n{plan}\n{fence}\n\n</details>\n",
                    html(&s.run.stack)
                ));
            } else if *trimmed {
                md.push_str(&format!(
                    "\nThe plan of `{}` is left out to keep this comment under GitHub's size limit: [see it in Bosun]({}).\n",
                    code(&s.run.stack),
                    s.url
                ));
            }
        }
        let failed: Vec<_> = stacks
            .iter()
            .filter(|s| check_status(s.run).conclusion == Some("failure"))
            .filter_map(|s| s.run.reason.as_deref().map(|r| (s.run.stack.as_str(), r)))
            .collect();
        for (stack, reason) in failed {
            md.push_str(&format!(
                "\n**`{}` failed:** {}\n",
                code(stack),
                one_line(reason, 500)
            ));
        }
    }
    if !not_triggered.is_empty() {
        md.push_str("\n**Not triggered by this pull request**\n\n");
        for (stack, reason) in not_triggered {
            md.push_str(&format!("- `{}`: {}\n", code(stack), one_line(reason, 300)));
        }
    }
    md
}

/// A run's policies in one table cell: each that said something, with its result and
/// first message (a deny overridden says so); `N passed` for the rest; `—` for none.
fn policy_cell(policies: &[PolicyEvaluationRecord]) -> String {
    if policies.is_empty() {
        return "—".into();
    }
    let mut parts = Vec::new();
    let mut passed = 0;
    for p in policies {
        let e = &p.evaluation;
        if e.outcome == Outcome::Pass {
            passed += 1;
            continue;
        }
        let first = [
            &e.deny,
            &e.require_approval,
            &e.skip,
            &e.trigger,
            &e.errors,
            &e.warn,
        ]
        .into_iter()
        .find_map(|m| m.first());
        let overridden = if p.overridden.is_some() {
            ", overridden"
        } else {
            ""
        };
        let mut part = format!(
            "`{}` {}{overridden}",
            code(&e.policy),
            e.outcome.as_str().replace('_', " ")
        );
        if let Some(m) = first {
            part.push_str(&format!(": {}", one_line(m, 120)));
        }
        parts.push(part);
    }
    if passed > 0 {
        parts.push(format!("{passed} passed"));
    }
    one_line(&parts.join("; "), 400).replace('|', "\\|")
}

fn icon(run: &RunRecord) -> &'static str {
    match check_status(run).conclusion {
        None => "⏳",
        Some("success") => "✅",
        Some("failure") => "❌",
        Some("action_required") => "✋",
        Some(_) => "⚪",
    }
}

/// A plan text as the comment shows it: without terminal colour codes.
fn clean(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for n in chars.by_ref() {
                    if n.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out.trim_end().to_string()
}

/// A code fence longer than any run of backticks in `text`.
fn fence_for(text: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    "`".repeat(longest.max(2) + 1)
}

/// Text inside inline code: backticks would end it early.
fn code(text: &str) -> String {
    text.replace('`', "'")
}

fn html(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn one_line(text: &str, max: usize) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    truncate(&line, max)
}

/// At most `max` characters, the last of them `…` when cut.
fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bosun_core::run::{Phase, Trigger};
    use chrono::Utc;

    fn run(state: RunState, reason: Option<&str>) -> RunRecord {
        RunRecord {
            id: "run-1".into(),
            org: "acme".into(),
            stack: "net".into(),
            kind: RunKind::Proposed,
            trigger: Trigger::PullRequest,
            state,
            phase: Phase::Plan,
            reason: reason.map(str::to_string),
            commit: Some("a".repeat(40)),
            pull_request: Some(7),
            plan_summary: Some(json!({
                "has_changes": true, "add": 2, "change": 1, "destroy": 0,
                "resource_changes": [
                    {"address": "aws_s3_bucket.logs", "action": "create"},
                    {"address": "aws_s3_bucket.data", "action": "create"},
                    {"address": "aws_iam_role.ci", "action": "update"},
                    {"address": "data.aws_caller_identity.me", "action": "read"}
                ],
                "output_changes": {"bucket": "create", "secret_token": "update", "same": "no-op"}
            })),
            needs_lease: false,
            leased: false,
            started: false,
            cancel_requested: false,
            triggered_by: "github:ann".into(),
            branch: "main".into(),
            retry_of: None,
            blocked_by: None,
            blocked_since: None,
            lock_waits: None,
            late_write: false,
            runner_id: None,
            fencing: 0,
            last_heartbeat: None,
            phase_started_at: None,
            delivery: None,
            upstream_run: None,
            held: false,
            consumed: None,
            created_at: Utc::now(),
            updated_at: Utc::now(),
            summarised_at: None,
            policy_hold: bosun_core::policy::Verdict::Pass,
        }
    }

    #[test]
    fn every_state_has_a_conclusion_that_means_something() {
        let cases = [
            (RunState::Queued, None, "queued", None),
            (RunState::Planning, None, "in_progress", None),
            (
                RunState::Unconfirmed,
                None,
                "completed",
                Some("action_required"),
            ),
            (RunState::Finished, None, "completed", Some("success")),
            (RunState::Failed, None, "completed", Some("failure")),
            (RunState::ForceFailed, None, "completed", Some("failure")),
            (RunState::Interrupted, None, "completed", Some("failure")),
            (
                RunState::Canceled,
                Some("superseded by commit abc of pull request #7"),
                "completed",
                Some("neutral"),
            ),
            (
                RunState::Canceled,
                Some("canceled by user:ann"),
                "completed",
                Some("cancelled"),
            ),
            (RunState::Discarded, None, "completed", Some("cancelled")),
            (RunState::Skipped, None, "completed", Some("skipped")),
        ];
        for (state, reason, status, conclusion) in cases {
            let s = check_status(&run(state, reason));
            assert_eq!((s.status, s.conclusion), (status, conclusion), "{state:?}");
        }
    }

    #[test]
    fn the_title_counts_changes_and_the_summary_never_shows_output_values() {
        let r = run(RunState::Finished, None);
        assert_eq!(title(&r, None), "+2 ~1 −0, 2 output changes — planned");
        let md = summary(&r, None, "https://bosun.example/orgs/acme/runs/run-1", &[]);
        assert!(md.contains("| create | `aws_s3_bucket.logs` |"), "{md}");
        assert!(
            !md.contains("data.aws_caller_identity.me"),
            "reads are not changes"
        );
        assert!(md.contains("| `secret_token` | update |"));
        assert!(!md.contains("same"), "no-op outputs are left out");
        assert!(md.contains("(https://bosun.example/orgs/acme/runs/run-1)"));
        let body = check_body(&r, None, &"a".repeat(40), "https://x/r", true, &[]);
        assert_eq!(body["name"], "bosun/net");
        assert_eq!(body["conclusion"], "success");
        assert_eq!(body["external_id"], "run-1");
        let update = check_body(
            &run(RunState::Queued, None),
            None,
            "a",
            "https://x/r",
            false,
            &[],
        );
        assert!(update.get("name").is_none() && update.get("conclusion").is_none());
        assert!(update.get("started_at").is_none());
    }

    #[test]
    fn a_waiting_run_says_what_it_waits_for() {
        let r = run(RunState::Unconfirmed, None);
        let md = summary(&r, Some("prod"), "https://x/r", &[]);
        assert!(md.contains("environment `prod` requires one"), "{md}");
        assert_eq!(state_words(&r, Some("prod")), "waiting for approval");
        assert!(summary(&r, None, "https://x/r", &[]).contains("a confirmation by an operator"));
    }

    #[test]
    fn the_policies_and_their_holds_show_in_the_check_run() {
        use bosun_core::policy::{Mode, Outcome, Point};
        use bosun_store::{NewPolicyEvaluation, PolicyEvaluationRecord, PolicyOverride};
        let eval =
            |policy: &str, mode, outcome, msg: &str, overridden: bool| PolicyEvaluationRecord {
                id: 1,
                subject: "run-1".into(),
                evaluation: NewPolicyEvaluation {
                    point: Point::Plan,
                    policy: policy.into(),
                    version: "sha256:00".into(),
                    mode,
                    outcome,
                    deny: vec![msg.into()],
                    warn: vec![],
                    require_approval: vec![],
                    skip: vec![],
                    trigger: vec![],
                    errors: vec![],
                    duration_ms: 2,
                },
                evaluated_at: chrono::Utc::now(),
                overridden: overridden.then(|| PolicyOverride {
                    by: "user:root".into(),
                    reason: "ok".into(),
                    at: chrono::Utc::now(),
                }),
            };
        let mut r = run(RunState::Unconfirmed, None);
        r.kind = RunKind::Tracked;
        r.policy_hold = Verdict::Override;
        let all = [
            eval(
                "no-deletes",
                Mode::SoftMandatory,
                Outcome::Deny,
                "db | gone",
                false,
            ),
            eval("tags", Mode::SoftMandatory, Outcome::Deny, "x", true),
        ];
        let md = summary(&r, None, "https://x/r", &all);
        assert!(md.contains("### Policies"), "{md}");
        assert!(
            md.contains("| `no-deletes` | soft-mandatory | deny | db \\| gone |"),
            "{md}"
        );
        assert!(md.contains("| deny (overridden by user:root) |"), "{md}");
        assert!(md.contains("an org admin's override"), "{md}");
        assert_eq!(state_words(&r, None), "held by a policy");
        r.policy_hold = Verdict::Approval;
        assert!(summary(&r, None, "https://x/r", &[]).contains("an approval a policy asks for"));
        assert_eq!(state_words(&r, None), "waiting for approval");
    }

    fn policy_record(policy: &str, outcome: Outcome, message: &str) -> PolicyEvaluationRecord {
        use bosun_core::policy::{Mode, Point};
        use bosun_store::NewPolicyEvaluation;
        PolicyEvaluationRecord {
            id: 1,
            subject: "run-1".into(),
            evaluation: NewPolicyEvaluation {
                point: Point::Plan,
                policy: policy.into(),
                version: "sha256:00".into(),
                mode: Mode::SoftMandatory,
                outcome,
                deny: vec![],
                warn: if message.is_empty() {
                    vec![]
                } else {
                    vec![message.into()]
                },
                require_approval: vec![],
                skip: vec![],
                trigger: vec![],
                errors: vec![],
                duration_ms: 1,
            },
            evaluated_at: chrono::Utc::now(),
            overridden: None,
        }
    }

    #[test]
    fn the_comment_stays_under_the_limit_by_cutting_the_longest_plans_first() {
        let a = run(RunState::Finished, None);
        let mut b = run(RunState::Failed, Some("terraform exited 1"));
        b.stack = "app".into();
        let huge = "x".repeat(50_000);
        let big = "y ```` z".repeat(2_000);
        let stacks = [
            CommentStack {
                run: &a,
                gate: None,
                url: "https://x/a".into(),
                plan_text: Some(huge.clone()),
                policies: vec![
                    policy_record("tags", Outcome::Warn, "web has no owner tag"),
                    policy_record("no-destroy", Outcome::Pass, ""),
                    policy_record("size", Outcome::Pass, ""),
                ],
            },
            CommentStack {
                run: &b,
                gate: None,
                url: "https://x/b".into(),
                plan_text: Some(format!("\u{1b}[1mPlan:\u{1b}[0m {big}")),
                policies: vec![],
            },
        ];
        let not = [("dns".to_string(), "no watched path changed".to_string())];
        let body = comment("<!-- m -->", "acme", &stacks, &not);
        assert!(body.chars().count() <= GITHUB_TEXT_LIMIT);
        assert!(body.starts_with("<!-- m -->"));
        assert!(!body.contains(&huge), "the longest plan is cut");
        assert!(
            body.contains("The plan of `net` is left out"),
            "{}",
            &body[..400]
        );
        assert!(
            body.contains("Plan of <code>app</code>"),
            "the shorter one stays"
        );
        assert!(
            body.contains("`````\nPlan: y"),
            "a fence longer than the text's backticks, colours gone"
        );
        assert!(body.contains("- `dns`: no watched path changed"));
        // Each stack's policies: what said something, then how many passed.
        assert!(
            body.contains("| `tags` warn: web has no owner tag; 2 passed |"),
            "{}",
            &body[..600]
        );
        let app_row = body.lines().find(|l| l.contains("(https://x/b)")).unwrap();
        assert!(app_row.ends_with(" | — |"), "no policy: {app_row}");
        assert!(body.contains("**`app` failed:** terraform exited 1"));
        // Small enough: nothing cut.
        let small = [CommentStack {
            run: &a,
            gate: None,
            url: "https://x/a".into(),
            plan_text: Some("Plan: 2 to add".into()),
            policies: vec![],
        }];
        let body = comment("<!-- m -->", "acme", &small, &[]);
        assert!(body.contains("Plan: 2 to add") && !body.contains("left out"));
    }
}
