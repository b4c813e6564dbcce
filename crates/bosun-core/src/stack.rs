//! Stacks: one OpenTofu/Terraform root module tracked from a repository.
//!
//! Raw input arrives as a [`StackInput`] (strings as the client sent them) and becomes a
//! [`StackSpec`] only through [`StackSpec::from_input`], which validates and normalizes
//! every field. Updates overlay a patch on the stored spec's input and validate again, so
//! there is exactly one path into a valid stack.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::feedback::PrFeedback;
use crate::{Slug, ValidationError};

/// The fields of a stack as a client supplies them, before validation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StackInput {
    pub id: String,
    pub name: Option<String>,
    pub repository: String,
    pub branch: Option<String>,
    pub path: Option<String>,
    pub watch_paths: Vec<String>,
    pub engine: Option<String>,
    pub engine_binary: Option<String>,
    pub engine_version: Option<String>,
    pub tier: Option<String>,
    pub autodeploy: bool,
    pub environment: Option<String>,
    pub variables: BTreeMap<String, String>,
    pub depends_on: Vec<DependencyInput>,
    pub drift_detection: Option<DriftInput>,
    pub runner_pool: Option<String>,
    pub aws: Option<AwsInput>,
    /// `both`, `checks`, `comment` or `none`; `None` follows the org's setting.
    pub pr_feedback: Option<String>,
    /// Labels (slugs, each once) that select the stack, e.g. for policies.
    pub labels: Vec<String>,
}

/// AWS through web identity: the role each phase assumes with the run's OIDC token.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AwsInput {
    pub plan_role_arn: String,
    /// Defaults to the plan role.
    pub apply_role_arn: Option<String>,
    /// The token's audience [default: `sts.amazonaws.com`].
    pub audience: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct DependencyInput {
    pub stack: String,
    pub outputs: BTreeMap<String, String>,
    pub trigger_always: bool,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct DriftInput {
    pub schedule: String,
    pub reconcile: bool,
    /// IANA time zone the schedule is read in [default: `UTC`].
    pub timezone: Option<String>,
}

/// A validated stack definition.
#[derive(Debug, Clone, PartialEq)]
pub struct StackSpec {
    pub id: Slug,
    pub name: String,
    pub repository: Repository,
    pub branch: String,
    /// Root module folder, normalized; empty means the repository root.
    pub path: RepoPath,
    /// Extra watched prefixes, normalized and de-duplicated (the `path` is always watched).
    pub watch_paths: Vec<RepoPath>,
    pub engine: Engine,
    pub tier: Tier,
    pub autodeploy: bool,
    pub environment: Option<Slug>,
    /// Environment variable name → plain value or `secret://namespace/key` reference.
    pub variables: BTreeMap<String, String>,
    pub depends_on: Vec<Dependency>,
    pub drift_detection: Option<DriftDetection>,
    pub runner_pool: RunnerPool,
    /// AWS credentials through the run's identity, per phase.
    pub aws: Option<AwsRoles>,
    /// What the stack's runs report on GitHub; `None` follows the org's setting.
    pub pr_feedback: Option<PrFeedback>,
    /// Labels that select the stack (at most [`MAX_LABELS`], each once), in the order
    /// given.
    pub labels: Vec<Slug>,
}

/// The IAM roles a stack's runs assume, one per phase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsRoles {
    pub plan_role_arn: String,
    pub apply_role_arn: String,
    pub audience: String,
}

pub const DEFAULT_AWS_AUDIENCE: &str = "sts.amazonaws.com";

impl AwsRoles {
    fn from_input(a: AwsInput) -> Result<Self, ValidationError> {
        let plan_role_arn = check_role_arn("plan_role_arn", a.plan_role_arn.trim())?;
        let apply_role_arn = match a.apply_role_arn {
            Some(arn) => check_role_arn("apply_role_arn", arn.trim())?,
            None => plan_role_arn.clone(),
        };
        let audience = a
            .audience
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|| DEFAULT_AWS_AUDIENCE.to_string());
        if audience.is_empty() || audience.len() > 255 || audience.chars().any(char::is_control) {
            return Err(ValidationError::new(
                "audience",
                "must be 1 to 255 characters without control characters",
            ));
        }
        Ok(AwsRoles {
            plan_role_arn,
            apply_role_arn,
            audience,
        })
    }

    /// The role of a phase.
    pub fn role_for(&self, phase: crate::run::Phase) -> &str {
        match phase {
            crate::run::Phase::Plan => &self.plan_role_arn,
            crate::run::Phase::Apply => &self.apply_role_arn,
        }
    }
}

