//! The policy engine on real Rego: decisions over a plan-shaped input, the time bound
//! stopping a runaway policy, the size bounds, parse errors named by file, and a policy
//! set's own tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use bosun_policy::{Decision, Input, Limits, Policy, PolicyError, PolicySet, DECISION_RULES};
use serde_json::json;

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

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
"#;

fn plan(changes: &[(&str, &str, &[&str], serde_json::Value)]) -> serde_json::Value {
    json!({
        "plan": {
            "resource_changes": changes.iter().map(|(address, ty, actions, after)| json!({
                "address": address,
                "type": ty,
                "change": { "actions": actions, "after": after },
            })).collect::<Vec<_>>(),
        }
    })
}

#[test]
fn deny_warn_and_require_approval_are_read_from_every_package() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "protect.rego", PROTECT);
    // A package with none of the three rules adds nothing.
    write(
        dir.path(),
        "helpers.rego",
        "package bosun.helpers\n\nimport rego.v1\n\nanswer := 42\n",
    );
    let set = PolicySet::from_dir(dir.path(), Limits::default()).unwrap();
    let d = set
        .decide(&plan(&[
            (
                "aws_db_instance.main",
                "aws_db_instance",
                &["delete"],
                json!(null),
            ),
            (
                "aws_s3_bucket.logs",
                "aws_s3_bucket",
                &["create"],
                json!({"tags": {}}),
            ),
            (
                "aws_s3_bucket.data",
                "aws_s3_bucket",
                &["create"],
                json!({"tags": {"owner": "net"}}),
            ),
        ]))
        .unwrap();
    assert_eq!(
        d.deny,
        ["aws_db_instance.main would be destroyed: databases are protected"]
    );
    assert_eq!(d.warn, ["aws_s3_bucket.logs has no owner tag"]);
    assert_eq!(d.require_approval, ["3 resources change (more than 2)"]);
    assert!(d.errors.is_empty(), "{:?}", d.errors);

    let calm = set
        .decide(&plan(&[(
            "aws_s3_bucket.data",
            "aws_s3_bucket",
            &["update"],
            json!({"tags": {"owner": "net"}}),
        )]))
        .unwrap();
    assert!(calm.deny.is_empty() && calm.warn.is_empty() && calm.require_approval.is_empty());
    assert!(calm.errors.is_empty(), "{:?}", calm.errors);
}

#[test]
fn skip_and_trigger_are_read_for_the_trigger_point() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "deliveries.rego",
        r#"package bosun.deliveries

import rego.v1

skip contains "only docs changed" if {
    count(input.delivery.changed_files) > 0
    every f in input.delivery.changed_files { endswith(f, ".md") }
}

trigger contains msg if {
    some f in input.delivery.changed_files
    startswith(f, "modules/")
    msg := sprintf("%s is a shared module", [f])
}
"#,
    );
    let set = PolicySet::from_dir(dir.path(), Limits::default()).unwrap();
    let docs = set
        .decide(&json!({"delivery": {"changed_files": ["README.md", "docs/a.md"]}}))
        .unwrap();
    assert_eq!(docs.skip, ["only docs changed"]);
    assert!(docs.trigger.is_empty() && docs.deny.is_empty(), "{docs:?}");
    let module = set
        .decide(&json!({"delivery": {"changed_files": ["modules/vpc/main.tf"]}}))
        .unwrap();
    assert_eq!(module.trigger, ["modules/vpc/main.tf is a shared module"]);
    assert!(
        module.skip.is_empty() && module.errors.is_empty(),
        "{module:?}"
    );
}

/// A decision without its timing.
fn said(d: Decision) -> Decision {
    Decision {
        duration_ms: 0,
        ..d
    }
}

