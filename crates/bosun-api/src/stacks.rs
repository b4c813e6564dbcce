//! Wire types of stacks: their settings, creation and changes.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::drift::{DriftDetection, StackDriftStatus};
use crate::nullable;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Dependency {
    /// Upstream stack id.
    pub stack: String,
    /// Upstream output name → downstream input variable (passed as `TF_VAR_<name>`).
    #[serde(default)]
    pub outputs: BTreeMap<String, String>,
    /// Trigger downstream after every successful upstream apply, not only on change.
    #[serde(default)]
    pub trigger_always: bool,
}

/// AWS credentials through the run's OIDC identity: the role each phase assumes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AwsIntegration {
    /// `arn:aws:iam::<account>:role/<name>`, assumed by plan phases.
    pub plan_role_arn: String,
    /// Assumed by apply phases [default: the plan role].
    #[serde(default)]
    pub apply_role_arn: Option<String>,
    /// The identity token's audience [default: `sts.amazonaws.com`].
    #[serde(default)]
    pub audience: Option<String>,
}

/// A stack as the API returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Stack {
    pub id: String,
    pub name: String,
    pub repository: String,
    pub branch: String,
    pub path: String,
    pub watch_paths: Vec<String>,
    pub engine: String,
    pub engine_binary: Option<String>,
    pub engine_version: Option<String>,
    pub tier: String,
    pub autodeploy: bool,
    pub environment: Option<String>,
    pub variables: BTreeMap<String, String>,
    pub depends_on: Vec<Dependency>,
    pub drift_detection: Option<DriftDetection>,
    pub runner_pool: String,
    pub aws: Option<AwsIntegration>,
    /// What the stack's runs report on GitHub (`both`, `checks`, `comment` or `none`);
    /// null: the org's setting.
    #[serde(default)]
    pub pr_feedback: Option<String>,
    /// What the stack's runs report on GitHub: its own `pr_feedback`, else its org's.
    #[serde(default)]
    pub pr_feedback_effective: String,
    /// Labels that select the stack (slugs, each once, at most 32), in the order given.
    #[serde(default)]
    pub labels: Vec<String>,
    /// Whether Bosun can reach the stack's repository.
    pub connection: StackConnection,
    /// The stacks that depend on it (their `depends_on` names it), by id: its downstream
    /// in the org's dependency graph. Filled when one stack is shown.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub downstream_stacks: Vec<String>,
    /// The host plans whose runs a change of its outputs starts (their `on_stack_change`),
    /// by name: its other downstream in the dependency graph. Filled when one stack is
    /// shown.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub feeds_plans: Vec<String>,
    /// How drift checking goes, for a stack with drift detection.
    #[serde(default)]
    pub drift_status: Option<StackDriftStatus>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// How a stack's repository is reached, and whether it is connected.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StackConnection {
    /// `github` (through the GitHub App) or `git` (a plain remote, polled).
    pub kind: String,
    /// `github`: an installation of the App covers the repository (and is not suspended).
    /// `git`: always true (reachability shows in runs and polls).
    pub connected: bool,
    /// The GitHub App installation, when connected through it.
    pub installation: Option<i64>,
    /// One line for people: what is connected, or what to do about it.
    pub detail: String,
}

/// The body of `POST /stacks`. Only `id` and `repository` are required.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StackCreate {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
    pub repository: String,
    #[serde(default)]
    pub branch: Option<String>,
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub watch_paths: Vec<String>,
    #[serde(default)]
    pub engine: Option<String>,
    #[serde(default)]
    pub engine_binary: Option<String>,
    #[serde(default)]
    pub engine_version: Option<String>,
    #[serde(default)]
    pub tier: Option<String>,
    #[serde(default)]
    pub autodeploy: bool,
    #[serde(default)]
    pub environment: Option<String>,
    #[serde(default)]
    pub variables: BTreeMap<String, String>,
    #[serde(default)]
    pub depends_on: Vec<Dependency>,
    #[serde(default)]
    pub drift_detection: Option<DriftDetection>,
    #[serde(default)]
    pub aws: Option<AwsIntegration>,
    #[serde(default)]
    pub runner_pool: Option<String>,
    /// What the stack's runs report on GitHub for its `github:` repository: `both` (a
    /// check run per commit and the pull request's comment), `checks`, `comment` or
    /// `none` [default: the org's setting].
    #[serde(default)]
    pub pr_feedback: Option<String>,
    /// Labels that select the stack: slugs, each once, at most 32 [default: none].
    #[serde(default)]
    pub labels: Vec<String>,
}

/// The body of `PATCH /stacks/{id}`: fields present are changed; `null` clears an
/// optional field. `id` may be sent only with the stack's own id: ids are immutable.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StackPatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watch_paths: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>)]
    pub engine_binary: Option<Option<String>>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>)]
    pub engine_version: Option<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autodeploy: Option<bool>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>)]
    pub environment: Option<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variables: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depends_on: Option<Vec<Dependency>>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<DriftDetection>)]
    pub drift_detection: Option<Option<DriftDetection>>,
    /// `null` removes the AWS integration.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<AwsIntegration>)]
    pub aws: Option<Option<AwsIntegration>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner_pool: Option<String>,
    /// `both`, `checks`, `comment` or `none`; `null` follows the org's setting again.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>)]
    pub pr_feedback: Option<Option<String>>,
    /// Replaces the stack's labels whole (`[]` removes them all): slugs, each once, at
    /// most 32.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Vec<String>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_tells_null_from_absent() {
        let p: StackPatch = serde_json::from_str(r#"{"environment": null}"#).unwrap();
        assert_eq!(p.environment, Some(None));
        assert_eq!(p.engine_binary, None);
        let p: StackPatch = serde_json::from_str(r#"{"environment": "prod"}"#).unwrap();
        assert_eq!(p.environment, Some(Some("prod".into())));
        assert!(serde_json::from_str::<StackPatch>(r#"{"nmae": "x"}"#).is_err());
        let p: StackPatch = serde_json::from_str(r#"{"pr_feedback": null}"#).unwrap();
        assert_eq!(p.pr_feedback, Some(None));
        let p: StackPatch = serde_json::from_str(r#"{"pr_feedback": "checks"}"#).unwrap();
        assert_eq!(p.pr_feedback, Some(Some("checks".into())));
        let p: StackPatch = serde_json::from_str(r#"{"labels": []}"#).unwrap();
        assert_eq!(p.labels, Some(Vec::new()));
        assert_eq!(p.name, None);
        let c: StackCreate =
            serde_json::from_str(r#"{"id": "net", "repository": "github:acme/infra"}"#).unwrap();
        assert!(c.labels.is_empty());
    }
}