/// `arn:<partition>:iam::<12-digit account>:role/<path/name>`.
fn check_role_arn(field: &str, arn: &str) -> Result<String, ValidationError> {
    let bad = || {
        Err(ValidationError::new(
            field,
            format!(
                "expected an IAM role ARN like arn:aws:iam::123456789012:role/name (got {arn:?})"
            ),
        ))
    };
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    let [arn_lit, partition, service, region, account, resource] = parts.as_slice() else {
        return bad();
    };
    let name_ok = resource.strip_prefix("role/").is_some_and(|n| {
        !n.is_empty()
            && n.len() <= 512
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"+=,.@_-/".contains(&b))
    });
    if *arn_lit != "arn"
        || !["aws", "aws-cn", "aws-us-gov"].contains(partition)
        || *service != "iam"
        || !region.is_empty()
        || account.len() != 12
        || !account.bytes().all(|b| b.is_ascii_digit())
        || !name_ok
    {
        return bad();
    }
    Ok(arn.to_string())
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dependency {
    pub stack: Slug,
    /// Upstream output name → downstream input variable (passed as `TF_VAR_<name>`).
    pub outputs: BTreeMap<String, String>,
    pub trigger_always: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriftDetection {
    pub schedule: String,
    pub reconcile: bool,
    /// The IANA time zone the schedule's wall times are in.
    pub timezone: String,
}

impl DriftDetection {
    /// The parsed schedule (valid: checked when the stack was saved).
    pub fn parsed(&self) -> Result<crate::cron::Schedule, ValidationError> {
        crate::cron::Schedule::parse(&self.schedule, &self.timezone)
    }
}

pub const DEFAULT_BRANCH: &str = "main";
const MAX_NAME: usize = 200;
const MAX_VARIABLES: usize = 500;
const MAX_VALUE: usize = 32 * 1024;
const MAX_WATCH_PATHS: usize = 100;
const MAX_DEPENDENCIES: usize = 100;
/// The most labels a stack carries.
pub const MAX_LABELS: usize = 32;

impl StackSpec {
    pub fn from_input(input: StackInput) -> Result<Self, ValidationError> {
        let id = Slug::parse("id", &input.id)?;
        let name = match input.name {
            Some(n) => check_name(&n)?,
            None => id.to_string(),
        };
        let repository = input.repository.parse::<Repository>()?;
        let branch = check_branch(input.branch.as_deref().unwrap_or(DEFAULT_BRANCH))?;
        let path = match input.path {
            Some(p) => RepoPath::parse(&p).map_err(|e| e.under("path"))?,
            None => RepoPath::root(),
        };
        if input.watch_paths.len() > MAX_WATCH_PATHS {
            return Err(ValidationError::new(
                "watch_paths",
                format!("at most {MAX_WATCH_PATHS} entries"),
            ));
        }
        let mut seen = BTreeSet::new();
        let mut watch_paths = Vec::new();
        for (i, raw) in input.watch_paths.iter().enumerate() {
            let p = RepoPath::parse(raw).map_err(|e| e.under(&format!("watch_paths[{i}]")))?;
            if seen.insert(p.clone()) {
                watch_paths.push(p);
            }
        }
        let engine = Engine::parse(
            input.engine.as_deref(),
            input.engine_binary,
            input.engine_version,
        )?;
        let tier = match input.tier {
            Some(t) => t.parse()?,
            None => Tier::Small,
        };
        let environment = input
            .environment
            .map(|e| Slug::parse("environment", &e))
            .transpose()?;
        check_variables(&input.variables)?;
        if input.depends_on.len() > MAX_DEPENDENCIES {
            return Err(ValidationError::new(
                "depends_on",
                format!("at most {MAX_DEPENDENCIES} entries"),
            ));
        }
        let mut depends_on: Vec<Dependency> = Vec::new();
        for (i, d) in input.depends_on.into_iter().enumerate() {
            let field = format!("depends_on[{i}]");
            let dep = Dependency::from_input(d).map_err(|e| e.under(&field))?;
            if dep.stack == id {
                return Err(ValidationError::new(
                    format!("{field}.stack"),
                    "a stack cannot depend on itself",
                ));
            }
            if depends_on.iter().any(|d| d.stack == dep.stack) {
                return Err(ValidationError::new(
                    format!("{field}.stack"),
                    format!("stack {:?} is listed twice", dep.stack.as_str()),
                ));
            }
            depends_on.push(dep);
        }
        let drift_detection = input
            .drift_detection
            .map(DriftDetection::from_input)
            .transpose()
            .map_err(|e| e.under("drift_detection"))?;
        let runner_pool = match input.runner_pool {
            Some(p) => RunnerPool::parse(&p)?,
            None => RunnerPool::Hosted,
        };
        let aws = input
            .aws
            .map(AwsRoles::from_input)
            .transpose()
            .map_err(|e| e.under("aws"))?;
        let pr_feedback = input
            .pr_feedback
            .map(|f| f.parse::<PrFeedback>())
            .transpose()?;
        if input.labels.len() > MAX_LABELS {
            return Err(ValidationError::new(
                "labels",
                format!("at most {MAX_LABELS} labels (got {})", input.labels.len()),
            ));
        }
        let labels = crate::id::label_slugs("labels", &input.labels)?;
        Ok(StackSpec {
            id,
            name,
            repository,
            branch,
            path,
            watch_paths,
            engine,
            tier,
            autodeploy: input.autodeploy,
            environment,
            variables: input.variables,
            depends_on,
            drift_detection,
            runner_pool,
            aws,
            pr_feedback,
            labels,
        })
    }

    /// The raw form of this spec, for overlaying a partial update and validating again.
    pub fn to_input(&self) -> StackInput {
        StackInput {
            id: self.id.to_string(),
            name: Some(self.name.clone()),
            repository: self.repository.to_string(),
            branch: Some(self.branch.clone()),
            path: Some(self.path.to_string()),
            watch_paths: self.watch_paths.iter().map(|p| p.to_string()).collect(),
            engine: Some(self.engine.kind.as_str().to_string()),
            engine_binary: self.engine.binary.clone(),
            engine_version: self.engine.version.clone(),
            tier: Some(self.tier.as_str().to_string()),
            autodeploy: self.autodeploy,
            environment: self.environment.as_ref().map(|e| e.to_string()),
            variables: self.variables.clone(),
            depends_on: self
                .depends_on
                .iter()
                .map(|d| DependencyInput {
                    stack: d.stack.to_string(),
                    outputs: d.outputs.clone(),
                    trigger_always: d.trigger_always,
                })
                .collect(),
            drift_detection: self.drift_detection.as_ref().map(|d| DriftInput {
                schedule: d.schedule.clone(),
                reconcile: d.reconcile,
                timezone: Some(d.timezone.clone()),
            }),
            runner_pool: Some(self.runner_pool.to_string()),
            aws: self.aws.as_ref().map(|a| AwsInput {
                plan_role_arn: a.plan_role_arn.clone(),
                apply_role_arn: Some(a.apply_role_arn.clone()),
                audience: Some(a.audience.clone()),
            }),
            pr_feedback: self.pr_feedback.map(|f| f.as_str().to_string()),
            labels: self.labels.iter().map(|l| l.to_string()).collect(),
        }
    }
}

fn check_name(raw: &str) -> Result<String, ValidationError> {
    let name = raw.trim();
    if name.is_empty() {
        return Err(ValidationError::new("name", "must not be empty"));
    }
    if name.chars().count() > MAX_NAME {
        return Err(ValidationError::new(
            "name",
            format!("must be at most {MAX_NAME} characters"),
        ));
    }
    if name.chars().any(char::is_control) {
        return Err(ValidationError::new(
            "name",
            "must not contain control characters",
        ));
    }
    Ok(name.to_string())
}

/// Git's branch-name rules (`git check-ref-format --branch`), the subset that matters.
pub fn check_branch(raw: &str) -> Result<String, ValidationError> {
    let bad = |m: &str| Err(ValidationError::new("branch", format!("{m} (got {raw:?})")));
    if raw.is_empty() || raw.len() > 255 {
        return bad("must be 1 to 255 characters");
    }
    if raw.starts_with('-') || raw.starts_with('/') || raw.ends_with('/') || raw.ends_with('.') {
        return bad("must not start with '-' or '/' nor end with '/' or '.'");
    }
    if raw.contains("..") || raw.contains("//") || raw.contains("@{") || raw == "@" {
        return bad("must not contain '..', '//' or '@{'");
    }
    if raw
        .chars()
        .any(|c| c.is_control() || c.is_whitespace() || "~^:?*[\\".contains(c))
    {
        return bad("must not contain spaces, control characters or any of ~^:?*[\\");
    }
    if raw
        .split('/')
        .any(|s| s.starts_with('.') || s.ends_with(".lock"))
    {
        return bad("no component may start with '.' or end with '.lock'");
    }
    Ok(raw.to_string())
}

/// Where a stack's code lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Repository {
    /// `github:owner/repo`, reached through the GitHub App.
    GitHub { owner: String, repo: String },
    /// Any git URL: `https://`, `http://`, `ssh://`, `git://` or `file://`.
    Git(String),
}

