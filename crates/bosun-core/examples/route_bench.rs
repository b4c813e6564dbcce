//! Routing one push against many stacks of one repository: Bosun's `vcs::route` (a prefix
//! trie of the watch paths, each changed file walks it once) against the naive peer (every
//! stack checks every changed file against each of its watch paths with `path_matches`,
//! what a per-project `when_modified` filter in the style of Atlantis costs).
//!
//! ```sh
//! cargo run --release -p bosun-core --example route_bench -- \
//!     [--stacks 5000] [--files 1000] [--iterations 200] [--warmup 20] [--write-layout DIR]
//! ```
//!
//! One *decision* is one whole push routed against all the stacks. The layout is a
//! deterministic monorepo (no randomness between runs):
//!
//! - stack `i` (id `svc-NNNN`) lives at `teams/tTT/svc/sNNNN` (100 stacks per team) and
//!   watches two more paths: a shared module `modules/<kind>/mMMM` (one module per 10
//!   stacks, spread across teams) and its team's environment folder
//!   `teams/tTT/shared/<env>` (one env of three);
//! - a push touches `--files` files: 2 files in each of 15 % as many stacks' own folders,
//!   4 files in each of 1.2 % as many modules, 2 files in one team environment folder,
//!   and the rest where no stack looks (docs, CI, scripts, tests, team notes) or just
//!   beside a watch path (`sNNNN-legacy/`, `mMMM-v2/`: a prefix of the string but not of
//!   the path). About 6 % of the stacks trigger.
//!
//! Two such pushes (`a` and `b`, different seeds) are routed alternately. Both matchers
//! must give identical verdicts; the program fails otherwise.
//!
//! `--write-layout DIR` also writes the layout for `bench/vcs.sh` (the end-to-end run):
//! `stacks.tsv` (id, path, watch paths; tab-separated), `push-a.txt` and `push-b.txt`
//! (the changed files, sorted, one a line) and `triggered-a.txt` / `triggered-b.txt`
//! (the ids of the stacks each push triggers).
//!
//! Output: a few readable lines, then one JSON line (times in microseconds).

use std::collections::BTreeSet;
use std::error::Error;
use std::fmt::Write as _;
use std::hint::black_box;
use std::path::PathBuf;
use std::time::Instant;

use bosun_core::stack::{StackInput, StackSpec};
use bosun_core::vcs::{path_matches, route, watched_prefixes, Ignored, PathIndex, Verdict};

type Result<T> = std::result::Result<T, Box<dyn Error>>;

const BRANCH: &str = "main";
const REPOSITORY: &str = "github:acme/mono";
const STACKS_PER_TEAM: usize = 100;
const STACKS_PER_MODULE: usize = 10;
const MODULE_KINDS: [&str; 5] = ["network", "database", "compute", "observability", "iam"];
const ENVS: [&str; 3] = ["dev", "staging", "prod"];

struct Args {
    stacks: usize,
    files: usize,
    iterations: usize,
    warmup: usize,
    write_layout: Option<PathBuf>,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        stacks: 5000,
        files: 1000,
        iterations: 200,
        warmup: 20,
        write_layout: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--stacks" => args.stacks = value()?.parse()?,
            "--files" => args.files = value()?.parse()?,
            "--iterations" => args.iterations = value()?.parse()?,
            "--warmup" => args.warmup = value()?.parse()?,
            "--write-layout" => args.write_layout = Some(PathBuf::from(value()?)),
            "-h" | "--help" => {
                println!(
                    "route_bench [--stacks N] [--files N] [--iterations N] [--warmup N] \
                     [--write-layout DIR]"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?} (see --help)").into()),
        }
    }
    if args.stacks == 0 || args.files == 0 || args.iterations == 0 {
        return Err("--stacks, --files and --iterations must be at least 1".into());
    }
    Ok(args)
}

/// splitmix64: a small deterministic generator, so every run routes the same push.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// The monorepo: where each stack lives and what it watches.
struct Layout {
    stacks: usize,
    width: usize,
}

impl Layout {
    fn new(stacks: usize) -> Self {
        Layout {
            stacks,
            width: stacks.saturating_sub(1).to_string().len().max(4),
        }
    }

    fn modules(&self) -> usize {
        self.stacks.div_ceil(STACKS_PER_MODULE)
    }

