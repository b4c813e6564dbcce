//! Fills an empty Bosun store directly — through the Store API and bulk SQL, not over
//! HTTP — to a given size, for `bench/size.sh`: org `default` with N stacks, each with its
//! runs (phases, log chunks, plan summaries, run tokens, audit records), state versions,
//! and on some of them drift schedules and checks, a dependency, approvals, a state lock
//! or an open run; a few small orgs; registered runners; and the admin token to use.
//!
//! ```text
//! cargo run --release -p bosun-store --example seed -- \
//!     (--sqlite <data-dir>/bosun.db | --postgres postgres://…) --token-file <data-dir>/admin-token \
//!     [--stacks 10000] [--runs-per-stack 10] [--versions-per-stack 5] [--runners 1000] \
//!     [--small-orgs 3] [--small-org-stacks 200] [--templates 100] [--chunk 10000] \
//!     [--samples-file FILE] [--samples 1000]
//! ```
//!
//! How. A template org (`seed-templates`, K stacks) is made through the Store API the way
//! the server makes its data: stacks created; runs created, leased by a registered runner,
//! started, planned (with a plan summary), confirmed or approved, applied (the state
//! locked by the run, written with its run token, unlocked) — or failed, discarded,
//! canceled, timed out, force-failed, retried; held dependency runs released; drift
//! schedules armed and fired, checks settled, a reconcile started; log chunks appended;
//! run tokens minted (and revoked as runs end); states written from a laptop; locks held.
//! Then each org's stacks are copied from the templates in bulk SQL (`INSERT … SELECT`,
//! one transaction per `--chunk` stacks): stack j is a copy of template j mod K with ids
//! of its own in the server's formats (`stack-000123`, `run-<11 hex ms><10 hex>`,
//! `tok_<16 hex>`), its timestamps spread back over two weeks (the templates' seconds
//! stretched), and every reference between rows — a stack's runs, phases, logs and
//! tokens, retries, held dependency runs, drift checks and their reconciles, approvals,
//! state writers, dependencies, audit targets — pointing at the copy's own rows. Copies
//! get no notification events (the server prunes old ones anyway) and no saved plan files.
//! Last, the store is opened again and read back through the Store API: every org's
//! stacks paged through, row counts against the templates', and a sample of stacks with
//! their runs, phases, logs, state versions and drift schedules.
//!
//! stdout: one JSON line (sizes, rows, seconds). stderr: progress and throughput.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use bosun_core::approval::Decision;
use bosun_core::drift::DriftResult;
use bosun_core::run::{Event, Phase, RunKind, RunState, Trigger};
use bosun_core::stack::{DependencyInput, DriftInput, StackInput, StackSpec};
use bosun_core::state::{Lock, StateDoc, UnlockRequest, WriteRequest, Writer, WriterLiveness};
use bosun_core::token::{format_token, hash_token, TokenKind};
use bosun_core::Role;
use bosun_store::*;
use chrono::{Duration, Utc};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

type Error = Box<dyn std::error::Error + Send + Sync>;
type R<T> = std::result::Result<T, Error>;

const TEMPLATE_ORG: &str = "seed-templates";
const BIG_ORG: &str = "default";
const ADMIN: &str = "admin";
/// The user who approves gated runs (nobody approves their own).
const APPROVER: &str = "lead";
/// The copies' history: the templates' seconds stretched over this long.
const HISTORY_MS: i64 = 14 * 24 * 3600 * 1000;
/// Copies of one template are shifted apart, at most this much in all.
const SPREAD_MS: i64 = 2 * 3600 * 1000;
/// x → (x·MUL + ADD) mod 2⁴⁰ is a bijection of [0, 2⁴⁰) (MUL odd), and x·MUL stays below
/// 2⁶³ for x < 2⁴⁰ (MUL < 2²³): unique, random-looking hex for ids, the same in Rust and SQL.
const H40: i64 = 1 << 40;
const MUL: i64 = 6_017_513;
const ADD: i64 = 0x3c_6ef3_72fe;
/// Copy keys: org number · 2¹⁶ + block (a block is one copy of every template).
const BLOCKS_PER_ORG: i64 = 1 << 16;
const REPOS: [&str; 8] = [
    "github:acme/infra",
    "github:acme/infra",
    "github:acme/infra",
    "github:acme/platform",
    "github:acme/data-platform",
    "github:acme/edge",
    "github:acme/payments-infra",
    "github:acme/observability",
];
const ENVS: [&str; 3] = ["dev", "staging", "prod"];
const TIERS: [&str; 3] = ["small", "medium", "large"];
const REGIONS: [&str; 3] = ["eu-west-1", "us-east-1", "ap-southeast-2"];

fn h40(x: i64) -> i64 {
    (x * MUL + ADD).rem_euclid(H40)
}

fn stack_id(j: u64, width: usize) -> String {
    format!("stack-{j:0width$}")
}

/// The id of runner `i`: `rnr_` and 16 hex digits, as the server makes them.
fn runner_id(i: i64) -> String {
    format!("rnr_{i:06x}{:010x}", h40(i))
}

// --- arguments ----------------------------------------------------------------------------

enum Backend {
    Sqlite(PathBuf),
    Postgres(String),
}

struct Args {
    backend: Backend,
    token_file: PathBuf,
    stacks: u64,
    runs_per_stack: u32,
    versions_per_stack: u32,
    runners: u32,
    small_orgs: u32,
    small_org_stacks: u64,
    templates: u64,
    chunk: u64,
    samples_file: Option<PathBuf>,
    samples: u64,
}

const USAGE: &str = "usage: seed (--sqlite FILE | --postgres URL) --token-file FILE [--stacks N] \
[--runs-per-stack N] [--versions-per-stack N] [--runners N] [--small-orgs N] \
[--small-org-stacks N] [--templates N] [--chunk N] [--samples-file FILE] [--samples N]";

impl Args {
    fn parse(mut it: impl Iterator<Item = String>) -> R<Args> {
        let mut sqlite = None;
        let mut postgres = None;
        let mut token_file = None;
        let mut a = Args {
            backend: Backend::Sqlite(PathBuf::new()),
            token_file: PathBuf::new(),
            stacks: 10_000,
            runs_per_stack: 10,
            versions_per_stack: 5,
            runners: 1000,
            small_orgs: 3,
            small_org_stacks: 200,
            templates: 100,
            chunk: 10_000,
            samples_file: None,
            samples: 1000,
        };
        while let Some(flag) = it.next() {
            let mut value = || {
                it.next()
                    .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))
            };
            let num = |v: String| -> R<u64> {
                v.parse::<u64>()
                    .map_err(|_| format!("{flag}: not a whole number: {v:?}").into())
            };
            match flag.as_str() {
                "--sqlite" => sqlite = Some(PathBuf::from(value()?)),
                "--postgres" => postgres = Some(value()?),
                "--token-file" => token_file = Some(PathBuf::from(value()?)),
                "--stacks" => a.stacks = num(value()?)?,
                "--runs-per-stack" => a.runs_per_stack = num(value()?)? as u32,
                "--versions-per-stack" => a.versions_per_stack = num(value()?)? as u32,
                "--runners" => a.runners = num(value()?)? as u32,
                "--small-orgs" => a.small_orgs = num(value()?)? as u32,
                "--small-org-stacks" => a.small_org_stacks = num(value()?)?,
                "--templates" => a.templates = num(value()?)?,
                "--chunk" => a.chunk = num(value()?)?,
                "--samples-file" => a.samples_file = Some(PathBuf::from(value()?)),
                "--samples" => a.samples = num(value()?)?,
                "-h" | "--help" => return Err(USAGE.into()),
                other => return Err(format!("unknown argument {other:?}\n{USAGE}").into()),
            }
        }
        a.backend = match (sqlite, postgres) {
            (Some(p), None) => Backend::Sqlite(p),
            (None, Some(u)) => Backend::Postgres(u),
            _ => {
                return Err(format!("give exactly one of --sqlite and --postgres\n{USAGE}").into())
            }
        };
        a.token_file = token_file.ok_or_else(|| format!("--token-file is required\n{USAGE}"))?;
        if a.templates < 2 || a.runners < 1 || a.runs_per_stack < 1 || a.chunk < 1 {
            return Err("--templates must be at least 2; --runners, --runs-per-stack and --chunk at least 1".into());
        }
        Ok(a)
    }

    /// Digits of a stack number: six, or more for a million stacks and up.
    fn width(&self) -> usize {
        let most = self.stacks.max(self.small_org_stacks).max(self.templates);
        most.saturating_sub(1).to_string().len().max(6)
    }

    /// The orgs copies go to, with how many stacks each (the template org is number 0).
    fn targets(&self) -> Vec<(String, u64)> {
        let mut out = vec![(BIG_ORG.to_string(), self.stacks)];
        for i in 1..=self.small_orgs {
            out.push((format!("team-{i}"), self.small_org_stacks));
        }
        out
    }
}

// --- a little randomness ------------------------------------------------------------------

/// splitmix64, seeded from the OS: run ids' random part, as the server's are random.
struct Rng(u64);

impl Rng {
    fn from_os() -> R<Rng> {
        let mut b = [0u8; 8];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
        Ok(Rng(u64::from_le_bytes(b)))
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        for chunk in out.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
        out
    }
}

fn os_random_32() -> R<[u8; 32]> {
    let mut b = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b)
}

/// Writes `text` and a newline to a file only its owner may read.
fn write_private(path: &std::path::Path, text: &str) -> R<()> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(path)?;
    f.write_all(text.as_bytes())?;
    f.write_all(b"\n")?;
    Ok(())
}

fn log(msg: impl AsRef<str>) {
    eprintln!("seed: {}", msg.as_ref());
}

fn per_s(n: u64, secs: f64) -> String {
    format!("{:.0}", n as f64 / secs.max(1e-9))
}

// --- the templates, through the Store API -------------------------------------------------

/// What a template run is made to do.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Scenario {
    /// Plan with changes, confirmed (or approved), applied: a state version.
    Apply,
    NoChanges,
    PlanFails,
    /// The runner went silent: the stale sweep's force-fail.
    Stale,
    /// The phase ran past its timeout.
    Timeout,
    /// Planned, then discarded (or rejected).
    Discard,
    /// Canceled while queued.
    Cancel,
    ApplyFails,
    /// A proposed run's plan.
    Proposed {
        changes: bool,
    },
    /// A drift check.
    Drift {
        changes: bool,
    },
    /// Planned with changes, then left waiting in `unconfirmed`.
    Hold,
}