impl FromStr for Repository {
    type Err = ValidationError;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let bad = |m: String| Err(ValidationError::new("repository", m));
        if raw.is_empty() {
            return bad("is required: github:owner/repo or a git URL".into());
        }
        if raw.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return bad(format!("must not contain spaces (got {raw:?})"));
        }
        if let Some(rest) = raw.strip_prefix("github:") {
            let Some((owner, repo)) = rest.split_once('/') else {
                return bad(format!("expected github:owner/repo (got {raw:?})"));
            };
            let owner_ok = !owner.is_empty()
                && owner.len() <= 39
                && owner
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !owner.starts_with('-');
            let repo = repo.strip_suffix(".git").unwrap_or(repo);
            let repo_ok = !repo.is_empty()
                && repo.len() <= 100
                && repo != "."
                && repo != ".."
                && repo
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
            if !owner_ok || !repo_ok {
                return bad(format!(
                    "expected github:owner/repo with GitHub's owner and repository name rules (got {raw:?})"
                ));
            }
            return Ok(Repository::GitHub {
                owner: owner.to_string(),
                repo: repo.to_string(),
            });
        }
        let Some((scheme, rest)) = raw.split_once("://") else {
            return bad(format!(
                "expected github:owner/repo or a URL with scheme https, http, ssh, git or file (got {raw:?})"
            ));
        };
        if !["https", "http", "ssh", "git", "file"].contains(&scheme) {
            return bad(format!(
                "unsupported scheme {scheme:?}; use https, http, ssh, git or file"
            ));
        }
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        if scheme == "file" {
            if !authority.is_empty() || path.is_empty() {
                return bad(format!("expected file:///absolute/path (got {raw:?})"));
            }
        } else {
            if authority.is_empty() || path.is_empty() {
                return bad(format!("expected a host and a path (got {raw:?})"));
            }
            if let Some((userinfo, _)) = authority.rsplit_once('@') {
                if userinfo.contains(':') {
                    return bad(
                        "must not embed a password; give the stack credentials instead".into(),
                    );
                }
            }
        }
        Ok(Repository::Git(raw.to_string()))
    }
}