    fn team_of(&self, i: usize) -> usize {
        i / STACKS_PER_TEAM
    }

    fn teams(&self) -> usize {
        self.stacks.div_ceil(STACKS_PER_TEAM)
    }

    fn id(&self, i: usize) -> String {
        format!("svc-{i:0w$}", w = self.width)
    }

    fn path(&self, i: usize) -> String {
        format!("teams/t{:02}/svc/s{i:0w$}", self.team_of(i), w = self.width)
    }

    fn module(&self, m: usize) -> String {
        format!("modules/{}/m{m:03}", MODULE_KINDS[m % MODULE_KINDS.len()])
    }

    fn team_env(&self, team: usize, env: usize) -> String {
        format!("teams/t{team:02}/shared/{}", ENVS[env % ENVS.len()])
    }

    fn watch_paths(&self, i: usize) -> Vec<String> {
        vec![
            self.module(i % self.modules()),
            self.team_env(self.team_of(i), i % ENVS.len()),
        ]
    }

    fn specs(&self) -> Result<Vec<StackSpec>> {
        (0..self.stacks)
            .map(|i| {
                StackSpec::from_input(StackInput {
                    id: self.id(i),
                    repository: REPOSITORY.into(),
                    branch: Some(BRANCH.into()),
                    path: Some(self.path(i)),
                    watch_paths: self.watch_paths(i),
                    ..StackInput::default()
                })
                .map_err(|e| format!("stack {}: {e}", self.id(i)).into())
            })
            .collect()
    }

    /// The changed files of one push, sorted (as the server's mirror diff gives them).
    fn push(&self, files: usize, seed: u64) -> Vec<String> {
        let mut rng = Rng(seed);
        let mut out = BTreeSet::new();
        // Stacks' own folders: 15 % of the files' count in stacks, 2 files each.
        let own = (files * 15 / 100).clamp(1, self.stacks);
        let mut picked = BTreeSet::new();
        while picked.len() < own && out.len() + 2 <= files {
            let i = rng.below(self.stacks);
            if picked.insert(i) {
                out.insert(format!("{}/main.tf", self.path(i)));
                out.insert(format!("{}/variables.tf", self.path(i)));
            }
        }
        // Shared modules: 1.2 % of the files' count in modules, 4 files each.
        let modules = (files * 12 / 1000).clamp(1, self.modules());
        let mut picked = BTreeSet::new();
        while picked.len() < modules && out.len() + 4 <= files {
            let m = rng.below(self.modules());
            if picked.insert(m) {
                for f in ["main.tf", "variables.tf", "outputs.tf", "versions.tf"] {
                    out.insert(format!("{}/{f}", self.module(m)));
                }
            }
        }
        // One team's environment folder.
        if out.len() + 2 <= files {
            let dir = self.team_env(rng.below(self.teams()), rng.below(ENVS.len()));
            out.insert(format!("{dir}/terraform.tfvars"));
            out.insert(format!("{dir}/backend.hcl"));
        }
        // Everything else: where no stack looks, or right beside a watch path.
        let mut k = 0usize;
        while out.len() < files {
            let team = rng.below(self.teams());
            let file = match k % 8 {
                0 => format!("docs/{}/page-{k:05}.md", ENVS[k % ENVS.len()]),
                1 => format!("teams/t{team:02}/docs/note-{k:05}.md"),
                2 => format!("{}-legacy/main.tf", self.path(rng.below(self.stacks))),
                3 => format!("{}-v2/main.tf", self.module(rng.below(self.modules()))),
                4 => format!(".github/workflows/ci-{k:05}.yml"),
                5 => format!("scripts/tool-{k:05}.sh"),
                6 => format!("teams/t{team:02}/shared/notes-{k:05}.md"),
                _ => format!("tests/integration/case_{k:05}.py"),
            };
            out.insert(file);
            k += 1;
        }
        out.into_iter().collect()
    }
}

