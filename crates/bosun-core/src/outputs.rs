//! A stack's outputs compared between two state versions: which were added, removed,
//! changed value, or only flipped their sensitive flag — the one comparison the outputs
//! API shows and that downstream triggers will act on.
//!
//! Values are compared as JSON, by type: the string `"1"` and the number `1` differ,
//! while `1` and `1.0` are the same number. Nothing here looks at what a value is, so
//! callers decide what of a sensitive output may be shown (nothing).

use std::collections::BTreeMap;

use serde_json::{Number, Value};

use crate::state::Output;

/// What happened to one output between the previous version and the current one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// Only in the current version.
    Added,
    /// Only in the previous version.
    Removed,
    /// In both, with different values (its sensitivity may have flipped too).
    Changed,
    /// In both with equal values; only the sensitive flag flipped.
    SensitivityChanged,
    /// In both, same value, same sensitivity.
    Unchanged,
}

/// How an output's sensitive flag flipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SensitivityChange {
    BecameSensitive,
    NoLongerSensitive,
}

/// One output's comparison. `previous_sensitive` / `current_sensitive` are `None` where
/// the output does not exist in that version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputChange {
    pub name: String,
    pub kind: ChangeKind,
    pub previous_sensitive: Option<bool>,
    pub current_sensitive: Option<bool>,
}

impl OutputChange {
    /// Anything at all differs: presence, value or sensitivity.
    pub fn is_change(&self) -> bool {
        self.kind != ChangeKind::Unchanged
    }

    /// Whether the value differs (added and removed outputs included).
    pub fn value_changed(&self) -> bool {
        matches!(
            self.kind,
            ChangeKind::Added | ChangeKind::Removed | ChangeKind::Changed
        )
    }

    /// The flip of the sensitive flag, for an output present in both versions.
    pub fn sensitivity(&self) -> Option<SensitivityChange> {
        match (self.previous_sensitive, self.current_sensitive) {
            (Some(false), Some(true)) => Some(SensitivityChange::BecameSensitive),
            (Some(true), Some(false)) => Some(SensitivityChange::NoLongerSensitive),
            _ => None,
        }
    }

    /// Sensitive in either version: neither of its values may be shown next to this
    /// change (a value that just became sensitive is the secret it now is; one that just
    /// stopped being sensitive was a secret in the version it comes from).
    pub fn involves_sensitive(&self) -> bool {
        self.previous_sensitive == Some(true) || self.current_sensitive == Some(true)
    }
}

/// Compares every output of either version, ordered by name.
pub fn compare(
    previous: &BTreeMap<String, Output>,
    current: &BTreeMap<String, Output>,
) -> Vec<OutputChange> {
    let mut names: Vec<&String> = previous.keys().chain(current.keys()).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .map(|name| {
            let (before, after) = (previous.get(name), current.get(name));
            let kind = match (before, after) {
                (None, _) => ChangeKind::Added,
                (Some(_), None) => ChangeKind::Removed,
                (Some(b), Some(a)) if !values_equal(&b.value, &a.value) => ChangeKind::Changed,
                (Some(b), Some(a)) if b.sensitive != a.sensitive => ChangeKind::SensitivityChanged,
                (Some(_), Some(_)) => ChangeKind::Unchanged,
            };
            OutputChange {
                name: name.clone(),
                kind,
                previous_sensitive: before.map(|o| o.sensitive),
                current_sensitive: after.map(|o| o.sensitive),
            }
        })
        .collect()
}

/// The summary a downstream trigger needs: did anything change at all (an output added
/// or removed, a value, or a sensitive flag)?
pub fn changed(changes: &[OutputChange]) -> bool {
    changes.iter().any(OutputChange::is_change)
}

/// JSON equality where numbers compare by value (`1` == `1.0`), everything else by type
/// and content; object key order never matters.
pub fn values_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => numbers_equal(x, y),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| values_equal(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| values_equal(v, w)))
        }
        _ => a == b,
    }
}

