//! The memory bound per evaluation: decisions under it are untouched, a runaway is stopped
//! and named, concurrent evaluations never fail for each other's memory (nor for the rest
//! of the process's), and a policy's own test that reaches it fails saying so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use bosun_policy::{Decision, Limits, Policy, PolicySet};
use serde_json::json;

const MIB: usize = 1024 * 1024;

const PROTECT: &str = r#"package bosun.protect

import rego.v1

deny contains msg if {
    some rc in input.plan.resource_changes
    rc.type == "aws_db_instance"
    "delete" in rc.change.actions
    msg := sprintf("%s would be destroyed: databases are protected", [rc.address])
}

warn contains msg if {
    some rc in input.plan.resource_changes
    not rc.change.after.tags.owner
    "create" in rc.change.actions
    msg := sprintf("%s has no owner tag", [rc.address])
}

require_approval contains msg if {
    changed := [rc | some rc in input.plan.resource_changes; rc.change.actions != ["no-op"]]
    count(changed) > 2
    msg := sprintf("%d resources change (more than 2)", [count(changed)])
}

deny contains msg if {
    some rc in input.plan.resource_changes
    startswith(rc.type, "aws_iam")
    some stmt in rc.change.after.policy.statements
    stmt.action == "*"
    msg := sprintf("%s grants every action", [rc.address])
}
"#;

fn policy(path: &str, text: &str) -> Policy {
    Policy {
        path: path.into(),
        text: text.into(),
    }
}

/// A plan of `n` resource changes: every 4th resource a database, every 7th deleted, every
/// 5th without an owner tag, every 11th an IAM policy granting `*`.
fn plan(n: usize) -> serde_json::Value {
    let changes: Vec<_> = (0..n)
        .map(|i| {
            let ty = [
                "aws_db_instance",
                "aws_s3_bucket",
                "aws_iam_policy",
                "aws_instance",
            ][i % 4];
            let actions = if i % 7 == 0 {
                json!(["delete"])
            } else if i % 3 == 0 {
                json!(["no-op"])
            } else {
                json!(["create"])
            };
            json!({
                "address": format!("{ty}.r{i}"),
                "type": ty,
                "change": {"actions": actions, "after": {
                    "tags": if i % 5 == 0 { json!({}) } else { json!({"owner": "team"}) },
                    "policy": {"statements": [
                        {"action": if i % 11 == 0 { "*" } else { "s3:GetObject" }}
                    ]},
                }},
            })
        })
        .collect();
    json!({"plan": {"resource_changes": changes}})
}

/// What PROTECT decides on `plan(n)`, computed here.
fn expected(n: usize) -> (usize, usize) {
    let deny = (0..n)
        .filter(|i| (i % 4 == 0 && i % 7 == 0) || (i % 4 == 2 && i % 11 == 0))
        .count();
    let warn = (0..n)
        .filter(|i| i % 5 == 0 && i % 7 != 0 && i % 3 != 0)
        .count();
    (deny, warn)
}

fn assert_protect(d: &Decision, n: usize) {
    assert!(d.errors.is_empty(), "{:?}", d.errors);
    let (deny, warn) = expected(n);
    assert_eq!((d.deny.len(), d.warn.len()), (deny, warn), "{d:?}");
    assert_eq!(d.require_approval.len(), 1, "{d:?}");
}

/// A policy whose `deny` builds pairs until it runs out of memory or time.
const RUNAWAY: &str = "package bosun.runaway\n\nimport rego.v1\n\ndeny contains \"never\" if {\n    x := [[y, z] | some y in numbers.range(1, 100000); some z in numbers.range(1, 100000)]\n    count(x) > 0\n}\n";

#[test]
fn an_ordinary_decision_and_one_just_under_the_bound_are_untouched() {
    assert_eq!(Limits::default().max_memory_bytes, 256 * MIB);
    let set =
        PolicySet::from_policies(vec![policy("protect.rego", PROTECT)], Limits::default()).unwrap();
    assert_protect(&set.decide(&plan(1000)).unwrap(), 1000);

    // The same 1,000-resource decision fits in far less than the default.
    let small = Limits {
        max_memory_bytes: MIB,
        ..Limits::default()
    };
    let set = PolicySet::from_policies(vec![policy("protect.rego", PROTECT)], small).unwrap();
    assert_protect(&set.decide(&plan(1000)).unwrap(), 1000);

    // A range whose array takes three quarters of the bound (2 million values of 24 bytes
    // in 64 MiB) is built; one that would take more than the bound is refused up front.
    let limits = Limits {
        max_memory_bytes: 64 * MIB,
        ..Limits::default()
    };
    let range = |n: u64| {
        format!("package bosun.range\n\nimport rego.v1\n\nwarn contains msg if {{\n    x := numbers.range(1, {n})\n    msg := sprintf(\"%d numbers, the last %d\", [count(x), x[count(x) - 1]])\n}}\n")
    };
    let set = PolicySet::from_policies(
        vec![
            policy("protect.rego", PROTECT),
            policy("range.rego", &range(2_000_000)),
        ],
        limits,
    )
    .unwrap();
    let d = set.decide(&plan(1000)).unwrap();
    assert!(d.errors.is_empty(), "{:?}", d.errors);
    assert!(
        d.warn
            .contains(&"2000000 numbers, the last 2000000".to_string()),
        "{:?}",
        d.warn
    );

    let set =
        PolicySet::from_policies(vec![policy("range.rego", &range(3_000_000))], limits).unwrap();
    let d = set.decide(&plan(10)).unwrap();
    assert_eq!(
        d.errors,
        ["policy data.bosun.range: warn: the memory bound (64 MiB) was reached"]
    );
}