/// Round `r`'s run of template stack `t`: what it does, its kind and trigger.
fn scenario(t: u64, r: u32, drift: bool) -> (Scenario, RunKind, Trigger) {
    use Scenario::*;
    match r % 10 {
        0 | 3 | 6 => (Apply, RunKind::Tracked, Trigger::Manual),
        1 => (
            Proposed { changes: true },
            RunKind::Proposed,
            Trigger::PullRequest,
        ),
        2 => (NoChanges, RunKind::Tracked, Trigger::Manual),
        4 if t % 7 == 3 => (Stale, RunKind::Tracked, Trigger::Manual),
        4 if t % 13 == 5 => (Timeout, RunKind::Tracked, Trigger::Manual),
        4 => (PlanFails, RunKind::Tracked, Trigger::Manual),
        5 if t % 9 == 2 => (Cancel, RunKind::Tracked, Trigger::Manual),
        5 => (Discard, RunKind::Tracked, Trigger::Manual),
        7 => (ApplyFails, RunKind::Tracked, Trigger::Manual),
        8 => (Apply, RunKind::Tracked, Trigger::Retry),
        _ if drift => (
            Drift {
                changes: (t / 10).is_multiple_of(3),
            },
            RunKind::Drift,
            Trigger::Schedule,
        ),
        _ => (
            Proposed { changes: false },
            RunKind::Proposed,
            Trigger::PullRequest,
        ),
    }
}

/// The template stack `t` depends on, if any (one at most, in the same block of ten).
fn upstream(t: u64) -> Option<u64> {
    (t % 10 == 9).then(|| t - 5)
}

fn stack_input(t: u64, width: usize) -> StackInput {
    let env = ENVS[(t % 3) as usize];
    let svc = t % 50;
    let mut variables = BTreeMap::new();
    if t.is_multiple_of(4) {
        variables.insert("REGION".into(), REGIONS[(t % 3) as usize].to_string());
        variables.insert("INSTANCE_COUNT".into(), (1 + t % 7).to_string());
        variables.insert("DB_PASSWORD".into(), format!("secret://{env}/db-password"));
    }
    StackInput {
        id: stack_id(t, width),
        name: t
            .is_multiple_of(7)
            .then(|| format!("Service {svc} ({env})")),
        repository: REPOS[(t % REPOS.len() as u64) as usize].to_string(),
        branch: t.is_multiple_of(11).then(|| "release".to_string()),
        path: t
            .is_multiple_of(2)
            .then(|| format!("envs/{env}/svc-{svc:02}")),
        watch_paths: if t.is_multiple_of(3) {
            vec![
                "modules/network".into(),
                format!("modules/svc-{svc:02}"),
                format!("envs/{env}"),
            ]
        } else {
            Vec::new()
        },
        engine: t.is_multiple_of(5).then(|| "terraform".to_string()),
        engine_binary: None,
        engine_version: t.is_multiple_of(5).then(|| "1.8.2".to_string()),
        tier: Some(TIERS[(t % 3) as usize].to_string()),
        autodeploy: t.is_multiple_of(11),
        environment: (t.is_multiple_of(7) || t % 6 == 1).then(|| env.to_string()),
        variables,
        depends_on: upstream(t)
            .map(|u| {
                vec![DependencyInput {
                    stack: stack_id(u, width),
                    outputs: BTreeMap::from([("vpc_id".to_string(), "vpc_id".to_string())]),
                    trigger_always: false,
                }]
            })
            .unwrap_or_default(),
        // Weekly, on Sunday at 03:MM UTC: the bench never sees thousands of checks fire.
        drift_detection: t.is_multiple_of(10).then(|| DriftInput {
            schedule: format!("{} 3 * * 0", t % 60),
            reconcile: t.is_multiple_of(20),
            timezone: None,
        }),
        runner_pool: None,
        aws: None,
    }
}