impl Repository {
    /// The key that routes events to this repository's stacks: `github:owner/repo` in
    /// lower case (GitHub names are case-insensitive), or the git URL as written.
    pub fn key(&self) -> String {
        match self {
            Repository::GitHub { owner, repo } => {
                format!(
                    "github:{}/{}",
                    owner.to_ascii_lowercase(),
                    repo.to_ascii_lowercase()
                )
            }
            Repository::Git(url) => url.clone(),
        }
    }

    /// `owner/repo` for a GitHub repository.
    pub fn github_full_name(&self) -> Option<String> {
        match self {
            Repository::GitHub { owner, repo } => Some(format!("{owner}/{repo}")),
            Repository::Git(_) => None,
        }
    }
}

impl fmt::Display for Repository {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Repository::GitHub { owner, repo } => write!(f, "github:{owner}/{repo}"),
            Repository::Git(url) => f.write_str(url),
        }
    }
}

/// A normalized, relative path inside a repository: no leading `/`, no `..`, no empty
/// or `.` segments, no trailing `/`. The empty path is the repository root.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RepoPath(String);

impl RepoPath {
    pub fn root() -> Self {
        Self(String::new())
    }

    pub fn parse(raw: &str) -> Result<Self, ValidationError> {
        let bad = |m: &str| Err(ValidationError::new("", format!("{m} (got {raw:?})")));
        if raw.len() > 1024 {
            return bad("must be at most 1024 bytes");
        }
        if raw.chars().any(|c| c.is_control() || c == '\\') {
            return bad("must not contain control characters or backslashes");
        }
        if raw.starts_with('/') {
            return bad("must be relative to the repository root, not absolute");
        }
        let trimmed = raw.trim_end_matches('/');
        let mut segments = Vec::new();
        for seg in trimmed.split('/') {
            match seg {
                "." => continue,
                ".." => return bad("must not contain '..'"),
                "" if !trimmed.is_empty() => return bad("must not contain empty segments ('//')"),
                "" => continue,
                s => segments.push(s),
            }
        }
        Ok(Self(segments.join("/")))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for RepoPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineKind {
    /// Whichever the runner has: `tofu` on its PATH, else `terraform` (the default).
    Auto,
    Tofu,
    Terraform,
}

impl EngineKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EngineKind::Auto => "auto",
            EngineKind::Tofu => "tofu",
            EngineKind::Terraform => "terraform",
        }
    }
}

