//! Executing one leased phase in its workspace: check out the source, point the engine at
//! Bosun's state, resolve the lease's integrations (`integrations`), report `started`,
//! then `init` and either `plan` (summarize, upload the plan file and its JSON) or `apply` (the
//! uploaded plan file). The result is the event to report.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bosun_api::{Lease, RunnerEvent, RunnerReport};

use crate::client::{retry, ClientError, ServerClient};
use crate::control::{Shutdown, Stop, StopSignal};
use crate::egress::{self, EgressMode, Refusals, Sandbox, ServerUrls};
use crate::integrations;
use crate::logs::LogSink;
use crate::plan_summary;
use crate::process::{find_program, run_step, Exited, Step, StepEnd};
use crate::recovery;
use crate::workspace::{
    backend_override, engine_env, git_env, inherited_path, module_dir, state_retry_env,
    unmasked_short_values, Workspace, BACKEND_OVERRIDE_FILE, MIN_MASK_BYTES,
};
use crate::RunnerConfig;

/// The saved plan's file name in the module directory.
const PLAN_FILE: &str = "plan.tfplan";
/// A failure reason is kept short: it is a summary, the log has the rest.
const MAX_REASON_CHARS: usize = 500;

/// Everything a phase needs besides its workspace.
pub(crate) struct PhaseContext<'a> {
    pub(crate) client: &'a Arc<ServerClient>,
    pub(crate) config: &'a RunnerConfig,
    pub(crate) runner_name: &'a str,
    pub(crate) lease: &'a Lease,
    pub(crate) stop: &'a StopSignal,
    pub(crate) shutdown: &'a Shutdown,
    pub(crate) log: &'a LogSink,
    /// The connections the phase's engine tried that the egress policy refused.
    pub(crate) refusals: &'a Refusals,
}

/// What to tell the server about the phase.
#[derive(Debug, PartialEq)]
pub(crate) enum PhaseEnd {
    Report(RunnerEvent),
    /// The lease was fenced: the run is someone else's now; report nothing.
    Fenced,
}

/// Why a phase ended before its natural end.
#[derive(Debug)]
pub(crate) enum Halt {
    Failed(String),
    Stopped(Stop),
}