fn numbers_equal(a: &Number, b: &Number) -> bool {
    let int = |n: &Number| {
        n.as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
    };
    // An integral float equals the integer exactly when it converts back without loss;
    // comparing both as f64 would merge integers beyond 2^53.
    let int_and_float = |i: i128, f: Option<f64>| {
        f.is_some_and(|f| f.is_finite() && f.fract() == 0.0 && f as i128 == i)
    };
    match (int(a), int(b)) {
        (Some(x), Some(y)) => x == y,
        (Some(i), None) => int_and_float(i, b.as_f64()),
        (None, Some(i)) => int_and_float(i, a.as_f64()),
        (None, None) => a.as_f64() == b.as_f64(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn outs(items: &[(&str, Value, bool)]) -> BTreeMap<String, Output> {
        items
            .iter()
            .map(|(n, v, s)| {
                (
                    n.to_string(),
                    Output {
                        value: v.clone(),
                        sensitive: *s,
                    },
                )
            })
            .collect()
    }

    fn kinds(changes: &[OutputChange]) -> Vec<(&str, ChangeKind)> {
        changes.iter().map(|c| (c.name.as_str(), c.kind)).collect()
    }

    #[test]
    fn every_kind_in_name_order() {
        let prev = outs(&[
            ("zone", json!("a"), false),
            ("gone", json!(1), false),
            ("region", json!("eu-west-1"), false),
            ("password", json!("hunter2"), true),
            ("same", json!({"a": [1, 2]}), false),
        ]);
        let cur = outs(&[
            ("zone", json!("a"), true),
            ("region", json!("us-east-2"), false),
            ("password", json!("hunter3"), true),
            ("same", json!({"a": [1, 2]}), false),
            ("added", json!(null), false),
        ]);
        let changes = compare(&prev, &cur);
        assert_eq!(
            kinds(&changes),
            [
                ("added", ChangeKind::Added),
                ("gone", ChangeKind::Removed),
                ("password", ChangeKind::Changed),
                ("region", ChangeKind::Changed),
                ("same", ChangeKind::Unchanged),
                ("zone", ChangeKind::SensitivityChanged),
            ]
        );
        assert!(changed(&changes));
        let by = |n: &str| changes.iter().find(|c| c.name == n).cloned().unwrap();
        assert_eq!(
            (
                by("added").previous_sensitive,
                by("added").current_sensitive
            ),
            (None, Some(false))
        );
        assert_eq!(
            (by("gone").previous_sensitive, by("gone").current_sensitive),
            (Some(false), None)
        );
        assert!(by("password").involves_sensitive());
        assert_eq!(by("password").sensitivity(), None);
        assert!(!by("region").involves_sensitive());
        assert!(by("added").value_changed() && by("gone").value_changed());
        assert!(!by("same").is_change() && !by("same").value_changed());
    }

    #[test]
    fn a_change_of_type_alone_is_a_change() {
        let prev = outs(&[
            ("n", json!(1), false),
            ("b", json!(true), false),
            ("l", json!(["a"]), false),
        ]);
        let cur = outs(&[
            ("n", json!("1"), false),
            ("b", json!("true"), false),
            ("l", json!({"0": "a"}), false),
        ]);
        let changes = compare(&prev, &cur);
        assert!(changes.iter().all(|c| c.kind == ChangeKind::Changed));
        // The same number written as an integer or a float is no change.
        let as_float = outs(&[("n", json!(1.0), false)]);
        let as_int = outs(&[("n", json!(1), false)]);
        assert_eq!(
            kinds(&compare(&as_int, &as_float)),
            [("n", ChangeKind::Unchanged)]
        );
        assert_eq!(
            kinds(&compare(&as_int, &outs(&[("n", json!(-1), false)]))),
            [("n", ChangeKind::Changed)]
        );
        assert_eq!(
            kinds(&compare(&as_int, &outs(&[("n", json!(1.5), false)]))),
            [("n", ChangeKind::Changed)]
        );
        // Beyond 2^53 a float cannot hold the integer: no false equality.
        let big = outs(&[("n", json!(9_007_199_254_740_993_u64), false)]);
        let big_float = outs(&[("n", json!(9_007_199_254_740_992.0_f64), false)]);
        assert_eq!(
            kinds(&compare(&big, &big_float)),
            [("n", ChangeKind::Changed)]
        );
        assert!(!changed(&compare(&big, &big)));
    }

    #[test]
    fn nested_values_compare_deeply() {
        let vpc = |cidr: &str| {
            json!({"id": "vpc-1", "subnets": [{"cidr": "10.0.0.0/24"}, {"cidr": cidr}],
                   "tags": {"env": "prod", "team": null}})
        };
        let prev = outs(&[("vpc", vpc("10.0.1.0/24"), false)]);
        assert!(!changed(&compare(
            &prev,
            &outs(&[("vpc", vpc("10.0.1.0/24"), false)])
        )));
        assert_eq!(
            kinds(&compare(
                &prev,
                &outs(&[("vpc", vpc("10.0.2.0/24"), false)])
            )),
            [("vpc", ChangeKind::Changed)]
        );
        // A key that appears with a null value is still a change.
        let mut extra = vpc("10.0.1.0/24");
        extra["tags"]["owner"] = Value::Null;
        assert_eq!(
            kinds(&compare(&prev, &outs(&[("vpc", extra, false)]))),
            [("vpc", ChangeKind::Changed)]
        );
        // Nested numbers also compare by value; list order matters.
        assert!(!changed(&compare(
            &outs(&[("l", json!([{"n": 2}]), false)]),
            &outs(&[("l", json!([{"n": 2.0}]), false)])
        )));
        assert!(changed(&compare(
            &outs(&[("l", json!([1, 2]), false)]),
            &outs(&[("l", json!([2, 1]), false)])
        )));
    }

    #[test]
    fn sensitivity_flips_with_equal_values() {
        let plain = outs(&[("key", json!("abc"), false)]);
        let secret = outs(&[("key", json!("abc"), true)]);
        let became = compare(&plain, &secret);
        assert_eq!(kinds(&became), [("key", ChangeKind::SensitivityChanged)]);
        assert_eq!(
            became[0].sensitivity(),
            Some(SensitivityChange::BecameSensitive)
        );
        assert!(became[0].involves_sensitive() && !became[0].value_changed());
        assert!(changed(&became), "a sensitivity flip alone is a change");
        let no_longer = compare(&secret, &plain);
        assert_eq!(kinds(&no_longer), [("key", ChangeKind::SensitivityChanged)]);
        assert_eq!(
            no_longer[0].sensitivity(),
            Some(SensitivityChange::NoLongerSensitive)
        );
        assert!(no_longer[0].involves_sensitive());
        // Value and flag both changing: a value change that also names the flip.
        let both = compare(&plain, &outs(&[("key", json!("xyz"), true)]));
        assert_eq!(kinds(&both), [("key", ChangeKind::Changed)]);
        assert_eq!(
            both[0].sensitivity(),
            Some(SensitivityChange::BecameSensitive)
        );
    }

    #[test]
    fn nothing_to_compare() {
        let empty = BTreeMap::new();
        assert!(compare(&empty, &empty).is_empty());
        assert!(!changed(&[]));
        let first = compare(&empty, &outs(&[("a", json!(1), true)]));
        assert_eq!(kinds(&first), [("a", ChangeKind::Added)]);
        assert_eq!(first[0].sensitivity(), None);
        assert!(first[0].involves_sensitive());
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            (-1e6f64..1e6).prop_map(Value::from),
            "[a-c1]{0,3}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-c]{1,2}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn outputs() -> impl Strategy<Value = BTreeMap<String, Output>> {
        prop::collection::btree_map(
            "[a-e]",
            (json_value(), any::<bool>())
                .prop_map(|(value, sensitive)| Output { value, sensitive }),
            0..5,
        )
    }

    proptest! {
        #[test]
        fn comparison_laws(prev in outputs(), cur in outputs()) {
            // A version compared with itself changes nothing.
            prop_assert!(!changed(&compare(&cur, &cur)));
            let forward = compare(&prev, &cur);
            let backward = compare(&cur, &prev);
            // Every name of either side once, in order.
            let names: Vec<&str> = forward.iter().map(|c| c.name.as_str()).collect();
            let mut want: Vec<&str> =
                prev.keys().chain(cur.keys()).map(String::as_str).collect();
            want.sort_unstable();
            want.dedup();
            prop_assert_eq!(&names, &want);
            // Swapping the versions mirrors each change.
            for (f, b) in forward.iter().zip(&backward) {
                let mirrored = match f.kind {
                    ChangeKind::Added => ChangeKind::Removed,
                    ChangeKind::Removed => ChangeKind::Added,
                    k => k,
                };
                prop_assert_eq!(b.kind, mirrored);
                prop_assert_eq!(f.sensitivity().is_some(), b.sensitivity().is_some());
            }
            prop_assert_eq!(changed(&forward), changed(&backward));
            let same = prev.len() == cur.len()
                && prev.iter().all(|(name, p)| {
                    cur.get(name)
                        .is_some_and(|c| c.sensitive == p.sensitive && values_equal(&p.value, &c.value))
                });
            prop_assert_eq!(changed(&forward), !same);
        }

        #[test]
        fn equal_json_is_equal(v in json_value()) {
            prop_assert!(values_equal(&v, &v.clone()));
        }
    }
}