/// The IaC engine a stack runs, with an optional binary path and version pin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Engine {
    pub kind: EngineKind,
    pub binary: Option<String>,
    pub version: Option<String>,
}

impl Engine {
    fn parse(
        kind: Option<&str>,
        binary: Option<String>,
        version: Option<String>,
    ) -> Result<Self, ValidationError> {
        let kind = match kind.unwrap_or("auto") {
            "auto" => EngineKind::Auto,
            "tofu" | "opentofu" => EngineKind::Tofu,
            "terraform" => EngineKind::Terraform,
            other => {
                return Err(ValidationError::new(
                    "engine",
                    format!("unknown engine {other:?}; expected auto, tofu or terraform"),
                ))
            }
        };
        if let Some(b) = &binary {
            if b.is_empty() || b.len() > 4096 || b.chars().any(char::is_control) {
                return Err(ValidationError::new(
                    "engine_binary",
                    "must be a non-empty path without control characters",
                ));
            }
            if b.contains('/') && !b.starts_with('/') {
                return Err(ValidationError::new(
                    "engine_binary",
                    format!("must be an absolute path or a command name on PATH (got {b:?})"),
                ));
            }
        }
        if let Some(v) = &version {
            if !is_version(v) {
                return Err(ValidationError::new(
                    "engine_version",
                    format!("expected a version like 1.8.2 (got {v:?})"),
                ));
            }
        }
        Ok(Engine {
            kind,
            binary,
            version,
        })
    }
}

fn is_version(v: &str) -> bool {
    let (core, pre) = match v.split_once('-') {
        Some((c, p)) => (c, Some(p)),
        None => (v, None),
    };
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.len() <= 9 && p.bytes().all(|b| b.is_ascii_digit()))
        && pre.is_none_or(|p| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
        })
}

/// A stack's size class, which sets its phase timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    Small,
    Medium,
    Large,
}