fn lineage(t: u64) -> String {
    let h = hex::encode(Sha256::digest(format!("lineage {t}").as_bytes()));
    format!(
        "{}-{}-4{}-a{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}

/// A small Terraform v4 state: five outputs (one sensitive, one that changes with every
/// version) and three resources, about 2 KiB.
fn state_body(t: u64, serial: u64) -> R<Vec<u8>> {
    let svc = t % 50;
    let env = ENVS[(t % 3) as usize];
    let provider = "provider[\"registry.terraform.io/hashicorp/aws\"]";
    let doc = json!({
        "version": 4,
        "terraform_version": "1.8.2",
        "serial": serial,
        "lineage": lineage(t),
        "outputs": {
            "vpc_id": {"value": format!("vpc-{:08x}", h40(t as i64) & 0xffff_ffff), "type": "string"},
            "subnet_ids": {"value": [format!("subnet-{:06x}a", t), format!("subnet-{:06x}b", t)],
                           "type": ["list", "string"]},
            "endpoint": {"value": format!("https://svc-{svc:02}.{env}.internal.example:8443"), "type": "string"},
            "release": {"value": format!("r{serial}"), "type": "string"},
            "db_password": {"value": format!("{:016x}", h40(serial as i64 * 31 + t as i64)),
                            "type": "string", "sensitive": true},
        },
        "resources": [
            {"mode": "managed", "type": "aws_security_group", "name": "app", "provider": provider,
             "instances": [{"schema_version": 1, "attributes": {
                 "id": format!("sg-{:010x}", h40(t as i64 + 1)), "name": format!("svc-{svc:02}-{env}"),
                 "ingress": [{"from_port": 8443, "to_port": 8443, "protocol": "tcp", "cidr_blocks": ["10.0.0.0/8"]}],
                 "tags": {"Service": format!("svc-{svc:02}"), "Env": env}}}]},
            {"mode": "managed", "type": "aws_instance", "name": "app", "provider": provider,
             "instances": [{"index_key": 0, "schema_version": 1, "attributes": {
                 "id": format!("i-{:012x}", h40(t as i64 + 2)), "ami": "ami-0c55b159cbfafe1f0",
                 "instance_type": "t3.small", "subnet_id": format!("subnet-{:06x}a", t),
                 "tags": {"Name": format!("svc-{svc:02}-{env}"), "Release": format!("r{serial}")}},
                 "dependencies": ["aws_security_group.app"]}]},
            {"mode": "managed", "type": "aws_route53_record", "name": "app", "provider": provider,
             "instances": [{"schema_version": 2, "attributes": {
                 "id": format!("Z{:012X}_svc-{svc:02}.{env}.internal.example_CNAME", h40(t as i64 + 3)),
                 "name": format!("svc-{svc:02}.{env}.internal.example"), "type": "CNAME", "ttl": 300}}]}
        ],
        "check_results": null
    });
    Ok(serde_json::to_vec_pretty(&doc)?)
}

fn plan_summary(changes: bool, t: u64) -> Value {
    if !changes {
        return json!({"has_changes": false, "add": 0, "change": 0, "destroy": 0,
                      "resource_changes": [], "output_changes": {}});
    }
    let add = (t % 3) as u32;
    json!({
        "has_changes": true, "add": add, "change": 1, "destroy": 0,
        "resource_changes": (0..add).map(|i| json!({"address": format!("aws_instance.worker[{i}]"), "action": "create"}))
            .chain(std::iter::once(json!({"address": "aws_instance.app[0]", "action": "update"})))
            .collect::<Vec<_>>(),
        "output_changes": {"release": "update"},
    })
}

const INIT_LOG: &str = "Initializing the backend...\n\nSuccessfully configured the backend \"http\"! \
Terraform will automatically\nuse this backend unless the backend configuration changes.\n\n\
Initializing provider plugins...\n- Reusing previous version of hashicorp/aws from the dependency lock file\n\
- Using previously-installed hashicorp/aws v5.31.0\n\nTerraform has been successfully initialized!\n";

fn plan_log(changes: bool, t: u64) -> String {
    let mut s = String::from(
        "aws_security_group.app: Refreshing state... [id=sg-0a1b2c3d4e]\n\
         aws_instance.app[0]: Refreshing state... [id=i-0f1e2d3c4b5a]\n\
         aws_route53_record.app: Refreshing state... [id=Z0ABCDEF123456_svc.internal.example_CNAME]\n\n",
    );
    if changes {
        let add = t % 3;
        s.push_str(
            "Terraform used the selected providers to generate the following execution\nplan. \
             Resource actions are indicated with the following symbols:\n  + create\n  ~ update in-place\n\n\
             Terraform will perform the following actions:\n\n  # aws_instance.app[0] will be updated in-place\n  \
             ~ resource \"aws_instance\" \"app\" {\n        id            = \"i-0f1e2d3c4b5a\"\n      \
             ~ tags          = {\n          ~ \"Release\" = \"r41\" -> \"r42\"\n        }\n        \
             # (31 unchanged attributes hidden)\n    }\n\n",
        );
        s.push_str(&format!(
            "Plan: {add} to add, 1 to change, 0 to destroy.\n\nChanges to Outputs:\n  ~ release = \"r41\" -> \"r42\"\n"
        ));
    } else {
        s.push_str(
            "No changes. Your infrastructure matches the configuration.\n\nTerraform has compared \
             your real infrastructure against your configuration\nand found no differences, so no \
             changes are needed.\n",
        );
    }
    s
}

const APPLY_LOG: &str = "aws_instance.app[0]: Modifying... [id=i-0f1e2d3c4b5a]\n\
aws_instance.app[0]: Still modifying... [id=i-0f1e2d3c4b5a, 10s elapsed]\n\
aws_instance.app[0]: Modifications complete after 14s [id=i-0f1e2d3c4b5a]\n\n\
Apply complete! Resources: 0 added, 1 changed, 0 destroyed.\n\nOutputs:\n\n\
endpoint = \"https://svc.internal.example:8443\"\nrelease = \"r42\"\nvpc_id = \"vpc-0a1b2c3d\"\n";

const FAIL_LOG: &str = "\u{2577}\n\u{2502} Error: creating EC2 Instance: InvalidParameterValue: \
Value (t3.nano) for parameter instanceType is invalid.\n\u{2502} \n\u{2502}   with aws_instance.worker[0],\n\
\u{2502}   on main.tf line 42, in resource \"aws_instance\" \"worker\":\n\u{2502}   42: resource \"aws_instance\" \"worker\" {\n\u{2575}\n";

struct Seeder {
    store: Arc<dyn Store>,
    width: usize,
    admin_token: String,
    runner: RunnerRecord,
    rng: Rng,
    specs: Vec<StackSpec>,
    /// What each template run is to do (runs the store made itself — held dependency
    /// runs, reconciles — are not here).
    scenario: HashMap<String, Scenario>,
    serial: Vec<u64>,
    versions: Vec<u32>,
    max_versions: u32,
    /// Each stack's latest run created in the rounds (a retry's `retry_of`).
    last_run: Vec<Option<String>>,
    /// Store calls made.
    calls: u64,
}

impl Seeder {
    fn t_of(&self, stack: &str) -> R<u64> {
        stack
            .strip_prefix("stack-")
            .and_then(|n| n.parse::<u64>().ok())
            .ok_or_else(|| format!("not a template stack: {stack:?}").into())
    }

    fn gated(&self, t: u64) -> bool {
        self.specs[t as usize]
            .environment
            .as_ref()
            .is_some_and(|e| e.as_str() == "prod")
    }

    fn audit(&self, actor: &str, action: &str, target: String, detail: Value) -> Audit {
        Audit {
            org: Some(TEMPLATE_ORG.into()),
            actor: actor.into(),
            token_id: (actor == "user:admin").then(|| self.admin_token.clone()),
            action: action.into(),
            target,
            detail,
        }
    }

    /// A run id as the server makes it: creation time in ms (11 hex) and 5 random bytes.
    fn new_run_id(&mut self) -> String {
        format!(
            "run-{:011x}{}",
            Utc::now().timestamp_millis(),
            hex::encode(self.rng.bytes::<5>())
        )
    }

    async fn create_run(
        &mut self,
        t: u64,
        kind: RunKind,
        trigger: Trigger,
        retry_of: Option<String>,
    ) -> R<RunRecord> {
        let id = self.new_run_id();
        let spec = &self.specs[t as usize];
        let run = NewRun {
            id: id.clone(),
            org: TEMPLATE_ORG.into(),
            stack: spec.id.to_string(),
            kind,
            trigger,
            triggered_by: if trigger == Trigger::PullRequest {
                "system".into()
            } else {
                "user:admin".into()
            },
            commit: None,
            branch: spec.branch.clone(),
            retry_of,
            pull_request: (kind == RunKind::Proposed).then_some(1000 + t as i64),
        };
        let actor = if trigger == Trigger::PullRequest {
            "system"
        } else {
            "user:admin"
        };
        let audit = self.audit(
            actor,
            "run.create",
            format!("run:{id}"),
            json!({"stack": run.stack, "kind": kind.as_str(), "trigger": trigger.as_str()}),
        );
        self.calls += 1;
        Ok(self.store.create_run(&run, Some(&audit)).await?)
    }

    async fn event(
        &mut self,
        run: &RunRecord,
        event: Event,
        runner: bool,
        update: RunUpdate,
        audit: Option<Audit>,
    ) -> R<RunRecord> {
        self.calls += 1;
        let input = RunEventInput {
            event,
            fencing: runner.then_some(run.fencing),
            update,
            audit,
        };
        Ok(self.store.run_event(&run.id, &input).await?.run)
    }

    async fn logs(&mut self, run: &RunRecord, text: &str) -> R<()> {
        self.calls += 2;
        let seq = self.store.next_log_seq(&run.id).await?;
        self.store
            .append_logs(&run.id, run.fencing, &[(seq, text.to_string())])
            .await?;
        Ok(())
    }

    /// The token a leased phase runs with, as the server mints it (revoked as the run ends).
    async fn run_token(&mut self, run: &RunRecord) -> R<String> {
        let t = self.t_of(&run.stack)?;
        let secret = format_token(TokenKind::Run, &self.rng.bytes::<32>());
        let id = format!("tok_{}", hex::encode(self.rng.bytes::<8>()));
        let token = NewToken {
            id: id.clone(),
            kind: TokenKind::Run,
            secret_hash: hash_token(&secret),
            description: format!("run {}", run.id),
            user: None,
            org: Some(run.org.clone()),
            pool: None,
            run: Some(run.id.clone()),
            stack: Some(run.stack.clone()),
            read_stacks: upstream(t)
                .map(|u| vec![stack_id(u, self.width)])
                .unwrap_or_default(),
            expires_at: Some(Utc::now() + Duration::hours(2)),
        };
        self.calls += 1;
        self.store.create_token(&token, None).await?;
        Ok(id)
    }

    fn lock_of(&mut self, holder: Writer, who: &str) -> Lock {
        let b = self.rng.bytes::<16>();
        let h = hex::encode(b);
        Lock {
            id: format!(
                "{}-{}-4{}-8{}-{}",
                &h[0..8],
                &h[8..12],
                &h[13..16],
                &h[17..20],
                &h[20..32]
            ),
            operation: "OperationTypeApply".into(),
            info: String::new(),
            who: who.into(),
            version: "1.8.2".into(),
            created: Utc::now().to_rfc3339(),
            path: String::new(),
            holder,
            acquired_at: Utc::now(),
        }
    }

    /// Locks, writes the next version and unlocks, as Terraform's http backend does.
    async fn write_state(&mut self, t: u64, writer: Writer, token: Option<String>) -> R<()> {
        let stack = self.specs[t as usize].id.to_string();
        let (who, liveness) = match &writer {
            Writer::Run(_) => ("runner@bosun", WriterLiveness::LiveRun),
            Writer::User(_) => ("alice@laptop", WriterLiveness::Person),
        };
        let lock = self.lock_of(writer.clone(), who);
        self.store.lock_state(TEMPLATE_ORG, &stack, &lock).await?;
        self.serial[t as usize] += 1;
        let body = state_body(t, self.serial[t as usize])?;
        let doc = StateDoc::parse(&body)?;
        let new = NewStateVersion {
            body,
            doc,
            request: WriteRequest {
                writer,
                liveness,
                lock_id: Some(lock.id.clone()),
                force: false,
            },
            token_id: token,
            recovery_reason: None,
        };
        self.store
            .write_state(TEMPLATE_ORG, &stack, &new, None)
            .await?;
        let audit = self.audit(
            "user:admin",
            "state.unlock",
            format!("stack:{stack}"),
            json!({}),
        );
        self.store
            .unlock_state(
                TEMPLATE_ORG,
                &stack,
                &UnlockRequest::Holder { id: lock.id },
                &audit,
            )
            .await?;
        self.versions[t as usize] += 1;
        self.calls += 3;
        Ok(())
    }

    /// Leases and runs every phase waiting for a runner, until none is left.
    async fn drain(&mut self) -> R<()> {
        loop {
            self.calls += 1;
            let Some(run) = self.store.lease_run(&self.runner).await? else {
                return Ok(());
            };
            let scenario = match self.scenario.get(&run.id) {
                Some(s) => *s,
                // Held dependency runs plan nothing new; reconciles apply.
                None if run.trigger == Trigger::Dependency => Scenario::NoChanges,
                None => Scenario::Apply,
            };
            let token = self.run_token(&run).await?;
            match run.phase {
                Phase::Plan => self.plan(run, scenario).await?,
                Phase::Apply => self.apply(run, scenario, token).await?,
            }
        }
    }

    async fn plan(&mut self, run: RunRecord, scenario: Scenario) -> R<()> {
        use Scenario::*;
        let t = self.t_of(&run.stack)?;
        let commit = hex::encode(&Sha256::digest(run.id.as_bytes())[..20]);
        self.logs(&run, INIT_LOG).await?;
        let update = RunUpdate {
            commit: Some(commit),
            ..Default::default()
        };
        let run = self
            .event(&run, Event::PhaseStarted, true, update, None)
            .await?;
        let run = match scenario {
            PlanFails => {
                self.logs(&run, FAIL_LOG).await?;
                let update = RunUpdate {
                    reason: Some("terraform plan exited with status 1".into()),
                    ..Default::default()
                };
                self.event(&run, Event::PhaseFailed, true, update, None)
                    .await?
            }
            Stale => {
                self.event(&run, Event::Stale, false, RunUpdate::default(), None)
                    .await?
            }
            Timeout => {
                let update = RunUpdate {
                    reason: Some(
                        "the phase ran past its tier's timeout; the engine was stopped".into(),
                    ),
                    ..Default::default()
                };
                self.event(&run, Event::Timeout, false, update, None)
                    .await?
            }
            _ => {
                let changes = match scenario {
                    NoChanges => false,
                    Proposed { changes } | Drift { changes } => changes,
                    _ => true,
                };
                self.logs(&run, &plan_log(changes, t)).await?;
                let update = RunUpdate {
                    plan_summary: Some(plan_summary(changes, t)),
                    ..Default::default()
                };
                self.event(&run, Event::PlanFinished { changes }, true, update, None)
                    .await?
            }
        };
        if run.kind == RunKind::Drift && run.state.is_terminal() {
            self.settle_drift(&run, t).await?;
        }
        if run.state == RunState::Unconfirmed {
            match scenario {
                Hold => {}
                Discard => self.decide(&run, t, false).await?,
                _ => self.decide(&run, t, true).await?,
            }
        }
        Ok(())
    }

    /// Confirms or discards an unconfirmed run — through an approval when its stack's
    /// environment requires one.
    async fn decide(&mut self, run: &RunRecord, t: u64, go: bool) -> R<()> {
        self.calls += 1;
        if self.gated(t) {
            let decision = if go {
                Decision::Approve
            } else {
                Decision::Reject
            };
            let comment = (!go).then(|| "not during the freeze".to_string());
            let actor = format!("user:{APPROVER}");
            let audit = Audit {
                token_id: None,
                ..self.audit(
                    &actor,
                    if go {
                        "approval.approve"
                    } else {
                        "approval.reject"
                    },
                    format!("run:{}", run.id),
                    json!({"kind": "stack_run", "environments": ["prod"],
                           "requested_by": run.triggered_by, "comment": comment}),
                )
            };
            let input = ApprovalDecisionInput {
                org: TEMPLATE_ORG.into(),
                subject: run.id.clone(),
                decision,
                decided_by: actor,
                comment,
                audit,
            };
            self.store.decide_approval(&input).await?;
        } else {
            let (event, action) = if go {
                (Event::Confirm, "run.confirm")
            } else {
                (Event::Discard, "run.discard")
            };
            let audit = self.audit("user:admin", action, format!("run:{}", run.id), json!({}));
            self.event(run, event, false, RunUpdate::default(), Some(audit))
                .await?;
        }
        Ok(())
    }

    async fn apply(&mut self, run: RunRecord, scenario: Scenario, token: String) -> R<()> {
        let t = self.t_of(&run.stack)?;
        let commit = run.commit.clone();
        let update = RunUpdate {
            commit,
            ..Default::default()
        };
        let run = self
            .event(&run, Event::PhaseStarted, true, update, None)
            .await?;
        self.logs(&run, INIT_LOG).await?;
        if scenario == Scenario::ApplyFails {
            // The engine locked the state and failed: the run's end releases its lock.
            let lock = self.lock_of(Writer::Run(run.id.clone()), "runner@bosun");
            self.calls += 1;
            self.store
                .lock_state(TEMPLATE_ORG, &run.stack, &lock)
                .await?;
            self.logs(&run, FAIL_LOG).await?;
            let update = RunUpdate {
                reason: Some("terraform apply exited with status 1".into()),
                ..Default::default()
            };
            self.event(&run, Event::PhaseFailed, true, update, None)
                .await?;
            return Ok(());
        }
        if self.versions[t as usize] < self.max_versions {
            self.write_state(t, Writer::Run(run.id.clone()), Some(token))
                .await?;
        }
        self.logs(&run, APPLY_LOG).await?;
        self.event(&run, Event::ApplyFinished, true, RunUpdate::default(), None)
            .await?;
        Ok(())
    }

    /// Settles an ended drift run as the scheduler does, starting a reconcile when the
    /// stack asks for one.
    async fn settle_drift(&mut self, run: &RunRecord, t: u64) -> R<()> {
        let result = match (run.state, &run.plan_summary) {
            (RunState::Finished, Some(p)) if p["has_changes"] == json!(true) => {
                DriftResult::DriftDetected
            }
            (RunState::Finished, Some(_)) => DriftResult::NoDrift,
            _ => DriftResult::Failed,
        };
        let spec = &self.specs[t as usize];
        let reconcile = (result == DriftResult::DriftDetected
            && spec.drift_detection.as_ref().is_some_and(|d| d.reconcile))
        .then(|| NewRun {
            id: String::new(),
            org: TEMPLATE_ORG.into(),
            stack: spec.id.to_string(),
            kind: RunKind::Tracked,
            trigger: Trigger::Schedule,
            triggered_by: format!("run:{}", run.id),
            commit: None,
            branch: spec.branch.clone(),
            retry_of: None,
            pull_request: None,
        });
        let reconcile = match reconcile {
            Some(mut r) => {
                r.id = self.new_run_id();
                Some(r)
            }
            None => None,
        };
        self.calls += 1;
        self.store
            .settle_drift_run(&run.id, result, reconcile.as_ref())
            .await?;
        Ok(())
    }

    /// Fires stack `t`'s drift schedule now, starting its drift run.
    async fn fire_drift(&mut self, t: u64, scenario: Scenario) -> R<()> {
        let spec = self.specs[t as usize].clone();
        let Some(drift) = &spec.drift_detection else {
            return Ok(());
        };
        let schedule = drift.parsed()?;
        let record = self
            .store
            .drift_schedules(Some(TEMPLATE_ORG), Some(spec.id.as_str()))
            .await?
            .pop()
            .ok_or("a drift stack without its schedule")?;
        let armed = record.state.ok_or("a drift schedule not armed")?;
        let now = Utc::now();
        let next = schedule
            .next_after(armed.next_at)
            .ok_or("a schedule that never fires")?;
        let id = self.new_run_id();
        self.scenario.insert(id.clone(), scenario);
        let fire = DriftFire {
            org: TEMPLATE_ORG.into(),
            stack: spec.id.to_string(),
            schedule: drift.schedule.clone(),
            timezone: drift.timezone.clone(),
            expected_next: Some(armed.next_at),
            next_at: next,
            since: None,
            run: Some(NewRun {
                id,
                org: TEMPLATE_ORG.into(),
                stack: spec.id.to_string(),
                kind: RunKind::Drift,
                trigger: Trigger::Schedule,
                triggered_by: "system".into(),
                commit: None,
                branch: spec.branch.clone(),
                retry_of: None,
                pull_request: None,
            }),
            note: None,
            now,
        };
        self.calls += 2;
        self.store.fire_drift_schedule(&fire).await?;
        Ok(())
    }

    async fn arm_drift(&mut self, t: u64) -> R<()> {
        let spec = &self.specs[t as usize];
        let Some(drift) = &spec.drift_detection else {
            return Ok(());
        };
        let now = Utc::now();
        let next = drift
            .parsed()?
            .next_after(now)
            .ok_or("a schedule that never fires")?;
        let fire = DriftFire {
            org: TEMPLATE_ORG.into(),
            stack: spec.id.to_string(),
            schedule: drift.schedule.clone(),
            timezone: drift.timezone.clone(),
            expected_next: None,
            next_at: next,
            since: Some(now),
            run: None,
            note: None,
            now,
        };
        self.calls += 1;
        self.store.fire_drift_schedule(&fire).await?;
        Ok(())
    }
}

/// What the template phase leaves for the copies.
struct Templates {
    admin_token: String,
    /// When the templates began and ended (ms): the copies' time stretch.
    start_ms: i64,
    end_ms: i64,
    hosted_runners: i64,
}

async fn open_store(backend: &Backend) -> R<Arc<dyn Store>> {
    Ok(match backend {
        Backend::Sqlite(p) => Arc::new(SqliteStore::open(p).await?),
        Backend::Postgres(u) => Arc::new(PostgresStore::open(u).await?),
    })
}

async fn make_templates(args: &Args) -> R<Templates> {
    let store = open_store(&args.backend).await?;
    let width = args.width();
    let mut rng = Rng::from_os()?;

    // The admin token the bench authenticates with, made as the server's first start does.
    let secret = format_token(TokenKind::Personal, &os_random_32()?);
    let admin_token = format!("tok_{}", hex::encode(rng.bytes::<8>()));
    let seeded = store
        .bootstrap(&Bootstrap {
            org: BIG_ORG.into(),
            user: ADMIN.into(),
            token: NewToken {
                id: admin_token.clone(),
                kind: TokenKind::Personal,
                secret_hash: hash_token(&secret),
                description: "bootstrap admin token".into(),
                user: Some(ADMIN.into()),
                org: None,
                pool: None,
                run: None,
                stack: None,
                read_stacks: Vec::new(),
                expires_at: None,
            },
        })
        .await?;
    if !seeded {
        return Err("the store already has users: seed an empty store".into());
    }
    write_private(&args.token_file, &secret)?;

    let admin_audit = |org: Option<&str>, action: &str, target: String, detail: Value| Audit {
        org: org.map(str::to_string),
        actor: "user:admin".into(),
        token_id: Some(admin_token.clone()),
        action: action.into(),
        target,
        detail,
    };
    store
        .create_user(
            &NewUser {
                id: APPROVER.into(),
                server_admin: false,
            },
            &admin_audit(None, "user.create", format!("user:{APPROVER}"), json!({})),
        )
        .await?;
    let mut orgs = vec![TEMPLATE_ORG.to_string()];
    orgs.extend(args.targets().into_iter().map(|(o, _)| o));
    for org in &orgs {
        if org != BIG_ORG {
            let name = if org == TEMPLATE_ORG {
                "Seed templates".to_string()
            } else {
                format!("Team {}", org.trim_start_matches("team-"))
            };
            store
                .create_org(
                    &NewOrg {
                        id: org.clone(),
                        name,
                        admin: Some(ADMIN.into()),
                    },
                    &admin_audit(Some(org), "org.create", format!("org:{org}"), json!({})),
                )
                .await?;
        }
        store
            .set_member(
                org,
                APPROVER,
                Role::Admin,
                &admin_audit(
                    Some(org),
                    "org.member.set",
                    format!("user:{APPROVER}"),
                    json!({"role": "admin"}),
                ),
            )
            .await?;
        for (i, env) in ENVS.iter().enumerate() {
            store
                .create_environment(
                    &NewEnvironment {
                        org: org.clone(),
                        id: env.to_string(),
                        vars: BTreeMap::from([(
                            "region".to_string(),
                            json!(REGIONS[i % REGIONS.len()]),
                        )]),
                        requires_approval: *env == "prod",
                        protected: false,
                    },
                    &admin_audit(
                        Some(org),
                        "environment.create",
                        format!("environment:{env}"),
                        json!({}),
                    ),
                )
                .await?;
        }
    }

    // Runners: a fifth in the server's hosted pool (every org's list shows them), the
    // rest in pools of org `default`.
    let hosted = (args.runners as i64 / 5).max(1);
    let mut seed_runner = None;
    for i in 0..args.runners as i64 {
        let (org, pool, name) = if i < hosted {
            (None, "hosted".to_string(), format!("hosted-{i:04}"))
        } else {
            let pool = ["edge", "batch", "secure"][(i % 3) as usize];
            (
                Some(BIG_ORG.to_string()),
                pool.to_string(),
                format!("{pool}-{i:04}"),
            )
        };
        let r = store
            .register_runner(&RunnerRecord {
                id: runner_id(i),
                org,
                pool,
                name,
                version: env!("CARGO_PKG_VERSION").into(),
                drained: false,
                last_seen: Utc::now(),
                created_at: Utc::now(),
            })
            .await?;
        if i == 0 {
            seed_runner = Some(r);
        }
    }
    let runner = seed_runner.ok_or("no runner registered")?;

    let start = Utc::now();
    let k = args.templates;
    let mut s = Seeder {
        store: store.clone(),
        width,
        admin_token: admin_token.clone(),
        runner,
        rng,
        specs: Vec::new(),
        scenario: HashMap::new(),
        serial: vec![0; k as usize],
        versions: vec![0; k as usize],
        max_versions: args.versions_per_stack,
        last_run: vec![None; k as usize],
        calls: 0,
    };
    for t in 0..k {
        let spec = StackSpec::from_input(stack_input(t, width))?;
        let audit = s.audit(
            "user:admin",
            "stack.create",
            format!("stack:{}", spec.id),
            json!({"name": spec.name, "repository": spec.repository.to_string()}),
        );
        s.calls += 1;
        store.create_stack(TEMPLATE_ORG, &spec, &audit).await?;
        s.specs.push(spec);
        s.arm_drift(t).await?;
    }

    // Rounds: run r of every stack, then run r + 1, so each stack's runs spread over the
    // whole history once stretched.
    for r in 0..args.runs_per_stack {
        for t in 0..k {
            let drift = s.specs[t as usize].drift_detection.is_some();
            let (scenario, kind, trigger) = scenario(t, r, drift);
            if kind == RunKind::Drift {
                s.fire_drift(t, scenario).await?;
            } else {
                let retry_of = match trigger {
                    Trigger::Retry => s.last_run[t as usize].clone(),
                    _ => None,
                };
                let trigger = if trigger == Trigger::Retry && retry_of.is_none() {
                    Trigger::Manual
                } else {
                    trigger
                };
                let run = s.create_run(t, kind, trigger, retry_of).await?;
                s.scenario.insert(run.id.clone(), scenario);
                if kind == RunKind::Tracked {
                    s.last_run[t as usize] = Some(run.id.clone());
                }
                if scenario == Scenario::Cancel {
                    let audit = s.audit(
                        "user:admin",
                        "run.cancel",
                        format!("run:{}", run.id),
                        json!({}),
                    );
                    s.calls += 1;
                    store.cancel_run(&run.id, &audit).await?;
                }
            }
            s.drain().await?;
        }
        log(format!(
            "templates: round {}/{} ({} store calls)",
            r + 1,
            args.runs_per_stack,
            s.calls
        ));
    }
    // Versions written from a laptop, up to the number each stack should have.
    for t in 0..k {
        while s.versions[t as usize] < args.versions_per_stack {
            let token = Some(s.admin_token.clone());
            s.write_state(t, Writer::User(ADMIN.into()), token).await?;
        }
    }
    // Open at the end: plans waiting for confirmation or approval, locks held from a
    // laptop, and runs queued (behind nothing: no runner is serving).
    for t in (0..k).filter(|t| t % 25 == 12) {
        let run = s
            .create_run(t, RunKind::Tracked, Trigger::Manual, None)
            .await?;
        s.scenario.insert(run.id, Scenario::Hold);
        s.drain().await?;
    }
    for t in (0..k).filter(|t| t % 50 == 7) {
        let stack = s.specs[t as usize].id.to_string();
        let lock = s.lock_of(Writer::User(ADMIN.into()), "dana@laptop");
        s.calls += 1;
        store.lock_state(TEMPLATE_ORG, &stack, &lock).await?;
    }
    for t in (0..k).filter(|t| t.is_multiple_of(25)) {
        s.create_run(t, RunKind::Tracked, Trigger::Manual, None)
            .await?;
    }
    let end = Utc::now();
    let secs = (end - start).num_milliseconds() as f64 / 1000.0;
    log(format!(
        "templates: {k} stacks made through the Store API in {secs:.1}s ({} store calls, {}/s)",
        s.calls,
        per_s(s.calls, secs)
    ));
    store.close().await;
    Ok(Templates {
        admin_token,
        start_ms: start.timestamp_millis(),
        end_ms: end.timestamp_millis(),
        hosted_runners: hosted,
    })
}

// --- the copies, in bulk SQL --------------------------------------------------------------

#[derive(Clone, Copy, PartialEq)]
enum Dialect {
    Sqlite,
    Postgres,
}

enum Conn {
    Sqlite(rusqlite::Connection),
    Postgres(Box<postgres::Client>),
}

struct Bulk {
    conn: Conn,
    d: Dialect,
}

impl Bulk {
    fn open(backend: &Backend) -> R<Bulk> {
        Ok(match backend {
            Backend::Sqlite(p) => {
                let c = rusqlite::Connection::open(p)?;
                c.busy_timeout(std::time::Duration::from_secs(30))?;
                c.pragma_update(None, "journal_mode", "WAL")?;
                c.pragma_update(None, "synchronous", "NORMAL")?;
                c.pragma_update(None, "foreign_keys", "ON")?;
                // A large page cache: the copies' ids land all over the indexes.
                c.pragma_update(None, "cache_size", -1024 * 1024)?;
                c.pragma_update(None, "temp_store", "MEMORY")?;
                Bulk {
                    conn: Conn::Sqlite(c),
                    d: Dialect::Sqlite,
                }
            }
            Backend::Postgres(u) => {
                let c = postgres::Client::connect(u, postgres::NoTls)?;
                Bulk {
                    conn: Conn::Postgres(Box::new(c)),
                    d: Dialect::Postgres,
                }
            }
        })
    }

    fn batch(&mut self, sql: &str) -> R<()> {
        let done: R<()> = match &mut self.conn {
            Conn::Sqlite(c) => c.execute_batch(sql).map_err(Into::into),
            Conn::Postgres(c) => c.batch_execute(sql).map_err(Into::into),
        };
        done.map_err(|e| format!("{e}\nin: {sql}").into())
    }

    /// Runs one statement; the rows it changed.
    fn exec(&mut self, sql: &str) -> R<u64> {
        let done: R<u64> = match &mut self.conn {
            Conn::Sqlite(c) => c.execute(sql, []).map(|n| n as u64).map_err(Into::into),
            Conn::Postgres(c) => c.execute(sql, &[]).map_err(Into::into),
        };
        done.map_err(|e| format!("{e}\nin: {sql}").into())
    }

    /// Every row of a query whose columns are all text (cast them).
    fn texts(&mut self, sql: &str) -> R<Vec<Vec<Option<String>>>> {
        let mut out = Vec::new();
        match &mut self.conn {
            Conn::Sqlite(c) => {
                let mut stmt = c.prepare(sql)?;
                let n = stmt.column_count();
                let mut rows = stmt.query([])?;
                while let Some(row) = rows.next()? {
                    out.push(
                        (0..n)
                            .map(|i| row.get::<_, Option<String>>(i))
                            .collect::<Result<_, _>>()?,
                    );
                }
            }
            Conn::Postgres(c) => {
                for row in c.query(sql, &[])? {
                    out.push(
                        (0..row.len())
                            .map(|i| row.try_get::<_, Option<String>>(i))
                            .collect::<Result<_, _>>()?,
                    );
                }
            }
        }
        Ok(out)
    }

    /// The number a `SELECT COUNT(*) …` gives.
    fn count(&mut self, sql: &str) -> R<i64> {
        let rows = self.texts(&format!("SELECT CAST(({sql}) AS TEXT)"))?;
        let v = rows
            .first()
            .and_then(|r| r.first().cloned().flatten())
            .ok_or_else(|| format!("no count from {sql}"))?;
        Ok(v.parse()?)
    }

    fn columns(&mut self, table: &str) -> R<Vec<String>> {
        let sql = match self.d {
            Dialect::Sqlite => {
                format!("SELECT name FROM pragma_table_info('{table}') ORDER BY cid")
            }
            Dialect::Postgres => format!(
                "SELECT CAST(column_name AS TEXT) FROM information_schema.columns
                 WHERE table_schema = current_schema() AND table_name = '{table}'
                 ORDER BY ordinal_position"
            ),
        };
        let cols: Vec<String> = self
            .texts(&sql)?
            .into_iter()
            .filter_map(|r| r.into_iter().next().flatten())
            .collect();
        if cols.is_empty() {
            return Err(format!("no table {table}").into());
        }
        Ok(cols)
    }

    fn text_type(&self) -> &'static str {
        match self.d {
            Dialect::Sqlite => "TEXT",
            Dialect::Postgres => "TEXT COLLATE \"C\"",
        }
    }

    /// `e` as `w` lower-case hex digits.
    fn hex(&self, e: &str, w: u32) -> String {
        match self.d {
            Dialect::Sqlite => format!("printf('%0{w}x', {e})"),
            Dialect::Postgres => format!("lpad(to_hex({e}), {w}, '0')"),
        }
    }

    /// `e` as `w` decimal digits.
    fn dec(&self, e: &str, w: usize) -> String {
        match self.d {
            Dialect::Sqlite => format!("printf('%0{w}d', {e})"),
            Dialect::Postgres => format!("lpad(CAST({e} AS TEXT), {w}, '0')"),
        }
    }
}

fn lit(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// The SQL that turns template rows into copies (aliases: `k` the copy, `t` the template row).
struct Copier<'a> {
    b: &'a mut Bulk,
    k: i64,
    width: usize,
    /// Template runs and run tokens (id multipliers).
    nr: i64,
    nt: i64,
    t0: i64,
    stretch: i64,
    hosted: i64,
}

impl Copier<'_> {
    /// The copy's stack number of template stack number `e`.
    fn j(&self, e: &str) -> String {
        format!("(k.m * {} + {e})", self.k)
    }

    fn sid(&self, e: &str) -> String {
        format!("'stack-' || {}", self.b.dec(&self.j(e), self.width))
    }

    /// A template time moved into the copy's history.
    fn time(&self, e: &str) -> String {
        format!(
            "({t0} - ({t0} - {e}) * {s} - k.shift)",
            t0 = self.t0,
            s = self.stretch
        )
    }

    fn h40(x: &str) -> String {
        format!("((({x}) * {MUL} + {ADD}) % {H40})")
    }

    /// The copy of template run `a` (an alias of `seed_tpl_run`).
    fn rid(&self, a: &str) -> String {
        let x = format!("k.c * {} + {a}.ord", self.nr);
        format!(
            "'run-' || {} || {}",
            self.b.hex(&self.time(&format!("{a}.created_at")), 11),
            self.b.hex(&Self::h40(&x), 10)
        )
    }

    /// The copy of template run `a`, or NULL when `a` matched nothing.
    fn rid_or_null(&self, a: &str) -> String {
        format!(
            "CASE WHEN {a}.id IS NULL THEN NULL ELSE {} END",
            self.rid(a)
        )
    }

    fn token_x(&self, a: &str) -> String {
        format!("(k.c * {} + {a}.ord)", self.nt)
    }

    fn tid(&self, a: &str) -> String {
        let x = self.token_x(a);
        format!(
            "'tok_' || {} || {}",
            self.b.hex(&Self::h40(&x), 10),
            self.b.hex(&format!("(({x} * 40503 + 7) % 16777216)"), 6)
        )
    }

    /// `column` with the template's upstream id (`ts.up_id`) replaced by the copy's.
    fn with_upstream(&self, column: &str) -> String {
        format!(
            "CASE WHEN ts.up_id IS NULL THEN {column} ELSE replace({column}, '\"' || ts.up_id || '\"', '\"' || {} || '\"') END",
            self.sid("ts.up")
        )
    }

    /// `INSERT INTO table (…) SELECT … FROM …`: every column of `table` is either in
    /// `set` (an expression) or in `keep` (copied as it is); a column in neither is an
    /// error, so a new column the copies would get wrong cannot slip through.
    fn insert(
        &mut self,
        table: &str,
        set: &[(&str, String)],
        keep: &[&str],
        skip: &[&str],
        from: &str,
    ) -> R<u64> {
        let cols = self.b.columns(table)?;
        let mut names = Vec::new();
        let mut exprs = Vec::new();
        for c in &cols {
            if skip.contains(&c.as_str()) {
                continue;
            }
            if let Some((_, e)) = set.iter().find(|(n, _)| *n == c.as_str()) {
                exprs.push(e.clone());
            } else if keep.contains(&c.as_str()) {
                exprs.push(format!("t.{c}"));
            } else {
                return Err(format!(
                    "seed does not know column {table}.{c}: say in crates/bosun-store/examples/seed.rs how a copy gets it"
                )
                .into());
            }
            names.push(c.clone());
        }
        for (n, _) in set {
            if !cols.iter().any(|c| c == n) {
                return Err(
                    format!("seed sets {table}.{n}, which the schema does not have").into(),
                );
            }
        }
        let sql = format!(
            "INSERT INTO {table} ({}) SELECT {} FROM {from}",
            names.join(", "),
            exprs.join(", ")
        );
        self.b.exec(&sql)
    }

    /// Copies every template row for the copies in `seed_copy` into org `org` (stack
    /// numbers below `n`); the rows written.
    fn copy_chunk(&mut self, org: &str, n: u64) -> R<u64> {
        let o = lit(org);
        let within = |c: &Copier, e: &str| format!("{} < {n}", c.j(e));
        let mut rows = 0;

        let sid = self.sid("ts.t");
        let set = [
            ("org_id", o.clone()),
            ("id", sid.clone()),
            (
                "name",
                format!("CASE WHEN t.name = t.id THEN {sid} ELSE t.name END"),
            ),
            ("depends_on", self.with_upstream("t.depends_on")),
            ("created_at", self.time("t.created_at")),
            ("updated_at", self.time("t.updated_at")),
        ];
        let keep = [
            "repository",
            "branch",
            "path",
            "watch_paths",
            "engine",
            "engine_binary",
            "engine_version",
            "tier",
            "autodeploy",
            "environment",
            "variables",
            "drift_detection",
            "runner_pool",
            "repo_key",
            "aws",
        ];
        let from = format!(
            "tpl_stacks t JOIN seed_tpl_stack ts ON ts.id = t.id JOIN seed_copy k ON 1 = 1
             WHERE {} ORDER BY k.m, ts.t",
            within(self, "ts.t")
        );
        rows += self.insert("stacks", &set, &keep, &[], &from)?;

        let set = [
            ("org_id", o.clone()),
            ("stack_id", sid.clone()),
            ("upstream", self.sid("ts.up")),
        ];
        let from = format!(
            "tpl_stack_dependencies t JOIN seed_tpl_stack ts ON ts.id = t.stack_id
             JOIN seed_copy k ON 1 = 1 WHERE {}",
            within(self, "ts.t")
        );
        rows += self.insert("stack_dependencies", &set, &[], &[], &from)?;

        let runner = format!(
            "'rnr_' || {} || {}",
            self.b
                .hex(&format!("({} % {})", self.j("ts.t"), self.hosted), 6),
            self.b.hex(
                &Self::h40(&format!("{} % {}", self.j("ts.t"), self.hosted)),
                10
            )
        );
        let set = [
            ("id", self.rid("r")),
            ("org_id", o.clone()),
            ("stack_id", sid.clone()),
            (
                "triggered_by",
                format!(
                    "CASE WHEN ts.up_id IS NOT NULL AND t.triggered_by = 'stack:' || ts.up_id
                          THEN 'stack:' || {}
                          WHEN rt.id IS NOT NULL THEN 'run:' || {}
                          ELSE t.triggered_by END",
                    self.sid("ts.up"),
                    self.rid("rt")
                ),
            ),
            ("retry_of", self.rid_or_null("rr")),
            ("upstream_run", self.rid_or_null("ru")),
            (
                "runner_id",
                format!("CASE WHEN t.runner_id IS NULL THEN NULL ELSE {runner} END"),
            ),
            ("last_heartbeat", self.time("t.last_heartbeat")),
            ("phase_started_at", self.time("t.phase_started_at")),
            ("blocked_since", self.time("t.blocked_since")),
            ("created_at", self.time("t.created_at")),
            ("updated_at", self.time("t.updated_at")),
        ];
        let keep = [
            "kind",
            "trigger",
            "state",
            "phase",
            "needs_lease",
            "leased",
            "started",
            "cancel_requested",
            "reason",
            "commit_sha",
            "branch",
            "plan_summary",
            "blocked_by",
            "late_write",
            "fencing",
            "pull_request",
            "delivery_id",
            "held",
            "consumed",
            "lock_waits",
            "summarised_at",
        ];
        let from = format!(
            "tpl_runs t JOIN seed_tpl_run r ON r.id = t.id
             JOIN seed_tpl_stack ts ON ts.id = t.stack_id JOIN seed_copy k ON 1 = 1
             LEFT JOIN seed_tpl_run rr ON rr.id = t.retry_of
             LEFT JOIN seed_tpl_run ru ON ru.id = t.upstream_run
             LEFT JOIN seed_tpl_run rt ON rt.id = substr(t.triggered_by, 5)
             WHERE {} ORDER BY k.m, r.ord",
            within(self, "ts.t")
        );
        rows += self.insert("runs", &set, &keep, &[], &from)?;

        let set = [
            ("run_id", self.rid("r")),
            ("started_at", self.time("t.started_at")),
            ("ended_at", self.time("t.ended_at")),
        ];
        let from = format!(
            "tpl_run_phases t JOIN seed_tpl_run r ON r.id = t.run_id JOIN seed_copy k ON 1 = 1
             WHERE {} ORDER BY k.m, r.ord, t.phase_ord",
            within(self, "r.t")
        );
        rows += self.insert("run_phases", &set, &["state"], &["rowid"], &from)?;

        let set = [
            ("run_id", self.rid("r")),
            ("received_at", self.time("t.received_at")),
        ];
        let from = format!(
            "tpl_run_logs t JOIN seed_tpl_run r ON r.id = t.run_id JOIN seed_copy k ON 1 = 1
             WHERE {} ORDER BY k.m, r.ord, t.seq",
            within(self, "r.t")
        );
        rows += self.insert("run_logs", &set, &["seq", "text", "phase"], &[], &from)?;

        let set = [
            ("run_id", self.rid("r")),
            ("upstream_run_id", self.rid("ru")),
        ];
        let from = format!(
            "tpl_run_holds t JOIN seed_tpl_run r ON r.id = t.run_id
             JOIN seed_tpl_run ru ON ru.id = t.upstream_run_id JOIN seed_copy k ON 1 = 1
             WHERE {}",
            within(self, "r.t")
        );
        rows += self.insert("run_holds", &set, &["outcome", "reason"], &[], &from)?;

        let x = self.token_x("tk");
        let secret_hash = format!(
            "{} || {} || '5f3c1e8a9b7d2046e1c0a9f8b7d6e5c4b3a29180f7e6d5c4'",
            self.b.hex(&Self::h40(&x), 10),
            self.b.hex(&x, 10)
        );
        let set = [
            ("id", self.tid("tk")),
            ("secret_hash", secret_hash),
            ("description", format!("'run ' || {}", self.rid("r"))),
            ("org_id", o.clone()),
            ("run_id", self.rid("r")),
            ("stack_id", sid.clone()),
            ("created_at", self.time("t.created_at")),
            ("expires_at", self.time("t.expires_at")),
            ("revoked_at", self.time("t.revoked_at")),
            ("read_stacks", self.with_upstream("t.read_stacks")),
        ];
        let from = format!(
            "tpl_tokens t JOIN seed_tpl_token tk ON tk.id = t.id JOIN seed_tpl_run r ON r.id = t.run_id
             JOIN seed_tpl_stack ts ON ts.t = r.t JOIN seed_copy k ON 1 = 1
             WHERE {} ORDER BY k.m, tk.ord",
            within(self, "r.t")
        );
        rows += self.insert("tokens", &set, &["kind", "user_id", "pool"], &[], &from)?;

        let set = [
            ("run_id", self.rid("r")),
            ("org_id", o.clone()),
            ("stack_id", sid.clone()),
            ("checked_at", self.time("t.checked_at")),
            ("reconcile_run", self.rid_or_null("rc")),
        ];
        let from = format!(
            "tpl_drift_checks t JOIN seed_tpl_run r ON r.id = t.run_id
             JOIN seed_tpl_stack ts ON ts.id = t.stack_id JOIN seed_copy k ON 1 = 1
             LEFT JOIN seed_tpl_run rc ON rc.id = t.reconcile_run WHERE {}",
            within(self, "ts.t")
        );
        rows += self.insert("drift_checks", &set, &["result"], &[], &from)?;

        let set = [
            ("subject_id", self.rid("r")),
            ("org_id", o.clone()),
            ("target", sid.clone()),
            ("decided_at", self.time("t.decided_at")),
        ];
        let keep = [
            "subject_kind",
            "environments",
            "requested_by",
            "decision",
            "decided_by",
            "comment",
        ];
        let from = format!(
            "tpl_approvals t JOIN seed_tpl_run r ON r.id = t.subject_id
             JOIN seed_tpl_stack ts ON ts.id = t.target JOIN seed_copy k ON 1 = 1 WHERE {}",
            within(self, "ts.t")
        );
        rows += self.insert("approvals", &set, &keep, &[], &from)?;

        let set = [
            ("org_id", o.clone()),
            ("stack_id", sid.clone()),
            (
                "lock_holder_id",
                format!(
                    "CASE WHEN rl.id IS NULL THEN t.lock_holder_id ELSE {} END",
                    self.rid("rl")
                ),
            ),
            ("lock_acquired_at", self.time("t.lock_acquired_at")),
        ];
        let keep = [
            "current_version",
            "lock_id",
            "lock_operation",
            "lock_info",
            "lock_who",
            "lock_version",
            "lock_created",
            "lock_path",
            "lock_holder_kind",
        ];
        let from = format!(
            "tpl_state_heads t JOIN seed_tpl_stack ts ON ts.id = t.stack_id JOIN seed_copy k ON 1 = 1
             LEFT JOIN seed_tpl_run rl ON t.lock_holder_kind = 'run' AND rl.id = t.lock_holder_id
             WHERE {}",
            within(self, "ts.t")
        );
        rows += self.insert("state_heads", &set, &keep, &[], &from)?;

        let set = [
            ("org_id", o.clone()),
            ("stack_id", sid.clone()),
            (
                "writer_id",
                format!(
                    "CASE WHEN rw.id IS NULL THEN t.writer_id ELSE {} END",
                    self.rid("rw")
                ),
            ),
            (
                "token_id",
                format!(
                    "CASE WHEN tk.id IS NULL THEN t.token_id ELSE {} END",
                    self.tid("tk")
                ),
            ),
            ("created_at", self.time("t.created_at")),
        ];
        let keep = [
            "version",
            "serial",
            "lineage",
            "checksum",
            "size",
            "writer_kind",
            "late_write",
            "forced",
            "outputs",
            "body",
            "recovery_reason",
        ];
        let from = format!(
            "tpl_state_versions t JOIN seed_tpl_stack ts ON ts.id = t.stack_id JOIN seed_copy k ON 1 = 1
             LEFT JOIN seed_tpl_run rw ON t.writer_kind = 'run' AND rw.id = t.writer_id
             LEFT JOIN seed_tpl_token tk ON tk.id = t.token_id
             WHERE {} ORDER BY k.m, ts.t, t.version",
            within(self, "ts.t")
        );
        rows += self.insert("state_versions", &set, &keep, &[], &from)?;

        let set = [
            ("org_id", o.clone()),
            ("stack_id", sid.clone()),
            ("since", self.time("t.since")),
            ("last_fire_at", self.time("t.last_fire_at")),
            ("last_fire_run", self.rid_or_null("rf")),
        ];
        let from = format!(
            "tpl_drift_schedules t JOIN seed_tpl_stack ts ON ts.id = t.stack_id JOIN seed_copy k ON 1 = 1
             LEFT JOIN seed_tpl_run rf ON rf.id = t.last_fire_run WHERE {}",
            within(self, "ts.t")
        );
        rows += self.insert(
            "drift_schedules",
            &set,
            &["schedule", "timezone", "next_at", "last_fire_note"],
            &[],
            &from,
        )?;

        // Audit records about a template stack or run, about the copy's.
        let stack_sid = self.sid("COALESCE(ts1.t, ts2.t)");
        let stack_tid = "COALESCE(ts1.id, ts2.id)";
        let run = self.rid("r");
        let set = [
            ("at", self.time("t.at")),
            ("org_id", o.clone()),
            (
                "target",
                format!("CASE WHEN r.id IS NULL THEN 'stack:' || {stack_sid} ELSE 'run:' || {run} END"),
            ),
            (
                "detail",
                format!(
                    "replace(CASE WHEN r.id IS NULL THEN t.detail
                             ELSE replace(t.detail, '\"' || r.id || '\"', '\"' || {run} || '\"') END,
                             '\"' || {stack_tid} || '\"', '\"' || {stack_sid} || '\"')"
                ),
            ),
        ];
        let from = format!(
            "tpl_audit_log t
             LEFT JOIN seed_tpl_stack ts1 ON t.target LIKE 'stack:%' AND ts1.id = substr(t.target, 7)
             LEFT JOIN seed_tpl_run r ON t.target LIKE 'run:%' AND r.id = substr(t.target, 5)
             LEFT JOIN seed_tpl_stack ts2 ON ts2.t = r.t
             JOIN seed_copy k ON 1 = 1
             WHERE (ts1.id IS NOT NULL OR r.id IS NOT NULL) AND {}
             ORDER BY k.m, t.seq",
            within(self, "COALESCE(ts1.t, ts2.t)")
        );
        rows += self.insert(
            "audit_log",
            &set,
            &["actor", "token_id", "action"],
            &["seq"],
            &from,
        )?;
        Ok(rows)
    }
}