impl From<Stop> for Halt {
    fn from(stop: Stop) -> Self {
        Halt::Stopped(stop)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum PhaseKind {
    Plan,
    Apply,
}

/// Runs the leased phase in a fresh workspace (removed afterwards) and says what to report.
pub(crate) async fn execute(ctx: &PhaseContext<'_>) -> PhaseEnd {
    let lease = ctx.lease;
    ctx.log
        .line(format!(
            "bosun: runner {} (bosun {}): {} phase of run {} on {}/{} (fencing {})",
            ctx.runner_name,
            env!("CARGO_PKG_VERSION"),
            lease.phase,
            lease.run_id,
            lease.org,
            lease.stack,
            lease.fencing
        ))
        .await;
    let short = unmasked_short_values(lease);
    if short > 0 {
        ctx.log
            .line(format!(
                "bosun: {short} secret value(s) shorter than {MIN_MASK_BYTES} bytes are not \
                 masked in this log"
            ))
            .await;
    }
    let result = match Workspace::create(&ctx.config.work_dir, lease).await {
        Ok(ws) => {
            let mut result = run_phase(ctx, &ws).await;
            let root = ws.root().display().to_string();
            if recover_errored_state(ctx, &ws, &mut result).await {
                if let Err(e) = ws.remove().await {
                    tracing::warn!(workspace = %root, error = %e, "cannot remove the workspace");
                }
            } else {
                ws.keep();
            }
            result
        }
        Err(e) => Err(Halt::Failed(format!(
            "cannot create a workspace under {}: {e}",
            ctx.config.work_dir.display()
        ))),
    };
    if ctx.stop.current() == Some(Stop::Fenced) {
        return PhaseEnd::Fenced;
    }
    let event = match result {
        Ok(event) => event,
        // The reason may quote a command's stderr: mask it as the log is masked.
        Err(Halt::Failed(reason)) => RunnerEvent::Failed {
            reason: shorten(&ctx.log.redact(&reason)),
        },
        Err(Halt::Stopped(Stop::Canceled)) => RunnerEvent::Canceled,
        Err(Halt::Stopped(Stop::TimedOut)) => RunnerEvent::TimedOut,
        Err(Halt::Stopped(Stop::Abandoned)) => RunnerEvent::Failed {
            reason: format!(
                "runner {} shut down during the {} phase",
                ctx.runner_name, lease.phase
            ),
        },
        Err(Halt::Stopped(Stop::Fenced)) => return PhaseEnd::Fenced,
    };
    let closing = match &event {
        RunnerEvent::Planned { .. } => "bosun: plan finished".to_string(),
        RunnerEvent::Applied => "bosun: apply finished".to_string(),
        RunnerEvent::Failed { reason } => format!("bosun: {} phase failed: {reason}", lease.phase),
        RunnerEvent::Canceled => format!("bosun: {} phase canceled", lease.phase),
        RunnerEvent::TimedOut => format!(
            "bosun: {} phase timed out after {}s",
            lease.phase, lease.timeout_seconds
        ),
        RunnerEvent::Started { .. } => String::new(),
    };
    ctx.log.line(closing).await;
    PhaseEnd::Report(event)
}

/// Delivers the state the engine could not write, if it left one (`recovery`), before the
/// phase is reported — the heartbeat goes on meanwhile, and a failure's reason then names
/// the recovered version. Returns whether the workspace may go: not while it holds a state
/// the server has not taken (the runner gave up: it is shutting down, or the server
/// refused it), which the next start on this work dir delivers.
async fn recover_errored_state(
    ctx: &PhaseContext<'_>,
    ws: &Workspace,
    result: &mut Result<RunnerEvent, Halt>,
) -> bool {
    let lease = ctx.lease;
    let Some(file) = recovery::errored_state(ws.root(), &lease.path).await else {
        return true;
    };
    ctx.log
        .line(format!(
            "bosun: the engine could not write the state to the server and left it in              {}; delivering it as a recovered version",
            recovery::ERRORED_STATE_FILE
        ))
        .await;
    let why = match &*result {
        Err(Halt::Failed(reason)) => ctx.log.redact(reason).into_owned(),
        Err(Halt::Stopped(stop)) => format!("the {} phase was stopped ({stop:?})", lease.phase),
        Ok(_) => format!("the engine left {}", recovery::ERRORED_STATE_FILE),
    };
    let reason = format!(
        "runner {}: the {} phase's engine could not write the state to the server: {why}",
        ctx.runner_name, lease.phase
    );
    let note = recovery::LeaseNote::of(lease);
    match recovery::deliver(ctx.client, &note, &file, &reason, ctx.shutdown.give_up()).await {
        Ok(version) => {
            ctx.log.line(recovery::describe(&version)).await;
            if let Err(Halt::Failed(reason)) = result {
                reason.push_str(&format!(
                    "; the state it could not write was recovered as version {}",
                    version.version
                ));
            }
            true
        }
        Err(e) => {
            ctx.log
                .line(format!(
                    "bosun: cannot deliver the recovered state ({e}); the workspace {} is                      kept and the runner delivers it when it starts again",
                    ws.root().display()
                ))
                .await;
            tracing::error!(run = %lease.run_id, error = %e, "a recovered state was not delivered");
            false
        }
    }
}

fn shorten(reason: &str) -> String {
    let reason = reason.trim();
    if reason.chars().count() <= MAX_REASON_CHARS {
        return reason.to_string();
    }
    let mut short: String = reason.chars().take(MAX_REASON_CHARS - 1).collect();
    short.push('…');
    short
}

async fn run_phase(ctx: &PhaseContext<'_>, ws: &Workspace) -> Result<RunnerEvent, Halt> {
    let lease = ctx.lease;
    let kind = match lease.phase.as_str() {
        "plan" => PhaseKind::Plan,
        "apply" => PhaseKind::Apply,
        other => return Err(Halt::Failed(format!("unknown phase {other:?}"))),
    };
    let source = clone_source(lease)?;
    if kind == PhaseKind::Apply && lease.commit.is_none() {
        return Err(Halt::Failed(
            "the apply lease names no commit to check out".to_string(),
        ));
    }
    let engine = resolve_engine(lease)?;
    let commit = checkout(ctx, ws, source).await?;
    let module = module_dir(&ws.src(), &lease.path).map_err(Halt::Failed)?;
    if !tokio::fs::metadata(&module).await.is_ok_and(|m| m.is_dir()) {
        return Err(Halt::Failed(format!(
            "the stack path {:?} is not a directory at commit {commit}",
            lease.path
        )));
    }
    tokio::fs::write(
        module.join(BACKEND_OVERRIDE_FILE),
        backend_override(&lease.state_url),
    )
    .await
    .map_err(|e| Halt::Failed(format!("cannot write {BACKEND_OVERRIDE_FILE}: {e}")))?;

    // Before `started`: a failing integration fails the run while it is preparing, and
    // the engine never starts.
    let resolved = integrations::resolve(ctx, ws.root()).await?;
    let result = run_engine(ctx, ws, kind, commit, &engine, &module, &resolved.env).await;
    // Token refreshes end with the engine, before the workspace goes.
    resolved.stop().await;
    result
}

/// Reports `started`, then runs the engine: `init`, and `plan` or `apply`.
async fn run_engine(
    ctx: &PhaseContext<'_>,
    ws: &Workspace,
    kind: PhaseKind,
    commit: String,
    engine: &ResolvedEngine,
    module: &Path,
    integration_env: &[(String, String)],
) -> Result<RunnerEvent, Halt> {
    let lease = ctx.lease;
    check_stop(ctx)?;
    report_started(ctx, commit).await?;

    let mut env = engine_env(ws.root(), lease, integration_env);
    // State requests outlast a server restart; after the stack's variables, so the
    // runner's window holds whatever they say.
    for (key, value) in state_retry_env(ctx.config.state_retry_window) {
        env.retain(|(k, _)| *k != key);
        env.push((key, value));
    }
    // The engine's http backend talks to the server too: Go's TLS trusts the runner's CA
    // file through SSL_CERT_FILE (the system's certificate directory still counts, so
    // providers' public registries keep working). After the stack's variables, so none
    // can point it elsewhere.
    if let Some(ca) = &ctx.config.ca_file {
        env.retain(|(k, _)| k != "SSL_CERT_FILE");
        env.push(("SSL_CERT_FILE".to_string(), ca.display().to_string()));
    }
    // The sandbox lives until the engine's last command of the phase is done.
    let sandbox = match &ctx.config.egress {
        EgressMode::Restricted(policy) => {
            let server = ServerUrls {
                urls: vec![
                    lease.state_url.clone(),
                    lease.id_token_request_url.clone(),
                    ctx.config.server.clone(),
                ],
                connect_to: ctx.config.connect_to.and_then(|addr| {
                    let (host, port) = egress::host_port(&ctx.config.server)?;
                    Some((host, port, addr))
                }),
            };
            let sandbox = Sandbox::start(policy, &server, ctx.log, ctx.refusals)
                .await
                .map_err(|e| Halt::Failed(format!("cannot make the egress sandbox: {e}")))?;
            // After the stack's variables: none can take the engine around the proxy.
            for (key, value) in sandbox.env() {
                env.retain(|(k, _)| *k != key);
                env.push((key, value));
            }
            Some(sandbox)
        }
        EgressMode::Unrestricted | EgressMode::OptedOut => None,
    };
    if lease.engine == "auto" {
        ctx.log
            .line(format!(
                "bosun: engine auto: {} ({})",
                engine.name,
                engine.program.display()
            ))
            .await;
    }
    let engine = Engine {
        name: &engine.name,
        program: &engine.program,
        module,
        env: &env,
        // Long enough for the engine's own state retries, and no shorter than a cancel's.
        fenced_grace: (kind == PhaseKind::Apply).then(|| {
            (ctx.config.state_retry_window + Duration::from_secs(30)).max(ctx.config.cancel_grace)
        }),
        netns: sandbox.as_ref().map(Sandbox::netns_fd),
    };
    engine
        .ok(ctx, &["init", "-input=false", "-no-color"])
        .await?;
    match kind {
        PhaseKind::Plan => plan(ctx, &engine).await,
        PhaseKind::Apply => apply(ctx, &engine).await,
    }
}

fn check_stop(ctx: &PhaseContext<'_>) -> Result<(), Halt> {
    match ctx.stop.current() {
        Some(stop) => Err(Halt::Stopped(stop)),
        None => Ok(()),
    }
}

/// A network failure as a phase outcome.
fn client_halt(what: &str, e: ClientError) -> Halt {
    match e {
        ClientError::Fenced => Halt::Stopped(Stop::Fenced),
        ClientError::GaveUp => Halt::Stopped(Stop::Abandoned),
        other => Halt::Failed(format!("{what}: {other}")),
    }
}

async fn report_started(ctx: &PhaseContext<'_>, commit: String) -> Result<(), Halt> {
    let report = RunnerReport {
        fencing: ctx.lease.fencing,
        event: RunnerEvent::Started { commit },
        egress_refusals: 0,
    };
    retry("reporting started", ctx.shutdown.give_up(), || {
        ctx.client.report(&ctx.lease.run_id, &report)
    })
    .await
    .map_err(|e| client_halt("the server refused the start of the phase", e))
}

/// The engine a phase runs: its name as the log shows it, and its binary.
struct ResolvedEngine {
    name: String,
    program: PathBuf,
}

/// The engine binary: the lease's `engine_binary`, else `tofu`/`terraform` on PATH. An
/// `auto` engine is `tofu` when the runner has it, else `terraform`.
fn resolve_engine(lease: &Lease) -> Result<ResolvedEngine, Halt> {
    resolve_engine_on(lease, &inherited_path())
}

/// [`resolve_engine`] with `path` as the PATH searched.
fn resolve_engine_on(lease: &Lease, path: &std::ffi::OsStr) -> Result<ResolvedEngine, Halt> {
    if !matches!(lease.engine.as_str(), "auto" | "tofu" | "terraform") {
        return Err(Halt::Failed(format!(
            "unknown engine {:?} (expected auto, tofu or terraform)",
            lease.engine
        )));
    }
    let binary = lease
        .engine_binary
        .as_deref()
        .map(str::trim)
        .filter(|b| !b.is_empty());
    if let Some(binary) = binary {
        let program = find_program(binary, path)
            .filter(|p| p.is_file())
            .ok_or_else(|| {
                Halt::Failed(format!(
                    "the engine binary {binary:?} was not found on this runner"
                ))
            })?;
        let name = match lease.engine.as_str() {
            "auto" => engine_named_by(&program),
            named => named.to_string(),
        };
        return Ok(ResolvedEngine { name, program });
    }
    let candidates = match lease.engine.as_str() {
        "auto" => vec!["tofu", "terraform"],
        named => vec![named],
    };
    candidates
        .iter()
        .find_map(|name| {
            find_program(name, path).map(|program| ResolvedEngine {
                name: name.to_string(),
                program,
            })
        })
        .ok_or_else(|| {
            Halt::Failed(match lease.engine.as_str() {
                "auto" => "neither tofu nor terraform is installed on this runner (not found \
                           on PATH); install one, or set the stack's engine_binary"
                    .to_string(),
                named => format!(
                    "the engine `{named}` is not installed on this runner (not found on PATH)"
                ),
            })
        })
}

/// The engine a binary is, by its file name (`terraform`, `terraform-1.5`, …), for an
/// `auto` stack pointed at a binary: `tofu` unless the name says terraform.
fn engine_named_by(program: &std::path::Path) -> String {
    let file = program
        .file_name()
        .map(|f| f.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    if file.starts_with("terraform") {
        "terraform".to_string()
    } else {
        "tofu".to_string()
    }
}

/// Runs a command of the phase; a stop that interrupts it, or a failure to start it,
/// ends the phase.
async fn step(ctx: &PhaseContext<'_>, step: Step<'_>) -> Result<Exited, Halt> {
    check_stop(ctx)?;
    let name = step.name.to_string();
    match run_step(step, ctx.log, ctx.stop, ctx.config.cancel_grace).await {
        Ok(StepEnd::Exited(exited)) => Ok(exited),
        Ok(StepEnd::Stopped(stop)) => Err(Halt::Stopped(stop)),
        Err(e) => Err(Halt::Failed(format!("cannot start {name}: {e}"))),
    }
}

/// The failure reason of a command: which one, how it ended, and its telling stderr line.
fn command_failed(what: &str, exited: &Exited) -> Halt {
    let mut reason = format!("`{what}` failed ({})", exited.describe());
    if let Some(hint) = &exited.stderr_hint {
        reason.push_str(": ");
        reason.push_str(hint);
    }
    Halt::Failed(reason)
}

fn os_args(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

/// What to `git clone`: the lease's `clone_url` (a `github:` repository resolved by the
/// server), else its repository.
fn clone_source(lease: &Lease) -> Result<&str, Halt> {
    let clone_url = lease
        .clone_url
        .as_deref()
        .map(str::trim)
        .filter(|u| !u.is_empty());
    match clone_url {
        Some(url) => Ok(url),
        None if lease.repository.starts_with("github:") => Err(Halt::Failed(format!(
            "the server sent no clone address for {}; is the GitHub App configured on the \
             server?",
            lease.repository
        ))),
        None => Ok(&lease.repository),
    }
}

/// Clones `source` into `src/`, checks out the lease's commit (or stays on the branch
/// head) and returns the checked-out commit. Every git command authenticates with the
/// lease's clone token, if any, through its environment (`git_env`).
async fn checkout(ctx: &PhaseContext<'_>, ws: &Workspace, source: &str) -> Result<String, Halt> {
    let lease = ctx.lease;
    let git = find_program("git", &inherited_path())
        .ok_or_else(|| Halt::Failed("git is not installed on this runner".to_string()))?;
    let env = git_env(ws.root(), lease);
    let src = ws.src();

    if source.starts_with('-') {
        return Err(Halt::Failed(format!("invalid repository {source:?}")));
    }
    let mut args = os_args(&["clone", "--quiet"]);
    if !lease.branch.is_empty() {
        args.extend(os_args(&["--branch", &lease.branch]));
    }
    args.extend(os_args(&["--", source, "src"]));
    let mut clone = git_command(&git, &env, args.clone(), ws.root(), false);
    // The log shows the URL without any password it may carry.
    let mut shown = args;
    if let Some(url) = shown.iter_mut().rev().nth(1) {
        *url = OsString::from(redact_url(source));
    }
    clone.header = Some(crate::process::display_command("git", &shown));
    let exited = step(ctx, clone).await?;
    if exited.code() != Some(0) {
        let mut failed = command_failed(&format!("git clone {}", redact_url(source)), &exited);
        let has_token = lease.clone_token.as_deref().is_some_and(|t| !t.is_empty());
        if has_token && refused_credentials(&exited) {
            if let Halt::Failed(reason) = &mut failed {
                reason.push_str(
                    " (the repository refused the clone token the server sent: expired, or \
                     the GitHub App cannot read this repository?)",
                );
            }
        }
        return Err(failed);
    }

    if let Some(commit) = lease.commit.as_deref() {
        let commit = commit.trim();
        if commit.is_empty() || commit.starts_with('-') {
            return Err(Halt::Failed(format!("invalid commit {commit:?}")));
        }
        let checkout_args = os_args(&["checkout", "--quiet", "--detach", commit]);
        let mut exited = step(
            ctx,
            git_command(&git, &env, checkout_args.clone(), &src, false),
        )
        .await?;
        if exited.code() != Some(0) {
            // Not on any branch (a pull request's head, say): ask for the commit itself.
            ctx.log
                .line(format!(
                    "bosun: commit {commit} is not on a branch; fetching it"
                ))
                .await;
            let fetch = os_args(&["fetch", "--quiet", "origin", commit]);
            let fetched = step(ctx, git_command(&git, &env, fetch, &src, false)).await?;
            if fetched.code() == Some(0) {
                exited = step(ctx, git_command(&git, &env, checkout_args, &src, false)).await?;
            }
        }
        if exited.code() != Some(0) {
            return Err(command_failed(&format!("git checkout {commit}"), &exited));
        }
    }

    let exited = step(
        ctx,
        git_command(&git, &env, os_args(&["rev-parse", "HEAD"]), &src, true),
    )
    .await?;
    let head = String::from_utf8_lossy(&exited.stdout).trim().to_string();
    if exited.code() != Some(0) || head.is_empty() {
        return Err(command_failed("git rev-parse HEAD", &exited));
    }
    ctx.log.line(format!("bosun: checked out {head}")).await;
    Ok(head)
}

/// Whether git failed because the remote wanted other credentials (with prompts and
/// credential helpers off, git asks for a user name it cannot get, or gives up).
fn refused_credentials(exited: &Exited) -> bool {
    exited.stderr_hint.as_deref().is_some_and(|hint| {
        hint.contains("could not read Username")
            || hint.contains("Authentication failed")
            || hint.contains("The requested URL returned error: 40")
    })
}

fn git_command<'a>(
    git: &'a Path,
    env: &'a [(String, String)],
    args: Vec<OsString>,
    cwd: &'a Path,
    capture: bool,
) -> Step<'a> {
    Step {
        name: "git",
        program: git,
        args,
        cwd,
        env,
        capture_stdout: capture,
        header: None,
        fenced_grace: None,
        netns: None,
    }
}

/// `url` with any user name and password replaced by `***`.
fn redact_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) if !parsed.username().is_empty() || parsed.password().is_some() => {
            let _ = parsed.set_username("***");
            let _ = parsed.set_password(None);
            parsed.to_string()
        }
        _ => url.to_string(),
    }
}