#[test]
fn several_sets_decide_on_one_input_as_each_would_alone() {
    let one = |path: &str, text: &str| {
        PolicySet::from_policies(
            vec![Policy {
                path: path.into(),
                text: text.into(),
            }],
            Limits::default(),
        )
        .unwrap()
    };
    let sets = [
        one("protect.rego", PROTECT),
        one(
            "count.rego",
            "package bosun.count\n\nimport rego.v1\n\nwarn contains msg if {\n    n := count(input.plan.resource_changes)\n    msg := sprintf(\"%d changes\", [n])\n}\n",
        ),
        one(
            "helpers.rego",
            "package bosun.helpers\n\nimport rego.v1\n\nanswer := 42\n",
        ),
        one(
            "broken.rego",
            "package bosun.broken\n\nimport rego.v1\n\ndeny contains msg if {\n    msg := sprintf(\"%d\", [1 / 0])\n}\n",
        ),
    ];
    let documents = [
        plan(&[
            (
                "aws_db_instance.main",
                "aws_db_instance",
                &["delete"],
                json!(null),
            ),
            (
                "aws_s3_bucket.logs",
                "aws_s3_bucket",
                &["create"],
                json!({"tags": {}}),
            ),
            (
                "aws_s3_bucket.data",
                "aws_s3_bucket",
                &["create"],
                json!({"tags": {"owner": "net"}}),
            ),
        ]),
        plan(&[]),
    ];
    for document in &documents {
        let input = Input::new(document, &Limits::default()).unwrap();
        for set in &sets {
            let shared = set.decide_input(&input).unwrap();
            // The same input again, through a clone: nothing is left over from before.
            let again = set.decide_input(&input.clone()).unwrap();
            let alone = set.decide(document).unwrap();
            assert_eq!(said(shared.clone()), said(alone));
            assert_eq!(said(shared), said(again));
        }
    }
    let input = Input::new(&documents[0], &Limits::default()).unwrap();
    let d = sets[0].decide_input(&input).unwrap();
    assert_eq!(d.deny.len(), 1);
    assert_eq!(d.warn.len(), 1);
    assert_eq!(sets[1].decide_input(&input).unwrap().warn, ["3 changes"]);
    let e = sets[3].decide_input(&input).unwrap();
    assert_eq!(e.errors.len(), 1, "{e:?}");
    assert!(
        e.errors[0].starts_with("policy data.bosun.broken: deny: "),
        "{e:?}"
    );
}

#[test]
fn an_input_is_bounded_when_made() {
    let limits = |max_input_bytes| Limits {
        max_input_bytes,
        ..Limits::default()
    };
    // `{"a":"0123456789"}` is 18 bytes of JSON text.
    let document = json!({"a": "0123456789"});
    assert!(Input::new(&document, &limits(18)).is_ok());
    let e = Input::new(&document, &limits(17)).unwrap_err();
    assert_eq!(e, PolicyError::InputTooLarge { max: 17 });
    assert_eq!(
        e.to_string(),
        "the input is more than 17 bytes: that is the most an input may be"
    );
    assert!(matches!(
        Input::new(&json!({}), &limits(1)),
        Err(PolicyError::InputTooLarge { max: 1 })
    ));
    assert!(Input::new(&json!({}), &limits(2)).is_ok());

    // A large document is refused without being written out whole.
    let big =
        json!({"plan": {"resource_changes": vec![json!({"address": "x".repeat(1000)}); 10_000]}});
    let e = Input::new(&big, &limits(64 * 1024)).unwrap_err();
    assert_eq!(e, PolicyError::InputTooLarge { max: 64 * 1024 });
    assert!(Input::new(&big, &Limits::default()).is_ok());
}

#[test]
fn a_runaway_policy_is_stopped_by_the_time_bound_and_named() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "slow.rego",
        // 25 million iterations: minutes of work without a bound.
        "package bosun.slow\n\nimport rego.v1\n\ndeny contains msg if {\n    n := count([x | some x in numbers.range(1, 5000); some y in numbers.range(1, 5000); x == y + 1])\n    n > 0\n    msg := \"never\"\n}\n",
    );
    let limits = Limits {
        eval_time: Duration::from_millis(200),
        ..Limits::default()
    };
    let set = PolicySet::from_dir(dir.path(), limits).unwrap();
    let started = Instant::now();
    let d = set.decide(&json!({})).unwrap();
    let took = started.elapsed();
    assert!(d.deny.is_empty());
    assert_eq!(d.errors.len(), 1, "{d:?}");
    assert!(
        d.errors[0].starts_with("policy data.bosun.slow: deny: "),
        "{:?}",
        d.errors
    );
    assert!(took < Duration::from_secs(2), "took {took:?}");
}