/// Per template stack: how many rows of a kind it has (the copies' expected counts).
struct TemplateCounts {
    runs: Vec<i64>,
    versions: Vec<i64>,
    phases: Vec<i64>,
    logs: Vec<i64>,
}

impl TemplateCounts {
    fn of(v: &[i64], n: u64) -> i64 {
        let k = v.len() as u64;
        (0..n).map(|j| v[(j % k) as usize]).sum()
    }
}

struct Copied {
    rows: u64,
    seconds: f64,
    analyze_seconds: f64,
    counts: TemplateCounts,
}

fn copy_all(args: &Args, tpl: &Templates) -> R<Copied> {
    let mut b = Bulk::open(&args.backend)?;
    let k = args.templates as i64;
    let width = args.width();
    let tt = b.text_type();
    let tpl_org = lit(TEMPLATE_ORG);

    // The templates, frozen in temporary tables: the copies read only these.
    let in_runs = format!("run_id IN (SELECT id FROM runs WHERE org_id = {tpl_org})");
    for (table, filter, extra) in [
        ("stacks", format!("org_id = {tpl_org}"), ""),
        ("stack_dependencies", format!("org_id = {tpl_org}"), ""),
        ("runs", format!("org_id = {tpl_org}"), ""),
        ("run_phases", in_runs.clone(), "rowid AS phase_ord, "),
        ("run_logs", in_runs.clone(), ""),
        ("run_holds", in_runs.clone(), ""),
        ("tokens", format!("kind = 'run' AND org_id = {tpl_org}"), ""),
        ("drift_checks", format!("org_id = {tpl_org}"), ""),
        ("approvals", format!("org_id = {tpl_org}"), ""),
        ("state_heads", format!("org_id = {tpl_org}"), ""),
        ("state_versions", format!("org_id = {tpl_org}"), ""),
        ("drift_schedules", format!("org_id = {tpl_org}"), ""),
        ("audit_log", format!("org_id = {tpl_org}"), ""),
    ] {
        b.batch(&format!(
            "CREATE TEMP TABLE tpl_{table} AS SELECT {extra}* FROM {table} WHERE {filter}"
        ))?;
    }
    // What the copies cannot map: none of it may be in the templates.
    for (what, sql) in [
        ("runs from a delivery", "SELECT COUNT(*) FROM tpl_runs WHERE delivery_id IS NOT NULL"),
        ("runs with consumed outputs", "SELECT COUNT(*) FROM tpl_runs WHERE consumed IS NOT NULL"),
        ("runs that waited for a lock", "SELECT COUNT(*) FROM tpl_runs WHERE lock_waits IS NOT NULL OR blocked_by IS NOT NULL"),
        ("plan-run approvals", "SELECT COUNT(*) FROM tpl_approvals WHERE subject_kind <> 'stack_run'"),
        ("stacks with two upstreams", "SELECT COUNT(*) FROM (SELECT stack_id FROM tpl_stack_dependencies GROUP BY stack_id HAVING COUNT(*) > 1) x"),
    ] {
        let n = b.count(sql)?;
        if n != 0 {
            return Err(format!("the templates have {n} {what}, which seed cannot copy").into());
        }
    }

    // Helper tables: template stacks (number, upstream), runs and tokens (ordinals).
    b.batch(&format!(
        "CREATE TEMP TABLE seed_tpl_stack (id {tt} PRIMARY KEY, t BIGINT NOT NULL UNIQUE, up BIGINT, up_id {tt});
         CREATE TEMP TABLE seed_tpl_run (id {tt} PRIMARY KEY, ord BIGINT NOT NULL, t BIGINT NOT NULL, created_at BIGINT NOT NULL);
         CREATE TEMP TABLE seed_tpl_token (id {tt} PRIMARY KEY, ord BIGINT NOT NULL);
         CREATE TEMP TABLE seed_copy (m BIGINT PRIMARY KEY, c BIGINT NOT NULL, shift BIGINT NOT NULL);"
    ))?;
    let deps: HashMap<String, String> = b
        .texts("SELECT stack_id, upstream FROM tpl_stack_dependencies")?
        .into_iter()
        .filter_map(|r| Some((r.first()?.clone()?, r.get(1)?.clone()?)))
        .collect();
    let stacks: Vec<String> = b
        .texts("SELECT id FROM tpl_stacks ORDER BY id")?
        .into_iter()
        .filter_map(|r| r.into_iter().next().flatten())
        .collect();
    if stacks.len() as i64 != k {
        return Err(format!("{} template stacks, expected {k}", stacks.len()).into());
    }
    let number: HashMap<&str, usize> = stacks
        .iter()
        .enumerate()
        .map(|(i, s)| (s.as_str(), i))
        .collect();
    let mut values = Vec::new();
    for (i, s) in stacks.iter().enumerate() {
        let (up, up_id) = match deps.get(s) {
            Some(u) => (
                number
                    .get(u.as_str())
                    .ok_or("an upstream outside the templates")?
                    .to_string(),
                lit(u),
            ),
            None => ("NULL".into(), "NULL".into()),
        };
        values.push(format!("({}, {i}, {up}, {up_id})", lit(s)));
    }
    insert_values(&mut b, "seed_tpl_stack", &values)?;
    let runs = b.texts(
        "SELECT id, stack_id, CAST(created_at AS TEXT) FROM tpl_runs ORDER BY created_at, id",
    )?;
    let mut values = Vec::new();
    for (ord, r) in runs.iter().enumerate() {
        let (Some(Some(id)), Some(Some(stack)), Some(Some(at))) = (r.first(), r.get(1), r.get(2))
        else {
            return Err("a template run without id, stack or time".into());
        };
        let t = number
            .get(stack.as_str())
            .ok_or("a run of no template stack")?;
        values.push(format!("({}, {ord}, {t}, {at})", lit(id)));
    }
    insert_values(&mut b, "seed_tpl_run", &values)?;
    let tokens = b.texts("SELECT id FROM tpl_tokens ORDER BY created_at, id")?;
    let values: Vec<String> = tokens
        .iter()
        .enumerate()
        .filter_map(|(ord, r)| Some(format!("({}, {ord})", lit(r.first()?.as_deref()?))))
        .collect();
    insert_values(&mut b, "seed_tpl_token", &values)?;
    if b.d == Dialect::Postgres {
        b.batch("ANALYZE seed_tpl_stack; ANALYZE seed_tpl_run; ANALYZE seed_tpl_token;")?;
    }

    let per_stack = |b: &mut Bulk, sql: &str| -> R<Vec<i64>> {
        let mut v = vec![0i64; k as usize];
        for r in b.texts(sql)? {
            if let (Some(Some(s)), Some(Some(n))) = (r.first(), r.get(1)) {
                if let Some(i) = number.get(s.as_str()) {
                    v[*i] = n.parse()?;
                }
            }
        }
        Ok(v)
    };
    let counts = TemplateCounts {
        runs: per_stack(&mut b, "SELECT stack_id, CAST(COUNT(*) AS TEXT) FROM tpl_runs GROUP BY stack_id")?,
        versions: per_stack(&mut b, "SELECT stack_id, CAST(COUNT(*) AS TEXT) FROM tpl_state_versions GROUP BY stack_id")?,
        phases: per_stack(&mut b, "SELECT r.stack_id, CAST(COUNT(*) AS TEXT) FROM tpl_run_phases p JOIN tpl_runs r ON r.id = p.run_id GROUP BY r.stack_id")?,
        logs: per_stack(&mut b, "SELECT r.stack_id, CAST(COUNT(*) AS TEXT) FROM tpl_run_logs l JOIN tpl_runs r ON r.id = l.run_id GROUP BY r.stack_id")?,
    };

    let nr = (runs.len() as i64).max(1);
    let nt = (tokens.len() as i64).max(1);
    let targets = args.targets();
    let most_blocks = targets
        .iter()
        .map(|(_, n)| (*n as i64 + k - 1) / k)
        .max()
        .unwrap_or(1);
    if most_blocks >= BLOCKS_PER_ORG {
        return Err(format!("{most_blocks} copies of each template: give more --templates").into());
    }
    let top_c = (targets.len() as i64 + 1) * BLOCKS_PER_ORG;
    if top_c.saturating_mul(nr.max(nt)) >= H40 {
        return Err("too many template runs for the id space: give fewer --templates".into());
    }
    let wall = (tpl.end_ms - tpl.start_ms).max(1);
    let stretch = (HISTORY_MS / wall).max(1);
    let block_shift = (SPREAD_MS / most_blocks.max(1)).max(1);
    let mut c = Copier {
        b: &mut b,
        k,
        width,
        nr,
        nt,
        t0: tpl.end_ms,
        stretch,
        hosted: tpl.hosted_runners,
    };

    let started = Instant::now();
    let mut total = 0u64;
    let blocks_per_chunk = ((args.chunk as i64 + k - 1) / k).max(1);
    for (o, (org, n)) in targets.iter().enumerate() {
        let o = o as i64 + 1;
        let blocks = (*n as i64 + k - 1) / k;
        let org_started = Instant::now();
        let mut org_rows = 0u64;
        let mut m0 = 0;
        while m0 < blocks {
            let m1 = (m0 + blocks_per_chunk).min(blocks);
            let values: Vec<String> = (m0..m1)
                .map(|m| {
                    format!(
                        "({m}, {}, {})",
                        o * BLOCKS_PER_ORG + m,
                        m * block_shift + o * 977
                    )
                })
                .collect();
            c.b.batch("BEGIN")?;
            c.b.exec("DELETE FROM seed_copy")?;
            insert_values(c.b, "seed_copy", &values)?;
            let rows = c.copy_chunk(org, *n)?;
            c.b.batch("COMMIT")?;
            org_rows += rows;
            total += rows;
            let done = ((m1 * k) as u64).min(*n);
            let secs = org_started.elapsed().as_secs_f64();
            log(format!(
                "copies: {org}: {done}/{n} stacks, {org_rows} rows in {secs:.1}s ({} rows/s, {} stacks/s)",
                per_s(org_rows, secs),
                per_s(done, secs)
            ));
            m0 = m1;
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    log(format!(
        "copies: {total} rows in {seconds:.1}s ({} rows/s)",
        per_s(total, seconds)
    ));

    // Counts against the templates'.
    let all_orgs = targets.iter().map(|(_, n)| *n).collect::<Vec<_>>();
    let expect = |v: &[i64]| -> i64 {
        all_orgs
            .iter()
            .map(|n| TemplateCounts::of(v, *n))
            .sum::<i64>()
            + v.iter().sum::<i64>()
    };
    for (table, v) in [
        ("runs", &counts.runs),
        ("state_versions", &counts.versions),
        ("run_phases", &counts.phases),
        ("run_logs", &counts.logs),
    ] {
        let found = b.count(&format!("SELECT COUNT(*) FROM {table}"))?;
        let want = expect(v);
        if found != want {
            return Err(format!("{table}: {found} rows, expected {want}").into());
        }
        log(format!("check: {table}: {found} rows, as expected"));
    }

    let analyze_started = Instant::now();
    match b.d {
        // As autovacuum would have by the time a store grew this large: statistics and
        // the visibility map (index-only scans) up to date.
        Dialect::Postgres => b.batch("VACUUM (ANALYZE)")?,
        // The server never analyzes SQLite; fold the WAL in as its close does.
        Dialect::Sqlite => b.batch("PRAGMA wal_checkpoint(TRUNCATE)")?,
    }
    let analyze_seconds = analyze_started.elapsed().as_secs_f64();
    if b.d == Dialect::Postgres {
        log(format!("VACUUM (ANALYZE) in {analyze_seconds:.1}s"));
    }
    Ok(Copied {
        rows: total,
        seconds,
        analyze_seconds,
        counts,
    })
}

fn insert_values(b: &mut Bulk, table: &str, values: &[String]) -> R<()> {
    for chunk in values.chunks(500) {
        b.exec(&format!("INSERT INTO {table} VALUES {}", chunk.join(", ")))?;
    }
    Ok(())
}

// --- reading it back through the Store API ------------------------------------------------

async fn count_stacks(store: &dyn Store, org: &str) -> R<u64> {
    let mut n = 0;
    let mut after: Option<String> = None;
    loop {
        let page = store.list_stacks(org, after.as_deref(), 1000).await?;
        n += page.len() as u64;
        match page.last() {
            Some(last) if page.len() == 1000 => after = Some(last.spec.id.to_string()),
            _ => return Ok(n),
        }
    }
}

/// The sampled stack numbers of org `default`: spread over the whole range.
fn sample_numbers(n: u64, want: u64) -> Vec<u64> {
    let want = want.min(n);
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    let mut i = 0u64;
    while (out.len() as u64) < want && i < want * 4 {
        let j = (h40(i as i64) as u64) % n;
        if seen.insert(j) {
            out.push(j);
        }
        i += 1;
    }
    out
}

async fn verify(args: &Args, copied: &Copied) -> R<f64> {
    let started = Instant::now();
    let store = open_store(&args.backend).await?;
    let width = args.width();
    let k = args.templates;
    let mut orgs = args.targets();
    orgs.push((TEMPLATE_ORG.to_string(), k));
    for (org, n) in &orgs {
        let found = count_stacks(store.as_ref(), org).await?;
        if found != *n {
            return Err(format!("org {org}: {found} stacks listed, expected {n}").into());
        }
    }
    let runners = store.list_runners(BIG_ORG).await?.len();
    if runners != args.runners as usize {
        return Err(format!(
            "{runners} runners listed in {BIG_ORG}, expected {}",
            args.runners
        )
        .into());
    }

    let mut samples = String::new();
    let sample = sample_numbers(args.stacks, args.samples);
    let mut checked_runs = 0;
    for (i, j) in sample.iter().enumerate() {
        let t = (j % k) as usize;
        let id = stack_id(*j, width);
        let deep = i < 100;
        let stack = store
            .get_stack(BIG_ORG, &id)
            .await?
            .ok_or_else(|| format!("stack {id} does not read back"))?;
        samples.push_str(&format!("stack {id}\n"));
        let runs = store.list_runs(BIG_ORG, Some(&id), None, 1000).await?;
        if runs.len() as i64 != copied.counts.runs[t] {
            return Err(format!(
                "stack {id}: {} runs, expected {}",
                runs.len(),
                copied.counts.runs[t]
            )
            .into());
        }
        for r in &runs {
            samples.push_str(&format!("run {}\n", r.id));
            let stamp = i64::from_str_radix(r.id.get(4..15).unwrap_or(""), 16)?;
            if stamp != r.created_at.timestamp_millis() || r.stack != id {
                return Err(format!("run {} of {id}: id and record disagree", r.id).into());
            }
            if deep {
                let again = store
                    .get_run(&r.id)
                    .await?
                    .ok_or("a listed run does not read back")?;
                let phases = store.run_phases(&again.id).await?;
                if phases.is_empty() || phases.windows(2).any(|w| w[0].started_at > w[1].started_at)
                {
                    return Err(format!("run {}: phases missing or out of order", r.id).into());
                }
                let ran = phases.iter().any(|p| p.state == RunState::Planning);
                if ran && store.read_logs(&again.id, None, 100).await?.is_empty() {
                    return Err(format!("run {}: no log", r.id).into());
                }
                if let Some(up) = &again.retry_of {
                    store
                        .get_run(up)
                        .await?
                        .ok_or("a retry of a run that is not there")?;
                }
                checked_runs += 1;
            }
        }
        let versions = store.list_state_versions(BIG_ORG, &id, None, 1000).await?;
        if versions.len() as i64 != copied.counts.versions[t] {
            return Err(format!(
                "stack {id}: {} state versions, expected {}",
                versions.len(),
                copied.counts.versions[t]
            )
            .into());
        }
        for v in &versions {
            samples.push_str(&format!("version {id} {}\n", v.version));
        }
        if deep {
            for v in &versions {
                let (meta, body) = store
                    .state_version(BIG_ORG, &id, Some(v.version))
                    .await?
                    .ok_or("a listed state version does not read back")?;
                if hex::encode(Sha256::digest(&body)) != meta.checksum {
                    return Err(
                        format!("stack {id} version {}: checksum mismatch", v.version).into(),
                    );
                }
                if let Writer::Run(run) = &meta.writer {
                    store
                        .get_run(run)
                        .await?
                        .ok_or("a state writer run that is not there")?;
                }
            }
            let head = store.state_head(BIG_ORG, &id).await?;
            if head.current.map(|c| c.version) != versions.first().map(|v| v.version) {
                return Err(format!("stack {id}: the current version is not the newest").into());
            }
            let drift = store.drift_schedules(Some(BIG_ORG), Some(&id)).await?;
            if drift.len() != usize::from(stack.spec.drift_detection.is_some()) {
                return Err(format!("stack {id}: drift schedule does not match the stack").into());
            }
            for d in &stack.spec.depends_on {
                store
                    .get_stack(BIG_ORG, d.stack.as_str())
                    .await?
                    .ok_or("an upstream stack that is not there")?;
            }
        }
    }
    if let Some(path) = &args.samples_file {
        std::fs::write(path, samples)?;
    }
    store.close().await;
    let secs = started.elapsed().as_secs_f64();
    log(format!(
        "check: every org's stacks listed; {} sampled stacks read back, {checked_runs} runs in depth ({secs:.1}s)",
        sample.len()
    ));
    Ok(secs)
}

fn main() {
    if let Err(e) = real_main() {
        eprintln!("seed: {e}");
        std::process::exit(1);
    }
}

fn real_main() -> R<()> {
    let args = Args::parse(std::env::args().skip(1))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let started = Instant::now();
    let tpl = rt.block_on(make_templates(&args))?;
    let template_seconds = started.elapsed().as_secs_f64();
    let copied = copy_all(&args, &tpl)?;
    let verify_seconds = rt.block_on(verify(&args, &copied))?;
    let total = started.elapsed().as_secs_f64();
    let runs = TemplateCounts::of(&copied.counts.runs, args.stacks);
    let versions = TemplateCounts::of(&copied.counts.versions, args.stacks);
    log(format!(
        "done: {} stacks, {runs} runs, {versions} state versions in org {BIG_ORG} in {total:.1}s \
         ({:.1}s per 1,000 stacks with their rows)",
        args.stacks,
        total * 1000.0 / args.stacks.max(1) as f64
    ));
    let backend = match args.backend {
        Backend::Sqlite(_) => "sqlite",
        Backend::Postgres(_) => "postgres",
    };
    println!(
        "{}",
        json!({
            "backend": backend,
            "stacks": args.stacks,
            "runs": runs,
            "state_versions": versions,
            "runners": args.runners,
            "small_orgs": args.small_orgs,
            "small_org_stacks": args.small_org_stacks,
            "templates": args.templates,
            "rows_copied": copied.rows,
            "seconds": {
                "templates": round1(template_seconds),
                "copies": round1(copied.seconds),
                "vacuum_analyze": round1(copied.analyze_seconds),
                "verify": round1(verify_seconds),
                "total": round1(total),
            },
            "rows_per_second": (copied.rows as f64 / copied.seconds.max(1e-9)).round(),
            "admin_token_id": tpl.admin_token,
        })
    );
    Ok(())
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}