/// The engine in the module directory.
struct Engine<'a> {
    name: &'a str,
    program: &'a Path,
    module: &'a Path,
    env: &'a [(String, String)],
    /// Set for an apply: a fenced lease interrupts it and gives it this long to write its
    /// state (`Step::fenced_grace`).
    fenced_grace: Option<Duration>,
    /// The egress sandbox's namespace, when the runner is restricted.
    netns: Option<std::os::fd::RawFd>,
}

impl Engine<'_> {
    fn step(&self, args: &[&str], capture: bool) -> Step<'_> {
        Step {
            name: self.name,
            program: self.program,
            args: os_args(args),
            cwd: self.module,
            env: self.env,
            capture_stdout: capture,
            header: None,
            fenced_grace: self.fenced_grace,
            netns: self.netns,
        }
    }

    /// Runs `args`, whatever the exit code.
    async fn run(&self, ctx: &PhaseContext<'_>, args: &[&str]) -> Result<Exited, Halt> {
        step(ctx, self.step(args, false)).await
    }

    /// Runs `args`; anything but exit code 0 fails the phase.
    async fn ok(&self, ctx: &PhaseContext<'_>, args: &[&str]) -> Result<Exited, Halt> {
        let exited = self.run(ctx, args).await?;
        if exited.code() == Some(0) {
            Ok(exited)
        } else {
            Err(command_failed(&self.what(args), &exited))
        }
    }

    /// `terraform plan`: the command and its subcommand, for failure reasons.
    fn what(&self, args: &[&str]) -> String {
        match args.first() {
            Some(sub) => format!("{} {sub}", self.name),
            None => self.name.to_string(),
        }
    }
}