#[test]
fn a_runaway_and_an_ordinary_decision_at_once_each_get_their_own_answer() {
    let runaway_limits = Limits {
        max_memory_bytes: 64 * MIB,
        eval_time: Duration::from_secs(20),
        ..Limits::default()
    };
    // The ordinary decision has a bound far below what the runaway takes: were the
    // runaway's memory (or the rest of the process's) counted against it, it would fail.
    let ordinary_limits = Limits {
        max_memory_bytes: MIB,
        ..Limits::default()
    };
    let runaway =
        PolicySet::from_policies(vec![policy("runaway.rego", RUNAWAY)], runaway_limits).unwrap();
    // With a rule that takes a while (90,000 steps) in little memory: the runaway would
    // have time to allocate while it runs.
    let slow = "package bosun.slow\n\nimport rego.v1\n\nwarn contains \"counted\" if {\n    count([x | some x in numbers.range(1, 300); some y in numbers.range(1, 300); x == y]) == 300\n}\n";
    let ordinary = PolicySet::from_policies(
        vec![policy("protect.rego", PROTECT), policy("slow.rego", slow)],
        ordinary_limits,
    )
    .unwrap();
    let runaway_done = Arc::new(AtomicBool::new(false));
    let all_done = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(3));

    let stopped = std::thread::spawn({
        let (done, start) = (runaway_done.clone(), start.clone());
        move || {
            start.wait();
            let d = runaway.decide(&json!({})).unwrap();
            done.store(true, Ordering::SeqCst);
            d
        }
    });
    // The rest of the process allocating meanwhile (not policy work): 32 MiB taken and
    // given back, again and again, until the decisions are over. (Reserved, not written
    // to: the allocator counts it all the same.)
    let busy = std::thread::spawn({
        let (done, start) = (all_done.clone(), start.clone());
        move || {
            start.wait();
            let mut rounds = 0u64;
            while !done.load(Ordering::SeqCst) {
                let block = Vec::<u8>::with_capacity(32 * MIB);
                std::hint::black_box(&block);
                drop(block);
                rounds += 1;
            }
            rounds
        }
    });
    start.wait();
    let plan = plan(1000);
    let mut decisions = 0;
    let mut during = 0;
    while decisions < 10 || !runaway_done.load(Ordering::SeqCst) {
        if !runaway_done.load(Ordering::SeqCst) {
            during += 1;
        }
        let mut d = ordinary.decide(&plan).unwrap();
        assert!(d.warn.contains(&"counted".to_string()), "{d:?}");
        d.warn.retain(|w| w != "counted");
        assert_protect(&d, 1000);
        decisions += 1;
    }
    all_done.store(true, Ordering::SeqCst);
    let d = stopped.join().unwrap();
    assert_eq!(
        d.errors,
        ["policy data.bosun.runaway: deny: the memory bound (64 MiB) was reached"]
    );
    assert!(busy.join().unwrap() > 0);
    assert!(
        during > 0,
        "no ordinary decision started while the runaway ran ({decisions} in all)"
    );
}

#[test]
fn a_policy_test_that_reaches_the_memory_bound_fails_saying_so() {
    let limits = Limits {
        max_memory_bytes: 16 * MIB,
        eval_time: Duration::from_secs(20),
        ..Limits::default()
    };
    let set = PolicySet::from_policies(
        vec![
            policy("protect.rego", PROTECT),
            policy(
                "protect_test.rego",
                r#"package bosun.protect_test

import rego.v1
import data.bosun.protect

test_a_deleted_database_is_denied if {
    count(protect.deny) == 1 with input as {"plan": {"resource_changes": [
        {"address": "a", "type": "aws_db_instance", "change": {"actions": ["delete"]}}
    ]}}
}

test_a_runaway if {
    count([[y, z] | some y in numbers.range(1, 100000); some z in numbers.range(1, 100000)]) > 0
}
"#,
            ),
        ],
        limits,
    )
    .unwrap();
    let results = set.run_tests().unwrap();
    let outcome: Vec<(&str, bool, Option<&str>)> = results
        .iter()
        .map(|r| (r.name.as_str(), r.passed, r.why.as_deref()))
        .collect();
    assert_eq!(
        outcome,
        [
            (
                "data.bosun.protect_test.test_a_deleted_database_is_denied",
                true,
                None
            ),
            (
                "data.bosun.protect_test.test_a_runaway",
                false,
                Some("the memory bound (16 MiB) was reached")
            ),
        ]
    );
}