#[test]
fn bad_policy_sets_are_refused_naming_the_file_and_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "broken.rego",
        "package bosun.broken\n\ndeny contains msg if {\n",
    );
    let e = PolicySet::from_dir(dir.path(), Limits::default()).unwrap_err();
    assert!(
        matches!(&e, PolicyError::Parse { path, .. } if path.ends_with("broken.rego")),
        "{e}"
    );

    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "big.rego",
        &format!("package bosun.big\n# {}\n", "x".repeat(2000)),
    );
    let small = Limits {
        max_file_bytes: 1000,
        ..Limits::default()
    };
    let e = PolicySet::from_dir(dir.path(), small).unwrap_err();
    assert!(
        e.to_string()
            .contains("a policy file is at most 1000 bytes"),
        "{e}"
    );

    let dir = tempfile::tempdir().unwrap();
    for i in 0..3 {
        write(
            dir.path(),
            &format!("p{i}.rego"),
            &format!("package bosun.p{i}\n"),
        );
    }
    let few = Limits {
        max_files: 2,
        ..Limits::default()
    };
    let e = PolicySet::from_dir(dir.path(), few).unwrap_err();
    assert!(
        e.to_string()
            .contains("has 3 .rego files: a policy set has at most 2"),
        "{e}"
    );

    let empty = tempfile::tempdir().unwrap();
    let e = PolicySet::from_dir(empty.path(), Limits::default()).unwrap_err();
    assert!(matches!(e, PolicyError::Empty { .. }), "{e}");

    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "protect.rego", PROTECT);
    let tiny_input = Limits {
        max_input_bytes: 10,
        ..Limits::default()
    };
    let set = PolicySet::from_dir(dir.path(), tiny_input).unwrap();
    let e = set.decide(&json!({"a": "0123456789"})).unwrap_err();
    assert!(
        matches!(e, PolicyError::InputTooLarge { max: 10, .. }),
        "{e}"
    );
}

#[test]
fn a_sets_own_tests_run_like_opa_test() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "protect.rego", PROTECT);
    write(
        dir.path(),
        "protect_test.rego",
        r#"package bosun.protect_test

import rego.v1
import data.bosun.protect

test_a_deleted_database_is_denied if {
    count(protect.deny) == 1 with input as {"plan": {"resource_changes": [
        {"address": "a", "type": "aws_db_instance", "change": {"actions": ["delete"]}}
    ]}}
}

test_this_one_fails if {
    count(protect.deny) == 5 with input as {"plan": {"resource_changes": []}}
}
"#,
    );
    let set = PolicySet::from_dir(dir.path(), Limits::default()).unwrap();
    // Tests are not policies: they add nothing to a decision.
    assert_eq!(set.packages().unwrap(), ["data.bosun.protect"]);
    let results = set.run_tests().unwrap();
    let outcome: Vec<(&str, bool)> = results
        .iter()
        .map(|r| (r.name.as_str(), r.passed))
        .collect();
    assert_eq!(
        outcome,
        [
            (
                "data.bosun.protect_test.test_a_deleted_database_is_denied",
                true
            ),
            ("data.bosun.protect_test.test_this_one_fails", false),
        ]
    );
    assert_eq!(results[1].why.as_deref(), Some("undefined"));
}

#[test]
fn a_set_that_parses_but_cannot_be_analysed_says_why_in_every_decision() {
    let set = PolicySet::from_policies(
        vec![Policy {
            path: "mismatch.rego".into(),
            text: "package bosun.mismatch\n\nimport rego.v1\n\ndeny contains msg if {\n    [a, b] := [1, 2, 3]\n    msg := sprintf(\"%d\", [a + b])\n}\n\nwarn contains \"w\" if { true }\n".into(),
        }],
        Limits::default(),
    )
    .unwrap();
    let input = Input::new(&json!({}), &Limits::default()).unwrap();
    for _ in 0..2 {
        let d = set.decide_input(&input).unwrap();
        assert!(d.deny.is_empty() && d.warn.is_empty(), "{d:?}");
        // Each rule read says so, as each did when every decision parsed the files anew.
        assert_eq!(d.errors.len(), DECISION_RULES.len(), "{d:?}");
        for (e, rule) in d.errors.iter().zip(DECISION_RULES) {
            assert!(
                e.starts_with(&format!("policy data.bosun.mismatch: {rule}: "))
                    && e.contains("mismatch in number of array elements"),
                "{e}"
            );
        }
    }
}