impl Tier {
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Small => "small",
            Tier::Medium => "medium",
            Tier::Large => "large",
        }
    }

    pub fn plan_timeout(self) -> Duration {
        Duration::from_secs(60 * [15, 30, 60][self as usize])
    }

    pub fn apply_timeout(self) -> Duration {
        Duration::from_secs(60 * [30, 60, 180][self as usize])
    }
}

impl FromStr for Tier {
    type Err = ValidationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "small" => Ok(Tier::Small),
            "medium" => Ok(Tier::Medium),
            "large" => Ok(Tier::Large),
            other => Err(ValidationError::new(
                "tier",
                format!("unknown tier {other:?}; expected small, medium or large"),
            )),
        }
    }
}

/// Where a stack's runs execute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunnerPool {
    Hosted,
    Named(Slug),
}

impl RunnerPool {
    pub fn parse(raw: &str) -> Result<Self, ValidationError> {
        if raw == "hosted" {
            Ok(RunnerPool::Hosted)
        } else {
            Slug::parse("runner_pool", raw).map(RunnerPool::Named)
        }
    }
}

impl fmt::Display for RunnerPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunnerPool::Hosted => f.write_str("hosted"),
            RunnerPool::Named(s) => f.write_str(s.as_str()),
        }
    }
}

fn is_identifier(s: &str, extra: &[u8]) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || extra.contains(&b))
        && s.len() <= 255
}

/// Checks a `secret://<namespace>/<key>` reference's shape (not whether it exists).
pub fn check_secret_ref(value: &str) -> Result<(), String> {
    let Some(rest) = value.strip_prefix("secret://") else {
        return Ok(());
    };
    let Some((ns, key)) = rest.split_once('/') else {
        return Err(format!(
            "secret reference must be secret://<namespace>/<key> (got {value:?})"
        ));
    };
    if Slug::parse("", ns).is_err() {
        return Err(format!(
            "secret namespace {ns:?} must be a slug (lowercase letters, digits, '-')"
        ));
    }
    if key.is_empty()
        || key.len() > 255
        || !key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
    {
        return Err(format!(
            "secret key {key:?} may contain only letters, digits, '_', '.' and '-'"
        ));
    }
    Ok(())
}

fn check_variables(vars: &BTreeMap<String, String>) -> Result<(), ValidationError> {
    if vars.len() > MAX_VARIABLES {
        return Err(ValidationError::new(
            "variables",
            format!("at most {MAX_VARIABLES} variables"),
        ));
    }
    for (name, value) in vars {
        let field = format!("variables.{name}");
        if !is_identifier(name, b"") {
            return Err(ValidationError::new(
                field,
                "variable names must be environment variable names ([A-Za-z_][A-Za-z0-9_]*)",
            ));
        }
        if name.starts_with("BOSUN_") || name.starts_with("TF_HTTP_") {
            return Err(ValidationError::new(
                field,
                "names starting with BOSUN_ or TF_HTTP_ are reserved: Bosun sets them for each run",
            ));
        }
        if value.len() > MAX_VALUE || value.contains('\0') {
            return Err(ValidationError::new(
                field,
                format!("values must be at most {MAX_VALUE} bytes with no NUL"),
            ));
        }
        check_secret_ref(value).map_err(|m| ValidationError::new(field, m))?;
    }
    Ok(())
}

impl Dependency {
    fn from_input(d: DependencyInput) -> Result<Self, ValidationError> {
        let stack = Slug::parse("stack", &d.stack)?;
        for (output, var) in &d.outputs {
            if !is_identifier(output, b"-") {
                return Err(ValidationError::new(
                    format!("outputs.{output}"),
                    "output names must be Terraform identifiers",
                ));
            }
            if !is_identifier(var, b"-") {
                return Err(ValidationError::new(
                    format!("outputs.{output}"),
                    format!("input variable {var:?} must be a Terraform identifier"),
                ));
            }
        }
        Ok(Dependency {
            stack,
            outputs: d.outputs,
            trigger_always: d.trigger_always,
        })
    }
}

