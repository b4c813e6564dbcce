//! Policy evaluation the ways Bosun has done it, side by side on one machine in one run:
//! the `.rego` files of a folder and one input document, decided RUNS times each way,
//! the ways interleaved (in turn, starting from a different one each round).
//!
//! - `one set`: all the files as ONE set, `from_policies` + `decide` (what
//!   `bosun policy eval` does);
//! - `sets, before`: each file its own set, as the server evaluated an org's policies
//!   before the shared input — a copy of that code (parse each file to check it, then per
//!   decision: the input written out to a string for the size check, copied and
//!   converted, the files parsed again);
//! - `sets, decide`: each file its own set, `from_policies` + `decide(&json)` (this code:
//!   the input checked and converted once per set);
//! - `sets, shared input`: one `Input::new`, then each file its own set,
//!   `from_policies` + `decide_input` (the server's path now);
//! - `sets, built only`: each file its own set, `from_policies` and no decision (what
//!   parsing the files costs: each decision above parses them once more).
//!
//! Every way builds its sets inside the timing, as the server does on every run (a
//! policy's files are read at each evaluation). Prints a Markdown table (milliseconds per
//! decision of all the files) and a JSON line.
//!
//! ```sh
//! cargo run --release -p bosun-policy --example bench_sets -- DIR INPUT.json [RUNS]
//! ```
//! `bench/policy.sh` generates the files and the input and runs this.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::Instant;

use bosun_policy::{Decision, Input, Limits, Policy, PolicySet};

/// The messages of all the sets' decisions, counted (deny, warn, require_approval,
/// errors).
type Counts = [usize; 4];

fn counts(decisions: &[Decision]) -> Counts {
    decisions.iter().fold([0; 4], |c, d| {
        [
            c[0] + d.deny.len(),
            c[1] + d.warn.len(),
            c[2] + d.require_approval.len(),
            c[3] + d.errors.len(),
        ]
    })
}

const WAYS: [&str; 5] = [
    "one set (`bosun policy eval`)",
    "sets, before (each `decide(&json)`, the code before)",
    "sets, `decide(&json)` (this code)",
    "sets, shared input (`Input::new` once + `decide_input`)",
    "sets, built only (`from_policies`, no decision)",
];

fn one_way(way: usize, files: &[Policy], document: &serde_json::Value) -> Counts {
    let limits = Limits::default();
    match way {
        0 => {
            let set = PolicySet::from_policies(files.to_vec(), limits).unwrap();
            counts(&[set.decide(document).unwrap()])
        }
        1 => {
            let decisions: Vec<Decision> = files
                .iter()
                .map(|f| before::decide(std::slice::from_ref(f), limits, document))
                .collect();
            counts(&decisions)
        }
        2 => {
            let decisions: Vec<Decision> = files
                .iter()
                .map(|f| {
                    PolicySet::from_policies(vec![f.clone()], limits)
                        .and_then(|set| set.decide(document))
                        .unwrap()
                })
                .collect();
            counts(&decisions)
        }
        3 => {
            let input = Input::new(document, &limits).unwrap();
            let decisions: Vec<Decision> = files
                .iter()
                .map(|f| {
                    PolicySet::from_policies(vec![f.clone()], limits)
                        .and_then(|set| set.decide_input(&input))
                        .unwrap()
                })
                .collect();
            counts(&decisions)
        }
        _ => {
            for f in files {
                PolicySet::from_policies(vec![f.clone()], limits).unwrap();
            }
            [0; 4]
        }
    }
}