/// The peer: every stack compares every changed file with each of its watch paths (the
/// stack's own path and its watch paths), stopping at the first file that matches. The
/// verdicts are built exactly as `route` builds them.
fn naive_route(
    stacks: &[&StackSpec],
    branch: &str,
    changed: &[String],
    pull_request_base: bool,
) -> Vec<Verdict> {
    stacks
        .iter()
        .map(|spec| {
            if spec.branch != branch {
                let tracked = spec.branch.clone();
                return Verdict::Ignored(if pull_request_base {
                    Ignored::BaseNotTracked {
                        tracked,
                        base: branch.to_string(),
                    }
                } else {
                    Ignored::BranchNotTracked {
                        tracked,
                        pushed: branch.to_string(),
                    }
                });
            }
            let prefixes = watched_prefixes(spec);
            for file in changed {
                // Of the stack's prefixes holding the file (nested, so the shortest is
                // the shallowest), report the shallowest, as the trie does.
                let mut best: Option<&str> = None;
                for p in &prefixes {
                    let p = p.as_str();
                    if path_matches(p, file) && best.is_none_or(|b| p.len() < b.len()) {
                        best = Some(p);
                    }
                }
                if let Some(prefix) = best {
                    return Verdict::Triggered {
                        file: file.clone(),
                        prefix: prefix.to_string(),
                    };
                }
            }
            Verdict::Ignored(Ignored::NoWatchPathTouched {
                watched: prefixes
                    .into_iter()
                    .map(|p| p.as_str().to_string())
                    .collect(),
                changed: changed.len(),
            })
        })
        .collect()
}

/// Builds the trie as `route` does, alone: the part of a decision that does not depend
/// on the push.
fn build_index(stacks: &[&StackSpec], branch: &str) -> PathIndex<usize> {
    let mut index = PathIndex::new();
    for (i, spec) in stacks.iter().enumerate() {
        if spec.branch == branch {
            for prefix in watched_prefixes(spec) {
                index.insert(prefix.as_str(), i);
            }
        }
    }
    index
}

struct Stats {
    median: f64,
    p99: f64,
    mean: f64,
    min: f64,
    max: f64,
}

/// Nearest-rank percentiles of durations in microseconds.
fn stats(mut v: Vec<f64>) -> Stats {
    v.sort_by(f64::total_cmp);
    let rank = |q: f64| {
        let n = v.len();
        let k = ((q * n as f64).ceil() as usize).clamp(1, n);
        v[k - 1]
    };
    Stats {
        median: rank(0.5),
        p99: rank(0.99),
        mean: v.iter().sum::<f64>() / v.len() as f64,
        min: v.first().copied().unwrap_or(0.0),
        max: v.last().copied().unwrap_or(0.0),
    }
}

fn micros(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e6
}

fn json_stats(s: &Stats) -> String {
    format!(
        "{{\"median_us\": {:.1}, \"p99_us\": {:.1}, \"mean_us\": {:.1}, \"min_us\": {:.1}, \"max_us\": {:.1}}}",
        s.median, s.p99, s.mean, s.min, s.max
    )
}

fn triggered_ids(specs: &[&StackSpec], verdicts: &[Verdict]) -> Vec<String> {
    specs
        .iter()
        .zip(verdicts)
        .filter(|(_, v)| matches!(v, Verdict::Triggered { .. }))
        .map(|(s, _)| s.id.to_string())
        .collect()
}

fn write_layout(
    dir: &PathBuf,
    layout: &Layout,
    pushes: &[(&str, &Vec<String>, Vec<String>)],
) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut stacks = String::new();
    for i in 0..layout.stacks {
        writeln!(
            stacks,
            "{}\t{}\t{}",
            layout.id(i),
            layout.path(i),
            layout.watch_paths(i).join("\t")
        )?;
    }
    std::fs::write(dir.join("stacks.tsv"), stacks)?;
    for (name, files, triggered) in pushes {
        let mut text = files.join("\n");
        text.push('\n');
        std::fs::write(dir.join(format!("push-{name}.txt")), text)?;
        let mut text = triggered.join("\n");
        text.push('\n');
        std::fs::write(dir.join(format!("triggered-{name}.txt")), text)?;
    }
    Ok(())
}

