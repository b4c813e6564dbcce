//! What a plan proposes, read from the engine's `show -json <planfile>` output: one
//! action per resource change, Terraform's add/change/destroy counts, and the outputs that
//! change.

use std::collections::BTreeMap;

use bosun_api::{PlanSummary, ResourceChange};
use serde::Deserialize;

#[derive(Deserialize)]
struct ShowJson {
    #[serde(default)]
    resource_changes: Vec<ShowResourceChange>,
    #[serde(default)]
    output_changes: BTreeMap<String, ShowChange>,
}

#[derive(Deserialize)]
struct ShowResourceChange {
    address: String,
    /// `managed` or `data`; only managed resources count toward add/change/destroy.
    #[serde(default)]
    mode: Option<String>,
    change: ShowChange,
}

#[derive(Deserialize)]
struct ShowChange {
    #[serde(default)]
    actions: Vec<String>,
}

/// One action word for an `actions` list: a delete-and-create pair (either order) is a
/// `replace`; an unexpected combination is its actions joined with `-`.
pub(crate) fn action_name(actions: &[String]) -> String {
    match actions {
        [] => "no-op".to_string(),
        [one] => one.clone(),
        [a, b] if (a == "delete" && b == "create") || (a == "create" && b == "delete") => {
            "replace".to_string()
        }
        more => more.join("-"),
    }
}

/// The summary of a `show -json` document; `has_changes` comes from the plan's exit code
/// (`-detailed-exitcode` 2).
pub(crate) fn summarize(show_json: &[u8], has_changes: bool) -> Result<PlanSummary, String> {
    let show: ShowJson = serde_json::from_slice(show_json)
        .map_err(|e| format!("cannot read the plan's JSON: {e}"))?;
    let mut summary = PlanSummary {
        has_changes,
        ..PlanSummary::default()
    };
    for rc in show.resource_changes {
        let action = action_name(&rc.change.actions);
        if rc.mode.as_deref() != Some("data") {
            match action.as_str() {
                "create" => summary.add += 1,
                "update" => summary.change += 1,
                "delete" => summary.destroy += 1,
                "replace" => {
                    summary.add += 1;
                    summary.destroy += 1;
                }
                _ => {}
            }
        }
        summary.resource_changes.push(ResourceChange {
            address: rc.address,
            action,
        });
    }
    for (name, change) in show.output_changes {
        let action = action_name(&change.actions);
        if action != "no-op" {
            summary.output_changes.insert(name, action);
        }
    }
    Ok(summary)
}

