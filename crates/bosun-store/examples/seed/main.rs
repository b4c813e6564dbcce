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

mod args;
mod copies;
mod templates;
mod verify;

use args::*;
use copies::*;
use templates::*;
use verify::*;

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
    rt.block_on(settle(&args))?;
    let analyze_seconds = analyze(&args)?;
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
                "vacuum_analyze": round1(analyze_seconds),
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