fn main() -> Result<()> {
    let args = parse_args()?;
    let layout = Layout::new(args.stacks);
    let owned = layout.specs()?;
    let specs: Vec<&StackSpec> = owned.iter().collect();
    let push_a = layout.push(args.files, 0x5eed_000a);
    let push_b = layout.push(args.files, 0x5eed_000b);
    let prefixes: usize = specs.iter().map(|s| watched_prefixes(s).len()).sum();

    // Same verdicts from both, for both pushes, before anything is timed.
    let mut triggered = Vec::new();
    for (name, push) in [("a", &push_a), ("b", &push_b)] {
        let bosun = route(&specs, BRANCH, push, false);
        let naive = naive_route(&specs, BRANCH, push, false);
        if bosun != naive {
            let first = bosun.iter().zip(&naive).position(|(x, y)| x != y);
            return Err(format!(
                "push {name}: the trie and the naive matcher disagree (first at stack {first:?})"
            )
            .into());
        }
        triggered.push((name, push, triggered_ids(&specs, &bosun)));
    }
    if let Some(dir) = &args.write_layout {
        write_layout(dir, &layout, &triggered)?;
    }

    let pushes = [&push_a, &push_b];
    for k in 0..args.warmup {
        let push = pushes[k % 2];
        black_box(route(&specs, BRANCH, push, false));
        black_box(naive_route(&specs, BRANCH, push, false));
        black_box(build_index(&specs, BRANCH));
    }
    let (mut trie, mut naive, mut index) = (Vec::new(), Vec::new(), Vec::new());
    for k in 0..args.iterations {
        let push = pushes[k % 2];
        // Alternate which goes first, so neither always runs on a warmer cache.
        let run_trie = |out: &mut Vec<f64>| -> usize {
            let t = Instant::now();
            let v = black_box(route(black_box(&specs), BRANCH, black_box(push), false));
            out.push(micros(t));
            v.len()
        };
        let run_naive = |out: &mut Vec<f64>| -> usize {
            let t = Instant::now();
            let v = black_box(naive_route(
                black_box(&specs),
                BRANCH,
                black_box(push),
                false,
            ));
            out.push(micros(t));
            v.len()
        };
        let (n1, n2) = if k % 4 < 2 {
            (run_trie(&mut trie), run_naive(&mut naive))
        } else {
            let n2 = run_naive(&mut naive);
            (run_trie(&mut trie), n2)
        };
        if n1 != specs.len() || n2 != specs.len() {
            return Err("a matcher returned the wrong number of verdicts".into());
        }
        let t = Instant::now();
        black_box(build_index(black_box(&specs), BRANCH));
        index.push(micros(t));
    }
    let (trie, naive, index) = (stats(trie), stats(naive), stats(index));
    let ratio_median = naive.median / trie.median;
    let ratio_p99 = naive.p99 / trie.p99;

    println!(
        "{} stacks ({} watch prefixes) in one repository; push a: {} files, {} stacks triggered; \
         push b: {} files, {} triggered; {} iterations after {} warm-up",
        specs.len(),
        prefixes,
        push_a.len(),
        triggered[0].2.len(),
        push_b.len(),
        triggered[1].2.len(),
        args.iterations,
        args.warmup
    );
    println!(
        "{:<34} {:>12} {:>12} {:>12}",
        "time per routing decision", "median", "p99", "mean"
    );
    for (name, s) in [
        ("Bosun route() (trie)", &trie),
        ("  of which building the trie", &index),
        ("naive peer (every file x stack)", &naive),
    ] {
        println!(
            "{name:<34} {:>9.3} ms {:>9.3} ms {:>9.3} ms",
            s.median / 1e3,
            s.p99 / 1e3,
            s.mean / 1e3
        );
    }
    println!("naive / trie: {ratio_median:.1}x at the median, {ratio_p99:.1}x at p99");
    println!(
        "{{\"stacks\": {}, \"prefixes\": {}, \"files\": {}, \"triggered_a\": {}, \"triggered_b\": {}, \
         \"iterations\": {}, \"warmup\": {}, \"trie\": {}, \"trie_index_build\": {}, \"naive\": {}, \
         \"ratio_median\": {:.2}, \"ratio_p99\": {:.2}}}",
        specs.len(),
        prefixes,
        push_a.len(),
        triggered[0].2.len(),
        triggered[1].2.len(),
        args.iterations,
        args.warmup,
        json_stats(&trie),
        json_stats(&index),
        json_stats(&naive),
        ratio_median,
        ratio_p99
    );
    Ok(())
}