fn quantile(sorted: &[f64], p: f64) -> f64 {
    let i = (p / 100.0 * (sorted.len() - 1) as f64).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (dir, input) = match (args.first(), args.get(1)) {
        (Some(d), Some(i)) => (PathBuf::from(d), PathBuf::from(i)),
        _ => {
            eprintln!("usage: bench_sets DIR INPUT.json [RUNS]");
            std::process::exit(2);
        }
    };
    let runs: usize = args.get(2).map_or(100, |r| r.parse().unwrap());
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rego"))
        .collect();
    paths.sort();
    let files: Vec<Policy> = paths
        .iter()
        .map(|p| Policy {
            path: p.display().to_string(),
            text: std::fs::read_to_string(p).unwrap(),
        })
        .collect();
    let document: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&input).unwrap()).unwrap();

    // Every way that decides must say the same; the first round also warms up (not
    // timed).
    let said: Vec<Counts> = (0..WAYS.len())
        .map(|w| one_way(w, &files, &document))
        .collect();
    let deciding = WAYS.len() - 1;
    assert!(said[..deciding].iter().all(|c| *c == said[0]), "{said:?}");

    let mut times = vec![Vec::with_capacity(runs); WAYS.len()];
    for round in 0..runs {
        for k in 0..WAYS.len() {
            let way = (round + k) % WAYS.len();
            let started = Instant::now();
            let c = one_way(way, &files, &document);
            times[way].push(started.elapsed().as_secs_f64() * 1000.0);
            assert_eq!(c, said[way]);
        }
    }

    let [deny, warn, approval, errors] = said[0];
    println!(
        "{} policies, {} decisions each way; every decision: {deny} deny, {warn} warn, \
         {approval} require_approval, {errors} errors",
        files.len(),
        runs
    );
    println!("| way | p50 ms | p99 ms | max ms |");
    println!("|---|---:|---:|---:|");
    let mut json = Vec::new();
    for (way, t) in WAYS.iter().zip(&mut times) {
        t.sort_by(f64::total_cmp);
        let (p50, p99, max) = (quantile(t, 50.0), quantile(t, 99.0), t[t.len() - 1]);
        println!("| {way} | {p50:.1} | {p99:.1} | {max:.1} |");
        json.push(serde_json::json!({"way": way, "p50_ms": p50, "p99_ms": p99, "max_ms": max}));
    }
    println!(
        "{}",
        serde_json::json!({"policies": files.len(), "runs": runs, "ways": json})
    );
}

/// The server's per-policy evaluation before the shared input (`PolicySet::from_policies`
/// then `PolicySet::decide` as they were at e66e8b8), copied so that both can be timed in
/// one run.
mod before {
    use std::collections::BTreeSet;
    use std::num::NonZeroU32;
    use std::time::Instant;

    use bosun_policy::{Decision, Limits, Policy};

    /// The rules read then.
    const DECISION_RULES: [&str; 3] = ["deny", "warn", "require_approval"];
    use regorus::utils::limits::ExecutionTimerConfig;

    fn engine(limits: Limits) -> regorus::Engine {
        let mut engine = regorus::Engine::new();
        engine.set_execution_timer_config(ExecutionTimerConfig {
            limit: limits.eval_time,
            check_interval: NonZeroU32::MIN,
        });
        engine.set_strict_builtin_errors(true);
        engine
    }

    pub fn decide(files: &[Policy], limits: Limits, input: &serde_json::Value) -> Decision {
        // from_policies: each file parsed on its own, to check it.
        for p in files {
            assert!(p.text.len() <= limits.max_file_bytes);
            engine(limits)
                .add_policy(p.path.clone(), p.text.clone())
                .unwrap();
        }
        // decide
        let started = Instant::now();
        let text = input.to_string();
        assert!(text.len() <= limits.max_input_bytes);
        let mut engine = engine(limits);
        for p in files {
            engine.add_policy(p.path.clone(), p.text.clone()).unwrap();
        }
        engine.set_input(regorus::Value::from(input.clone()));
        let mut decision = Decision::default();
        let packages: BTreeSet<String> = engine.get_packages().unwrap().into_iter().collect();
        for package in packages {
            for rule in DECISION_RULES {
                let messages = match engine.eval_rule(format!("{package}.{rule}")) {
                    Ok(v) => messages(&v),
                    Err(e) => {
                        let why = e.to_string();
                        if why.contains("not a valid rule path") || why.contains("no rule") {
                            continue;
                        }
                        decision
                            .errors
                            .push(format!("policy {package}: {rule}: {why}"));
                        continue;
                    }
                };
                let into = match rule {
                    "deny" => &mut decision.deny,
                    "warn" => &mut decision.warn,
                    _ => &mut decision.require_approval,
                };
                into.extend(messages);
            }
        }
        decision.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        decision
    }

    fn messages(v: &regorus::Value) -> Vec<String> {
        let text = |v: &regorus::Value| match v {
            regorus::Value::String(s) => s.to_string(),
            other => other.to_json_str().unwrap_or_default(),
        };
        match v {
            regorus::Value::Undefined | regorus::Value::Null => Vec::new(),
            regorus::Value::Bool(false) => Vec::new(),
            regorus::Value::Set(s) => s.iter().map(text).collect(),
            regorus::Value::Array(a) => a.iter().map(text).collect(),
            other => vec![text(other)],
        }
    }
}