async fn plan(ctx: &PhaseContext<'_>, engine: &Engine<'_>) -> Result<RunnerEvent, Halt> {
    let mut args = vec![
        "plan",
        "-input=false",
        "-no-color",
        "-out=plan.tfplan",
        "-detailed-exitcode",
    ];
    // Proposed and drift plans never apply, so they must not take the state lock: they
    // run in parallel with a tracked run that holds it.
    if ctx.lease.kind != "tracked" {
        args.push("-lock=false");
    }
    let exited = engine.run(ctx, &args).await?;
    let has_changes = match exited.code() {
        Some(0) => false,
        Some(2) => true,
        _ => return Err(command_failed(&engine.what(&args), &exited)),
    };
    let shown = step(ctx, engine.step(&["show", "-json", PLAN_FILE], true)).await?;
    if shown.code() != Some(0) {
        return Err(command_failed(&engine.what(&["show"]), &shown));
    }
    let summary = plan_summary::summarize(&shown.stdout, has_changes).map_err(Halt::Failed)?;
    ctx.log.line(plan_summary::describe(&summary)).await;

    let plan_file = engine.module.join(PLAN_FILE);
    let bytes = tokio::fs::read(&plan_file)
        .await
        .map_err(|e| Halt::Failed(format!("cannot read the plan file: {e}")))?;
    check_stop(ctx)?;
    ctx.log
        .line(format!(
            "bosun: uploading the plan file ({} bytes)",
            bytes.len()
        ))
        .await;
    let lease = ctx.lease;
    retry("uploading the plan file", ctx.shutdown.give_up(), || {
        ctx.client
            .put_plan(&lease.run_id, lease.fencing, bytes.clone())
    })
    .await
    .map_err(|e| client_halt("cannot upload the plan file", e))?;
    // The server's policies read the plan as Terraform shows it (when some apply).
    if !lease.plan_json {
        return Ok(RunnerEvent::Planned { summary });
    }
    check_stop(ctx)?;
    let json = shown.stdout;
    retry("uploading the plan's JSON", ctx.shutdown.give_up(), || {
        ctx.client
            .put_plan_json(&lease.run_id, lease.fencing, json.clone())
    })
    .await
    .map_err(|e| client_halt("cannot upload the plan's JSON", e))?;
    Ok(RunnerEvent::Planned { summary })
}

