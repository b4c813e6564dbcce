//! The memory bound holds the process's peak: runaway policies are stopped, named, and the
//! resident set never grew to more than a few times the bound. A test binary of its own,
//! so that no other test's memory shows in the peak (`VmHWM`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use bosun_policy::{Limits, Policy, PolicySet};
use serde_json::json;

const MIB: u64 = 1024 * 1024;

/// The process's peak resident set so far, in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmHWM in /proc/self/status");
    kib * 1024
}

fn one(package: &str, deny_body: &str) -> Policy {
    Policy {
        path: format!("{package}.rego"),
        text: format!(
            "package bosun.{package}\n\nimport rego.v1\n\ndeny contains \"never\" if {{\n    {deny_body}\n}}\n"
        ),
    }
}

#[test]
fn runaway_policies_are_stopped_by_the_memory_bound_and_the_peak_stays_near_it() {
    let bound = 64 * MIB;
    let limits = Limits {
        max_memory_bytes: bound as usize,
        // Far past what the memory bound needs: without it, each of these runs until
        // this (gigabytes by then) or the machine runs out.
        eval_time: Duration::from_secs(20),
        ..Limits::default()
    };
    let runaways = [
        // 24 GB reserved at once by regorus' own numbers.range, filled element by element.
        one("range", "x := numbers.range(1, 1e9)\n    count(x) > 0"),
        // 240 TB: a reservation the system refuses, which aborts the process.
        one("far", "x := numbers.range(1, 1e13)\n    count(x) > 0"),
        one("step", "x := numbers.range_step(0, 1e10, 2)\n    count(x) > 0"),
        // A comprehension over 10 billion pairs, built pair by pair.
        one(
            "pairs",
            "x := [[y, z] | some y in numbers.range(1, 100000); some z in numbers.range(1, 100000)]\n    count(x) > 0",
        ),
        // A string repeated a hundred million times, then joined.
        one(
            "strings",
            "x := concat(\"\", [\"0123456789abcdef\" | some _ in numbers.range(1, 10000); some _ in numbers.range(1, 10000)])\n    count(x) > 0",
        ),
    ];
    let before = peak_rss();
    for policy in runaways {
        let package = policy.path.trim_end_matches(".rego").to_string();
        let set = PolicySet::from_policies(vec![policy], limits).unwrap();
        let started = Instant::now();
        let d = set.decide(&json!({})).unwrap();
        let took = started.elapsed();
        assert!(d.deny.is_empty(), "{d:?}");
        assert_eq!(
            d.errors,
            [format!(
                "policy data.bosun.{package}: deny: the memory bound (64 MiB) was reached"
            )],
            "after {took:?}"
        );
        let peak = peak_rss();
        assert!(
            peak < 4 * bound,
            "{package}: peak {} MiB (it was {} MiB before): the bound is {} MiB",
            peak / MIB,
            before / MIB,
            bound / MIB
        );
        eprintln!(
            "{package}: stopped after {took:?}; peak resident set {} MiB",
            peak / MIB
        );
    }

    // On a thread that freed a gigabyte another thread allocated (which counts, on this
    // thread, as a gigabyte less than nothing), the bound is still the bound.
    // (Reserved, not written to: the allocator counts it, the resident set does not grow.)
    let allocated = std::thread::spawn(|| Vec::<u8>::with_capacity(1024 * MIB as usize))
        .join()
        .unwrap();
    let before = peak_rss();
    let pairs = PolicySet::from_policies(
        vec![one(
            "pairs",
            "x := [[y, z] | some y in numbers.range(1, 100000); some z in numbers.range(1, 100000)]\n    count(x) > 0",
        )],
        limits,
    )
    .unwrap();
    let d = std::thread::spawn(move || {
        drop(allocated);
        pairs.decide(&json!({})).unwrap()
    })
    .join()
    .unwrap();
    assert_eq!(
        d.errors,
        ["policy data.bosun.pairs: deny: the memory bound (64 MiB) was reached"]
    );
    let peak = peak_rss();
    assert!(
        peak < 4 * bound,
        "peak {} MiB (it was {} MiB before)",
        peak / MIB,
        before / MIB
    );

    // The process carries on: an ordinary policy decides right after.
    let set = PolicySet::from_policies(
        vec![Policy {
            path: "protect.rego".into(),
            text: "package bosun.protect\n\nimport rego.v1\n\ndeny contains rc.address if {\n    some rc in input.plan.resource_changes\n    \"delete\" in rc.change.actions\n}\n".into(),
        }],
        limits,
    )
    .unwrap();
    let d = set
        .decide(&json!({"plan": {"resource_changes": [
            {"address": "aws_db_instance.main", "change": {"actions": ["delete"]}},
            {"address": "aws_s3_bucket.logs", "change": {"actions": ["create"]}},
        ]}}))
        .unwrap();
    assert_eq!(d.deny, ["aws_db_instance.main"]);
    assert!(d.errors.is_empty(), "{d:?}");
}
