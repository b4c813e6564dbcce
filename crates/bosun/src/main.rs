//! `bosun`: the one binary — `bosun server`, and the client commands that talk to it.

mod client;
mod cmd;
mod output;
mod runner_cmd;
mod server_cmd;

use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{Arg, ArgAction, Args, CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::client::{ApiFailure, Client, ClientConfig};
use crate::cmd::Ctx;

#[derive(Parser)]
#[command(
    name = "bosun",
    version,
    about = "Bosun: GitOps for OpenTofu/Terraform and host plans over SSH"
)]
struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

/// How client commands reach the server. `bosun server` ignores these (and `bosun
/// runner` all but `--token` and `--ca-file`): see [`hide_ignored_client_options`].
#[derive(Args)]
#[command(next_help_heading = "Client options")]
struct GlobalArgs {
    /// The Bosun server's URL; optional: without it, BOSUN_URL, else the default.
    #[arg(
        long,
        global = true,
        env = "BOSUN_URL",
        default_value = "http://127.0.0.1:8080"
    )]
    url: String,
    /// API token (a personal token; see `bosun token create`); optional on the command
    /// line: without it, BOSUN_TOKEN.
    #[arg(long, global = true, env = "BOSUN_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// The org that org-scoped commands act in.
    #[arg(long, global = true, env = "BOSUN_ORG", default_value = "default")]
    org: String,
    /// Print the server's JSON instead of human-readable output (and an error as a JSON
    /// object on stderr).
    #[arg(long, global = true)]
    json: bool,
    /// PEM file of the CA (or certificates) to trust for an https:// server, besides the
    /// built-in public roots (client commands, `bosun runner`, and the runners `bosun
    /// server` embeds).
    #[arg(long, global = true, env = "BOSUN_CA_FILE")]
    ca_file: Option<std::path::PathBuf>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the Bosun server (API, state backend, console).
    Server(Box<server_cmd::ServerArgs>),
    /// Run a runner: lease run phases from a server and execute them with the IaC engine
    /// (the runner-pool token: --token or BOSUN_RUNNER_TOKEN).
    Runner(runner_cmd::RunnerArgs),
    /// Host plans: store plan files on the server (`apply`, `list`, `show`, `delete`),
    /// lint them, or run one with no server (`exec`).
    #[command(subcommand)]
    Plan(cmd::plan::PlanCommand),
    /// The org's hosts (add, list, show, update, delete, import an inventory) and a
    /// connection check from this machine.
    #[command(subcommand)]
    Host(cmd::host::HostCommand),
    /// Policies as code (Rego): run a policy folder's own tests (`test`), with no server.
    #[command(subcommand)]
    Policy(cmd::policy::PolicyCommand),
    /// Log the CLI in at the server's identity provider (open a URL, confirm a code): a
    /// short-lived token kept for this server, used when no --token or BOSUN_TOKEN is given.
    Login(cmd::login::LoginArgs),
    /// End this server's `bosun login` and forget its token.
    Logout,
    #[command(flatten)]
    Client(ClientCommand),
}

/// The commands that talk to a server over its API.
#[derive(Subcommand)]
enum ClientCommand {
    /// Show who the server takes your token for, and your org roles.
    Whoami,
    /// Orgs and their members.
    #[command(subcommand)]
    Org(cmd::org::OrgCommand),
    /// Users: create one, link one to a person at an identity provider, list identities.
    #[command(subcommand)]
    User(cmd::user::UserCommand),
    /// Personal and runner-pool API tokens.
    #[command(subcommand)]
    Token(cmd::token::TokenCommand),
    /// Console sessions: list them (yours, or a user's) and end one.
    #[command(subcommand)]
    Session(cmd::session::SessionCommand),
    /// Stacks: OpenTofu/Terraform root modules tracked from a repository.
    #[command(subcommand)]
    Stack(cmd::stack::StackCommand),
    /// A stack's Terraform/OpenTofu state: versions, documents, the lock.
    #[command(subcommand)]
    State(cmd::state::StateCommand),
    /// Runs: trigger, show, logs, confirm, discard, cancel, retry; abort a plan run.
    #[command(subcommand)]
    Run(cmd::run::RunCommand),
    /// The runners serving this org (online, busy, dark, drained) and draining them.
    #[command(subcommand)]
    Runners(cmd::runners::RunnersCommand),
    /// The org's audit log, newest first.
    Audit(cmd::audit::AuditArgs),
    /// The org's secrets: set, list, delete (values are never shown).
    #[command(subcommand)]
    Secret(cmd::secret::SecretCommand),
    /// The run-identity (OIDC) issuer: rotate its signing key.
    #[command(subcommand)]
    Oidc(cmd::oidc::OidcCommand),
    /// Notifications: the org's targets (webhook, Slack), their rules and delivery logs.
    #[command(subcommand)]
    Notify(cmd::notify::NotifyCommand),
    /// Environments of hosts: variables, approval, protection, and approval grants.
    #[command(subcommand)]
    Env(cmd::env::EnvCommand),
    /// Runs of plans stored on the server: start (or dry-run), list, show, logs, abort.
    #[command(subcommand)]
    PlanRun(cmd::plan_run::PlanRunCommand),
    /// The approvals inbox: runs waiting for an approver; approve, reject, decisions.
    #[command(subcommand)]
    Approvals(cmd::approvals::ApprovalsCommand),
}