impl DriftDetection {
    fn from_input(d: DriftInput) -> Result<Self, ValidationError> {
        let timezone = d.timezone.as_deref().unwrap_or("UTC");
        let parsed = crate::cron::Schedule::parse(&d.schedule, timezone)?;
        Ok(DriftDetection {
            schedule: parsed.expression().to_string(),
            reconcile: d.reconcile,
            timezone: parsed.timezone().name().to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aws_roles_are_checked_and_default_per_phase() {
        let base = || StackInput {
            id: "net".into(),
            repository: "github:acme/infra".into(),
            ..StackInput::default()
        };
        let mut i = base();
        i.aws = Some(AwsInput {
            plan_role_arn: "arn:aws:iam::123456789012:role/bosun-plan".into(),
            ..AwsInput::default()
        });
        let spec = StackSpec::from_input(i).unwrap();
        let aws = spec.aws.clone().unwrap();
        assert_eq!(
            aws.role_for(crate::run::Phase::Apply),
            "arn:aws:iam::123456789012:role/bosun-plan"
        );
        assert_eq!(aws.audience, DEFAULT_AWS_AUDIENCE);
        assert_eq!(StackSpec::from_input(spec.to_input()).unwrap(), spec);
        for bad in [
            "arn:aws:iam::12345:role/x",
            "arn:aws:s3:::bucket",
            "arn:aws:iam::123456789012:user/alice",
            "arn:aws:iam::123456789012:role/",
            "role/x",
        ] {
            let mut i = base();
            i.aws = Some(AwsInput {
                plan_role_arn: "arn:aws:iam::123456789012:role/ok".into(),
                apply_role_arn: Some(bad.into()),
                audience: None,
            });
            let e = StackSpec::from_input(i).unwrap_err();
            assert_eq!(e.field, "aws.apply_role_arn", "{bad}");
        }
    }
    use proptest::prelude::*;

    fn input() -> StackInput {
        StackInput {
            id: "networking".into(),
            repository: "github:acme/infra".into(),
            ..Default::default()
        }
    }

    #[test]
    fn defaults() {
        let s = StackSpec::from_input(input()).unwrap();
        assert_eq!(s.name, "networking");
        assert_eq!(s.branch, "main");
        assert!(s.path.is_root());
        assert_eq!(s.engine.kind, EngineKind::Auto);
        assert_eq!(s.tier, Tier::Small);
        assert_eq!(s.runner_pool, RunnerPool::Hosted);
        assert_eq!(s.pr_feedback, None);
        assert_eq!(StackSpec::from_input(s.to_input()).unwrap(), s);
    }

    #[test]
    fn pr_feedback_round_trips_through_the_input() {
        for f in PrFeedback::ALL {
            let s = StackSpec::from_input(StackInput {
                pr_feedback: Some(f.as_str().into()),
                ..input()
            })
            .unwrap();
            assert_eq!(s.pr_feedback, Some(f));
            assert_eq!(StackSpec::from_input(s.to_input()).unwrap(), s);
        }
    }

    #[test]
    fn labels_keep_their_order_and_round_trip_through_the_input() {
        let s = StackSpec::from_input(StackInput {
            labels: vec!["team-net".into(), "prod".into(), "eu-1".into()],
            ..input()
        })
        .unwrap();
        assert_eq!(
            s.labels.iter().map(Slug::as_str).collect::<Vec<_>>(),
            ["team-net", "prod", "eu-1"]
        );
        assert_eq!(StackSpec::from_input(s.to_input()).unwrap(), s);
        assert!(StackSpec::from_input(input()).unwrap().labels.is_empty());
        let most = StackSpec::from_input(StackInput {
            labels: (0..MAX_LABELS).map(|n| format!("l{n}")).collect(),
            ..input()
        })
        .unwrap();
        assert_eq!(most.labels.len(), MAX_LABELS);
        let e = StackSpec::from_input(StackInput {
            labels: (0..=MAX_LABELS).map(|n| format!("l{n}")).collect(),
            ..input()
        })
        .unwrap_err();
        assert_eq!(e.field, "labels");
        assert!(e.message.contains("at most 32 labels"), "{e}");
    }

    #[test]
    fn paths_normalize() {
        for (raw, want) in [
            ("", ""),
            (".", ""),
            ("./infra/net/", "infra/net"),
            ("infra/./net", "infra/net"),
            ("infra", "infra"),
        ] {
            assert_eq!(RepoPath::parse(raw).unwrap().as_str(), want, "{raw}");
        }
        for bad in ["/abs", "a/../b", "..", "a//b", "a\\b", "a\0b"] {
            assert!(RepoPath::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn field_errors_name_the_field() {
        type Mutation = fn(&mut StackInput);
        let cases: Vec<(Mutation, &str)> = vec![
            (|i| i.id = "Bad_Id".into(), "id"),
            (|i| i.repository = "ftp://x/y".into(), "repository"),
            (|i| i.repository = "github:acme".into(), "repository"),
            (
                |i| i.repository = "https://u:pw@host/r.git".into(),
                "repository",
            ),
            (|i| i.branch = Some("a..b".into()), "branch"),
            (|i| i.path = Some("/etc".into()), "path"),
            (
                |i| i.watch_paths = vec!["ok".into(), "../x".into()],
                "watch_paths[1]",
            ),
            (|i| i.engine = Some("pulumi".into()), "engine"),
            (
                |i| i.engine_version = Some("latest".into()),
                "engine_version",
            ),
            (|i| i.tier = Some("huge".into()), "tier"),
            (|i| i.environment = Some("Prod".into()), "environment"),
            (|i| i.runner_pool = Some("Edge Pool".into()), "runner_pool"),
            (
                |i| {
                    i.variables.insert("BOSUN_X".into(), "1".into());
                },
                "variables.BOSUN_X",
            ),
            (
                |i| {
                    i.variables
                        .insert("TF_VAR_x".into(), "secret://Bad/x".into());
                },
                "variables.TF_VAR_x",
            ),
            (
                |i| {
                    i.depends_on = vec![DependencyInput {
                        stack: "networking".into(),
                        ..Default::default()
                    }]
                },
                "depends_on[0].stack",
            ),
            (
                |i| {
                    i.drift_detection = Some(DriftInput {
                        schedule: "every day".into(),
                        ..Default::default()
                    })
                },
                "drift_detection.schedule",
            ),
            (
                |i| {
                    i.drift_detection = Some(DriftInput {
                        schedule: "0 3 * * *".into(),
                        timezone: Some("Europe/Atlantis".into()),
                        ..Default::default()
                    })
                },
                "drift_detection.timezone",
            ),
            (|i| i.name = Some("   ".into()), "name"),
            (|i| i.pr_feedback = Some("all".into()), "pr_feedback"),
            (
                |i| i.labels = vec!["web".into(), "Prod".into()],
                "labels[1]",
            ),
            (|i| i.labels = vec!["web".into(), "web".into()], "labels[1]"),
            (
                |i| i.labels = (0..=MAX_LABELS).map(|n| format!("l{n}")).collect(),
                "labels",
            ),
        ];
        for (mutate, field) in cases {
            let mut i = input();
            mutate(&mut i);
            let err = StackSpec::from_input(i).unwrap_err();
            assert_eq!(err.field, field, "{err}");
        }
    }

    #[test]
    fn repositories() {
        for ok in [
            "github:acme/infra",
            "github:acme/infra.git",
            "https://git.example.com/infra.git",
            "ssh://git@git.example.com/infra.git",
            "file:///srv/git/infra",
        ] {
            assert!(ok.parse::<Repository>().is_ok(), "{ok}");
        }
        assert_eq!(
            "github:acme/infra.git"
                .parse::<Repository>()
                .unwrap()
                .to_string(),
            "github:acme/infra"
        );
    }

    proptest! {
        #[test]
        fn normalized_paths_are_fixed_points(raw in "[a-z./]{0,30}") {
            if let Ok(p) = RepoPath::parse(&raw) {
                let again = RepoPath::parse(p.as_str()).unwrap();
                prop_assert_eq!(&again, &p);
                prop_assert!(!p.as_str().starts_with('/'));
                prop_assert!(!p.as_str().split('/').any(|s| s == ".." || s == "."));
            }
        }
    }
}