/// "Plan: 1 to add, 0 to change, 2 to destroy. Outputs: 1 to create." — the log's last
/// word on a plan.
pub(crate) fn describe(summary: &PlanSummary) -> String {
    let mut line = format!(
        "Plan: {} to add, {} to change, {} to destroy.",
        summary.add, summary.change, summary.destroy
    );
    if !summary.output_changes.is_empty() {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for action in summary.output_changes.values() {
            *counts.entry(action.as_str()).or_default() += 1;
        }
        let parts: Vec<String> = counts
            .iter()
            .map(|(action, n)| format!("{n} to {action}"))
            .collect();
        line.push_str(&format!(" Outputs: {}.", parts.join(", ")));
    }
    if !summary.has_changes {
        line.push_str(" No changes.");
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::terraform_or_skip;
    use std::path::Path;
    use std::process::{Command, Stdio};

    fn acts(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn actions_map_to_one_word() {
        assert_eq!(action_name(&acts(&["create"])), "create");
        assert_eq!(action_name(&acts(&["no-op"])), "no-op");
        assert_eq!(action_name(&acts(&["read"])), "read");
        assert_eq!(action_name(&acts(&["delete", "create"])), "replace");
        assert_eq!(action_name(&acts(&["create", "delete"])), "replace");
        assert_eq!(action_name(&acts(&[])), "no-op");
        assert_eq!(action_name(&acts(&["update", "read"])), "update-read");
    }

    /// The shape `terraform show -json` gives resources (a provider is needed to make
    /// these for real, and nothing may be downloaded in tests).
    #[test]
    fn counts_resources_like_terraform() {
        let doc = serde_json::json!({
            "format_version": "0.2",
            "terraform_version": "1.0.3",
            "resource_changes": [
                {"address": "null_resource.a", "mode": "managed", "type": "null_resource",
                 "name": "a", "change": {"actions": ["create"], "before": null, "after": {}}},
                {"address": "null_resource.b", "mode": "managed",
                 "change": {"actions": ["update"]}},
                {"address": "null_resource.c", "mode": "managed",
                 "change": {"actions": ["delete"]}},
                {"address": "null_resource.d", "mode": "managed",
                 "change": {"actions": ["delete", "create"]}},
                {"address": "null_resource.e", "mode": "managed",
                 "change": {"actions": ["create", "delete"]}},
                {"address": "null_resource.f", "mode": "managed",
                 "change": {"actions": ["no-op"]}},
                {"address": "data.http.g", "mode": "data",
                 "change": {"actions": ["read"]}}
            ],
            "output_changes": {
                "same": {"actions": ["no-op"], "before": 1, "after": 1},
                "new": {"actions": ["create"]},
                "gone": {"actions": ["delete"]},
                "moved": {"actions": ["update"]}
            }
        });
        let s = summarize(doc.to_string().as_bytes(), true).unwrap();
        assert!(s.has_changes);
        assert_eq!((s.add, s.change, s.destroy), (3, 1, 3));
        let actions: Vec<(&str, &str)> = s
            .resource_changes
            .iter()
            .map(|r| (r.address.as_str(), r.action.as_str()))
            .collect();
        assert_eq!(
            actions,
            [
                ("null_resource.a", "create"),
                ("null_resource.b", "update"),
                ("null_resource.c", "delete"),
                ("null_resource.d", "replace"),
                ("null_resource.e", "replace"),
                ("null_resource.f", "no-op"),
                ("data.http.g", "read"),
            ]
        );
        let outputs: Vec<(&str, &str)> = s
            .output_changes
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            outputs,
            [("gone", "delete"), ("moved", "update"), ("new", "create")]
        );
        assert_eq!(
            describe(&s),
            "Plan: 3 to add, 1 to change, 3 to destroy. \
             Outputs: 1 to create, 1 to delete, 1 to update."
        );
    }

    #[test]
    fn a_document_without_changes_or_garbage() {
        let s = summarize(br#"{"format_version":"0.2"}"#, false).unwrap();
        assert_eq!(s, PlanSummary::default());
        assert_eq!(
            describe(&s),
            "Plan: 0 to add, 0 to change, 0 to destroy. No changes."
        );
        assert!(summarize(b"not json", false).is_err());
    }

    // ---- with the real Terraform ----------------------------------------------------

    /// Runs terraform in `dir` with a clean environment; returns (exit code, stdout).
    fn tf(bin: &Path, dir: &Path, args: &[&str]) -> (i32, Vec<u8>) {
        let out = Command::new(bin)
            .args(args)
            .current_dir(dir)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", dir)
            .env("TF_IN_AUTOMATION", "1")
            .env("TF_INPUT", "0")
            .env("CHECKPOINT_DISABLE", "1")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let code = out.status.code().unwrap_or(-1);
        assert!(
            code == 0 || code == 2,
            "terraform {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        (code, out.stdout)
    }

    /// Plans `config` (with `-detailed-exitcode`) and summarizes `show -json` of the plan.
    fn plan(bin: &Path, dir: &Path, config: &str, vars: &[&str]) -> PlanSummary {
        std::fs::write(dir.join("main.tf"), config).unwrap();
        let mut args = vec![
            "plan",
            "-input=false",
            "-no-color",
            "-out=plan.tfplan",
            "-detailed-exitcode",
        ];
        args.extend_from_slice(vars);
        let (code, _) = tf(bin, dir, &args);
        let (_, json) = tf(bin, dir, &["show", "-json", "plan.tfplan"]);
        summarize(&json, code == 2).unwrap()
    }

    #[test]
    fn summarizes_real_terraform_plans() {
        let Some(bin) = terraform_or_skip() else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        let v1 = r#"
            variable "name" { type = string }
            locals { greeting = "hello ${var.name}" }
            output "greeting" { value = local.greeting }
            output "fixed" { value = 42 }
            output "doomed" { value = "bye" }
        "#;
        std::fs::write(dir.join("main.tf"), v1).unwrap();
        tf(&bin, dir, &["init", "-input=false", "-no-color"]);

        // A fresh state: every output is created.
        let s = plan(&bin, dir, v1, &["-var", "name=a"]);
        assert!(s.has_changes);
        assert_eq!((s.add, s.change, s.destroy), (0, 0, 0));
        assert!(s.resource_changes.is_empty());
        let outputs: Vec<(&str, &str)> = s
            .output_changes
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            outputs,
            [
                ("doomed", "create"),
                ("fixed", "create"),
                ("greeting", "create")
            ]
        );
        tf(
            &bin,
            dir,
            &["apply", "-input=false", "-no-color", "plan.tfplan"],
        );

        // The same input again: nothing to do, and no-op outputs are left out.
        let s = plan(&bin, dir, v1, &["-var", "name=a"]);
        assert!(!s.has_changes);
        assert!(s.output_changes.is_empty(), "{s:?}");

        // A changed value, a removed output and a new one.
        let v2 = r#"
            variable "name" { type = string }
            locals { greeting = "hello ${var.name}" }
            output "greeting" { value = local.greeting }
            output "fixed" { value = 42 }
            output "fresh" { value = true }
        "#;
        let s = plan(&bin, dir, v2, &["-var", "name=b"]);
        assert!(s.has_changes);
        let outputs: Vec<(&str, &str)> = s
            .output_changes
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            outputs,
            [
                ("doomed", "delete"),
                ("fresh", "create"),
                ("greeting", "update")
            ]
        );
    }
}