/// The client context of the global options; `Err` (no token, a bad URL) says why.
fn client_ctx(global: GlobalArgs) -> anyhow::Result<Ctx> {
    // No token given: the one `bosun login` kept for this server, if any.
    let token = global
        .token
        .or_else(|| cmd::login::stored_token(&global.url));
    Ok(Ctx {
        client: Client::new(ClientConfig {
            url: global.url,
            token,
            ca_file: global.ca_file,
        })?,
        org: global.org,
        json: global.json,
    })
}

async fn run_client(global: GlobalArgs, command: ClientCommand) -> anyhow::Result<()> {
    if global.token.is_none() {
        // A `bosun login` token near its end is replaced first.
        cmd::login::refresh_if_due(ClientConfig {
            url: global.url.clone(),
            token: None,
            ca_file: global.ca_file.clone(),
        })
        .await;
    }
    let ctx = client_ctx(global)?;
    match command {
        ClientCommand::Whoami => cmd::whoami::run(&ctx).await,
        ClientCommand::Org(c) => cmd::org::run(&ctx, c).await,
        ClientCommand::User(c) => cmd::user::run(&ctx, c).await,
        ClientCommand::Token(c) => cmd::token::run(&ctx, c).await,
        ClientCommand::Session(c) => cmd::session::run(&ctx, c).await,
        ClientCommand::Stack(c) => cmd::stack::run(&ctx, c).await,
        ClientCommand::State(c) => cmd::state::run(&ctx, c).await,
        ClientCommand::Run(c) => cmd::run::run(&ctx, c).await,
        ClientCommand::Runners(c) => cmd::runners::run(&ctx, c).await,
        ClientCommand::Audit(a) => cmd::audit::run(&ctx, a).await,
        ClientCommand::Secret(c) => cmd::secret::run(&ctx, c).await,
        ClientCommand::Oidc(c) => cmd::oidc::run(&ctx, c).await,
        ClientCommand::Notify(c) => cmd::notify::run(&ctx, c).await,
        ClientCommand::PlanRun(c) => cmd::plan_run::run(&ctx, c).await,
        ClientCommand::Env(c) => cmd::env::run(&ctx, c).await,
        ClientCommand::Approvals(c) => cmd::approvals::run(&ctx, c).await,
    }
}

/// The global client options a command ignores, per command: still accepted there (a
/// script may pass them to every command) but not listed in its help. A subcommand's own
/// argument of the same id stops clap from copying the global one into it; its value, if
/// given, still reaches the global.
const IGNORED_CLIENT_OPTIONS: &[(&str, &[&str])] = &[
    ("server", &["url", "token", "org", "json"]),
    // The runner takes its server from `--server`, and `--token` is its pool token.
    ("runner", &["url", "org", "json"]),
];