async fn apply(ctx: &PhaseContext<'_>, engine: &Engine<'_>) -> Result<RunnerEvent, Halt> {
    let lease = ctx.lease;
    check_stop(ctx)?;
    ctx.log.line("bosun: downloading the plan file").await;
    let bytes = retry("downloading the plan file", ctx.shutdown.give_up(), || {
        ctx.client.get_plan(&lease.run_id, lease.fencing)
    })
    .await
    .map_err(|e| client_halt("cannot download the plan file", e))?;
    tokio::fs::write(engine.module.join(PLAN_FILE), &bytes)
        .await
        .map_err(|e| Halt::Failed(format!("cannot write the plan file: {e}")))?;
    engine
        .ok(ctx, &["apply", "-input=false", "-no-color", PLAN_FILE])
        .await?;
    Ok(RunnerEvent::Applied)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A folder holding an executable file for each of `names`, as a PATH.
    fn bin_dir(names: &[&str]) -> tempfile::TempDir {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        for name in names {
            let file = dir.path().join(name);
            std::fs::write(&file, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        dir
    }

    fn engine_of(
        engine: &str,
        binary: Option<&str>,
        on_path: &[&str],
    ) -> Result<(String, PathBuf), String> {
        let dir = bin_dir(on_path);
        let mut lease = crate::test_support::plain_lease("file:///nowhere");
        lease.engine = engine.to_string();
        lease.engine_binary = binary.map(|b| b.replace("DIR", &dir.path().display().to_string()));
        match resolve_engine_on(&lease, dir.path().as_os_str()) {
            Ok(e) => Ok((
                e.name,
                e.program
                    .strip_prefix(dir.path())
                    .unwrap_or(&e.program)
                    .to_path_buf(),
            )),
            Err(Halt::Failed(reason)) => Err(reason),
            Err(_) => Err("not a failure".into()),
        }
    }

    #[test]
    fn an_auto_engine_is_tofu_when_the_runner_has_it_else_terraform() {
        let ok = |name: &str| Ok((name.to_string(), PathBuf::from(name)));
        assert_eq!(engine_of("auto", None, &["tofu", "terraform"]), ok("tofu"));
        assert_eq!(engine_of("auto", None, &["terraform"]), ok("terraform"));
        assert_eq!(engine_of("auto", None, &["tofu"]), ok("tofu"));
        let none = engine_of("auto", None, &[]).unwrap_err();
        assert!(
            none.starts_with("neither tofu nor terraform is installed"),
            "{none}"
        );
        // A named engine is that engine, or a refusal naming it.
        assert_eq!(engine_of("tofu", None, &["tofu", "terraform"]), ok("tofu"));
        assert_eq!(
            engine_of("terraform", None, &["tofu", "terraform"]),
            ok("terraform")
        );
        let missing = engine_of("tofu", None, &["terraform"]).unwrap_err();
        assert!(
            missing.contains("the engine `tofu` is not installed"),
            "{missing}"
        );
        // With a binary, an auto engine is named by its file name.
        assert_eq!(
            engine_of("auto", Some("DIR/terraform-1.5"), &["terraform-1.5"]),
            ok("terraform-1.5").map(|(_, p)| ("terraform".to_string(), p))
        );
        assert_eq!(
            engine_of("auto", Some("DIR/bin-tofu"), &["bin-tofu"]),
            ok("bin-tofu").map(|(_, p)| ("tofu".to_string(), p))
        );
        let unknown = engine_of("pulumi", None, &["tofu"]).unwrap_err();
        assert!(
            unknown.contains("expected auto, tofu or terraform"),
            "{unknown}"
        );
    }

    #[test]
    fn urls_lose_their_credentials_in_the_log() {
        assert_eq!(
            redact_url("https://user:s3cret@git.example/r.git"),
            "https://***@git.example/r.git"
        );
        assert_eq!(
            redact_url("https://git.example/r.git"),
            "https://git.example/r.git"
        );
        assert_eq!(redact_url("git@host:org/r.git"), "git@host:org/r.git");
    }

    #[test]
    fn github_repositories_need_the_servers_clone_address() {
        let mut lease = crate::test_support::plain_lease("github:acme/infra");
        match clone_source(&lease) {
            Err(Halt::Failed(reason)) => assert_eq!(
                reason,
                "the server sent no clone address for github:acme/infra; is the GitHub App \
                 configured on the server?"
            ),
            other => panic!("expected a failure, got {other:?}"),
        }
        lease.clone_url = Some(" https://github.com/acme/infra.git ".into());
        assert_eq!(
            clone_source(&lease).unwrap(),
            "https://github.com/acme/infra.git"
        );
        let mut lease = crate::test_support::plain_lease("https://git.example/r.git");
        assert_eq!(clone_source(&lease).unwrap(), "https://git.example/r.git");
        lease.clone_url = Some(String::new());
        assert_eq!(clone_source(&lease).unwrap(), "https://git.example/r.git");
    }

    #[test]
    fn reasons_are_short() {
        assert_eq!(shorten("  x  "), "x");
        let long = "y".repeat(2000);
        let s = shorten(&long);
        assert_eq!(s.chars().count(), MAX_REASON_CHARS);
        assert!(s.ends_with('…'));
    }
}