fn hide_ignored_client_options(mut cli: clap::Command) -> clap::Command {
    for (command, ids) in IGNORED_CLIENT_OPTIONS {
        cli = cli.mut_subcommand(*command, |mut sub| {
            for id in *ids {
                let arg = Arg::new(*id).long(*id).hide(true);
                sub = sub.arg(if *id == "json" {
                    arg.action(ArgAction::SetTrue)
                        .value_parser(clap::value_parser!(bool))
                } else {
                    arg.action(ArgAction::Set)
                        .value_parser(clap::value_parser!(String))
                });
            }
            sub
        });
    }
    // The runner's `--token` is the global one (a personal token's) under its own words.
    cli.mut_subcommand("runner", |sub| {
        sub.arg(
            Arg::new("token")
                .long("token")
                .value_name("TOKEN")
                .action(ArgAction::Set)
                .value_parser(clap::value_parser!(String))
                .help(
                    "The runner-pool token (`bosun token create --pool`); optional on the \
                     command line: without it, BOSUN_RUNNER_TOKEN (never BOSUN_TOKEN)",
                ),
        )
    })
}

/// Whether `--json` is among the arguments (before any `--`): for the errors met before
/// the arguments are parsed.
fn json_requested() -> bool {
    std::env::args_os()
        .skip(1)
        .take_while(|a| a != "--")
        .any(|a| a == "--json")
}

/// The error code of an error this client met itself (no answer from the server, bad
/// arguments, a file it could not read): never one the server sends.
const CLIENT_ERROR: &str = "client_error";

/// Prints a failure on stderr: with `--json`, one JSON object — the server's own error
/// body when it sent one, else `{"error": {"code": "client_error", "message": …}}` —
/// and otherwise `error: <message>`.
fn report(e: &anyhow::Error, json: bool) {
    if !json {
        eprintln!("error: {e:#}");
        return;
    }
    let body = e
        .chain()
        .find_map(|cause| cause.downcast_ref::<ApiFailure>())
        .and_then(|failure| failure.body.clone())
        .unwrap_or_else(|| client_error(&format!("{e:#}")));
    eprintln!("{body}");
}

fn client_error(message: &str) -> serde_json::Value {
    serde_json::json!({"error": {"code": CLIENT_ERROR, "message": message}})
}

/// Exits for an argument error: clap's own output (help and version included), or under
/// `--json` a client error object, with clap's exit code either way.
fn argument_error(e: clap::Error) -> ! {
    let shows_help = matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    );
    if shows_help || !json_requested() {
        e.exit()
    }
    let rendered = e.render().to_string();
    let message = rendered.trim().trim_start_matches("error: ");
    eprintln!("{}", client_error(message));
    std::process::exit(e.exit_code())
}

fn main() -> ExitCode {
    let matches = match hide_ignored_client_options(Cli::command()).try_get_matches() {
        Ok(matches) => matches,
        Err(e) => argument_error(e),
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => argument_error(e),
    };
    let json = cli.global.json;
    // `bosun runner` takes its pool token from `--token` only when it was typed: the
    // global flag's environment variable (BOSUN_TOKEN) holds a personal token.
    let token_flag = (matches.value_source("token") == Some(ValueSource::CommandLine))
        .then(|| cli.global.token.clone())
        .flatten();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Server(args) => server_cmd::run(*args, cli.global.ca_file).await,
            Command::Runner(args) => runner_cmd::run(args, token_flag, cli.global.ca_file).await,
            // `exec`, `host check --inventory` and an offline `lint` need no server: the
            // client context is only built for, and its absence only fatal to, the rest.
            Command::Plan(command) => cmd::plan::run(command, json, client_ctx(cli.global)).await,
            Command::Host(command) => cmd::host::run(command, json, client_ctx(cli.global)).await,
            Command::Policy(command) => {
                cmd::policy::run(command, json, client_ctx(cli.global)).await
            }
            Command::Login(args) => {
                let config = ClientConfig {
                    url: cli.global.url,
                    token: None,
                    ca_file: cli.global.ca_file,
                };
                cmd::login::login(config, args, json)
                    .await
                    .map(|()| ExitCode::SUCCESS)
            }
            Command::Logout => {
                let config = ClientConfig {
                    url: cli.global.url,
                    token: None,
                    ca_file: cli.global.ca_file,
                };
                cmd::login::logout(config, json)
                    .await
                    .map(|()| ExitCode::SUCCESS)
            }
            Command::Client(command) => run_client(cli.global, command)
                .await
                .map(|()| ExitCode::SUCCESS),
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            report(&e, json);
            ExitCode::FAILURE
        }
    }
}
