//! The `when:` language: a table of conditions and what they decide (malformed ones
//! fail open), syntax errors with their column, and property tests — a printed random
//! expression parses back to itself, and `decide` never panics.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use bosun_plans::condition::{check, decide, parse, references, CmpOp, Decision, Expr, Lit};
use bosun_plans::facts::Facts;
use bosun_plans::template::{HostInfo, Scope};
use proptest::prelude::*;
use serde_json::json;

fn scope() -> Scope {
    Scope {
        vars: serde_json::from_value(json!({
            "restart": "yes", "n": 3, "f": 2.5, "s": "abc", "list": ["a", "b", 1],
            "map": {"k": 1, "inner": {"deep": "x"}}, "empty": "", "zero": 0, "t": true,
            "fl": false, "emptylist": [], "nil": null, "big": 9007199254740993u64
        }))
        .unwrap(),
        env: serde_json::from_value(json!({"tier": "prod"})).unwrap(),
        inputs: serde_json::from_value(json!({"release": "2.0", "count": 10})).unwrap(),
        host: HostInfo {
            name: "web-1".into(),
            address: "10.0.0.1".into(),
            labels: vec!["web".into(), "db".into()],
            facts: Some(Facts {
                os_family: "debian".into(),
                distribution: "ubuntu".into(),
                version: "22.04".into(),
                arch: "aarch64".into(),
                hostname: "web-1.example".into(),
            }),
        },
    }
}

#[test]
fn conditions_decide() {
    use Decision::{Run, Skip};
    let s = scope();
    let cases: &[(&str, Decision)] = &[
        // Equality.
        (r#"vars.restart == "yes""#, Run),
        ("vars.restart == 'no'", Skip),
        ("vars.restart != 'no'", Run),
        ("vars.n == 3", Run),
        ("vars.n == 3.0", Run),
        ("vars.f == 2.5", Run),
        ("vars.t == true", Run),
        ("vars.fl == false", Run),
        ("vars.big == 9007199254740993", Run),
        ("vars.big == 9007199254740992", Skip),
        (r#"vars.list == vars.list"#, Run),
        ("env.tier == 'prod'", Run),
        ("inputs.release == '2.0'", Run),
        ("host.name == 'web-1'", Run),
        ("host.address != '10.0.0.2'", Run),
        // Host facts.
        ("host.facts.os_family == 'debian'", Run),
        ("host.facts.os_family != 'debian'", Skip),
        (
            "host.facts.distribution == 'ubuntu' and host.facts.version >= '22.04'",
            Run,
        ),
        (
            "host.facts.arch == 'aarch64' or host.facts.arch == 'x86_64'",
            Run,
        ),
        ("'example' in host.facts.hostname", Run),
        ("'arch' in host.facts", Run),
        // An unknown fact is unresolved: false, and so is comparing it.
        ("host.facts.nope", Skip),
        ("host.facts.nope == ''", Skip),
        ("vars.map.inner.deep == 'x'", Run),
        // Order: numbers numerically, strings lexically.
        ("vars.n > 2", Run),
        ("vars.n >= 3", Run),
        ("vars.n < 3", Skip),
        ("vars.n <= 3", Run),
        ("vars.f < 3", Run),
        ("-1 < vars.n", Run),
        ("inputs.count > 9", Run),
        ("'10' < '9'", Run),
        ("vars.s > 'ab'", Run),
        ("'abc' < 'abd'", Run),
        // Mixed kinds: the comparison is false; `!=` is `not ==`.
        ("vars.n == '3'", Skip),
        ("vars.n != '3'", Run),
        ("vars.n < '4'", Skip),
        ("vars.n > '1'", Skip),
        ("vars.t > false", Skip),
        ("vars.list < vars.list", Skip),
        // Membership.
        ("'web' in host.labels", Run),
        ("'x' in host.labels", Skip),
        ("'x' not in host.labels", Run),
        ("'web' not in host.labels", Skip),
        ("'bc' in vars.s", Run),
        ("'web' in host.name", Run),
        ("'k' in vars.map", Run),
        ("'nope' in vars.map", Skip),
        ("1 in vars.list", Run),
        ("1.0 in vars.list", Run),
        ("3 in vars.s", Skip),
        ("'restart' in vars", Run),
        ("'a' in vars.missing", Skip),
        ("'a' not in vars.missing", Run),
        // Logic and precedence.
        ("vars.t and not vars.fl", Run),
        ("vars.fl or vars.zero", Skip),
        ("not (vars.t and vars.fl)", Run),
        ("true or false and false", Run),
        ("(true or false) and false", Skip),
        ("not true or true", Run),
        ("not true == false", Run),
        ("not not vars.t", Run),
        ("vars.n > 1 and vars.n < 5 and 'db' in host.labels", Run),
        // Truthiness of a bare reference or literal.
        ("vars.s", Run),
        ("vars.empty", Skip),
        ("vars.zero", Skip),
        ("vars.n", Run),
        ("vars.f", Run),
        ("vars.list", Run),
        ("vars.emptylist", Skip),
        ("vars.map", Run),
        ("vars.nil", Skip),
        ("vars.missing", Skip),
        ("not vars.missing", Run),
        ("vars.s.nothing", Skip),
        ("host.labels", Run),
        ("true", Run),
        ("True", Run),
        ("false", Skip),
        ("'x'", Run),
        ("''", Skip),
        ("0", Skip),
        ("0.5", Run),
        (".5 == 0.5", Run),
        ("1e3 == 1000", Run),
        // Unresolved references compare unequal to everything.
        ("vars.missing == ''", Skip),
        ("vars.missing != 'x'", Run),
        ("vars.missing < 1", Skip),
        // Strings: both quotes, escapes.
        (r#""a\"b" == 'a"b'"#, Run),
        (r#"'it\'s' == "it's""#, Run),
        (r#""tab\there" == 'tab	here'"#, Run),
        ("  vars.t  ", Run),
    ];
    for (expr, want) in cases {
        assert_eq!(&decide(expr, &s), want, "{expr}");
        assert!(check(expr).is_ok(), "{expr}");
    }
}

#[test]
fn malformed_conditions_fail_open_with_the_column() {
    let s = scope();
    let cases: &[(&str, &str)] = &[
        (
            r#"vars.restart = "yes""#,
            "column 14: `=` is not an operator; compare with `==`",
        ),
        ("vars.a ==", "column 10: unexpected end of condition"),
        ("(vars.a", "column 8: unclosed `(` opened at column 1"),
        ("vars.a)", "column 7: unexpected `)`"),
        ("foo.bar", "column 1: unknown name `foo`"),
        ("var.x == 1", "column 1: unknown name `var`"),
        ("vars.", "column 6: expected a name after `.`"),
        ("vars.1", "column 5: unexpected number"),
        ("1 == 1 == 1", "column 8: comparisons do not chain"),
        (
            "'a' in host.labels not in vars.x",
            "column 20: comparisons do not chain",
        ),
        ("\"unterminated", "column 1: unterminated string"),
        (
            "vars.a && vars.b",
            "column 8: `&` is not an operator; use `and`",
        ),
        (
            "vars.a || vars.b",
            "column 8: `|` is not an operator; use `or`",
        ),
        ("!vars.a", "column 1: `!` is not an operator"),
        ("", "column 1: empty condition"),
        ("   ", "column 1: empty condition"),
        ("not", "column 4: unexpected end of condition"),
        ("in vars.x", "column 1: expected a value, found `in`"),
        ("vars.a not", "column 8: unexpected `not`"),
        ("1x == 1", "column 1: a number must not run into a name"),
        ("vars.a b", "column 8: unexpected name `b`"),
        ("vars.a == {{ x }}", "column 11: unexpected character '{'"),
        (
            "99999999999999999999999e999999",
            "column 1: number 99999999999999999999999e999999 is out of range",
        ),
    ];
    for (expr, message) in cases {
        let err = check(expr).unwrap_err();
        assert!(err.starts_with(message), "{expr:?}: {err}");
        match decide(expr, &s) {
            Decision::RunMalformed(why) => assert!(why.contains(message), "{expr:?}: {why}"),
            other => panic!("{expr:?} decided {other:?}"),
        }
    }
    // Nesting is bounded (the parser is recursive).
    let deep = format!("{}true{}", "(".repeat(100), ")".repeat(100));
    assert!(check(&deep)
        .unwrap_err()
        .contains("nested more than 64 deep"));
    assert!(matches!(decide(&deep, &s), Decision::RunMalformed(_)));
    let nots = format!("{}true", "not ".repeat(1000));
    assert!(matches!(decide(&nots, &s), Decision::RunMalformed(_)));
    let fine = format!("{}true{}", "(".repeat(60), ")".repeat(60));
    assert_eq!(decide(&fine, &s), Decision::Run);
}

#[test]
fn printing_uses_minimal_parentheses() {
    for (src, printed) in [
        (
            "(vars.a or vars.b) and not (vars.c == 1)",
            "(vars.a or vars.b) and not vars.c == 1",
        ),
        (
            "vars.a or (vars.b and vars.c)",
            "vars.a or vars.b and vars.c",
        ),
        ("(vars.a or vars.b) or vars.c", "vars.a or vars.b or vars.c"),
        (
            "vars.a or (vars.b or vars.c)",
            "vars.a or (vars.b or vars.c)",
        ),
        ("(not vars.a) == true", "(not vars.a) == true"),
        ("'x' not in host.labels", "\"x\" not in host.labels"),
        ("1.0 < -2", "1.0 < -2"),
    ] {
        let e = parse(src).unwrap();
        assert_eq!(e.to_string(), printed);
        assert_eq!(parse(printed).unwrap(), e);
    }
    assert_eq!(
        parse("vars.a.b == env.x or 'z' in host.labels and vars.a.b").map(|e| references(&e)),
        Ok(vec![
            "vars.a.b".to_string(),
            "env.x".into(),
            "host.labels".into()
        ])
    );
}

// ---------------------------------------------------------------------------------
// Properties

const KEYWORDS: [&str; 8] = ["and", "or", "not", "in", "true", "false", "True", "False"];

fn lit() -> impl Strategy<Value = Lit> {
    prop_oneof![
        any::<String>().prop_map(Lit::Str),
        any::<i64>().prop_map(Lit::Int),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Lit::Float),
        any::<bool>().prop_map(Lit::Bool),
    ]
}

fn reference() -> impl Strategy<Value = Vec<String>> {
    (
        prop::sample::select(vec!["vars", "env", "inputs", "host"]),
        prop::collection::vec(
            "[a-zA-Z_][a-zA-Z0-9_]{0,6}"
                .prop_filter("not a keyword", |s| !KEYWORDS.contains(&s.as_str())),
            0..3,
        ),
    )
        .prop_map(|(ns, rest)| {
            let mut path = vec![ns.to_string()];
            path.extend(rest);
            path
        })
}

fn op() -> impl Strategy<Value = CmpOp> {
    prop::sample::select(vec![
        CmpOp::Eq,
        CmpOp::Ne,
        CmpOp::Lt,
        CmpOp::Le,
        CmpOp::Gt,
        CmpOp::Ge,
        CmpOp::In,
        CmpOp::NotIn,
    ])
}

fn expr() -> impl Strategy<Value = Expr> {
    let leaf = prop_oneof![lit().prop_map(Expr::Lit), reference().prop_map(Expr::Ref)];
    leaf.prop_recursive(6, 48, 3, |inner| {
        prop_oneof![
            inner.clone().prop_map(|e| Expr::Not(Box::new(e))),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Expr::And(Box::new(a), Box::new(b))),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Expr::Or(Box::new(a), Box::new(b))),
            (op(), inner.clone(), inner).prop_map(|(o, a, b)| Expr::Cmp(
                o,
                Box::new(a),
                Box::new(b)
            )),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn a_printed_expression_parses_back_to_itself(e in expr()) {
        let printed = e.to_string();
        let parsed = parse(&printed);
        prop_assert_eq!(parsed, Ok(e), "printed: {}", printed);
    }

    #[test]
    fn decide_never_panics_on_any_string(s in any::<String>()) {
        let _ = decide(&s, &scope());
    }

    #[test]
    fn decide_never_panics_on_token_soup(
        s in prop::collection::vec(
            prop::sample::select(vec![
                "vars", "env", "host", "inputs", ".", "x", "n", "labels", "(", ")", "==", "!=",
                "<", "<=", ">", ">=", "=", "!", "in", "not", "and", "or", "true", "false",
                "'a'", "\"b", "'", "\\", "-", "1", "2.5", "1e", "e9", " ", "",
            ]),
            0..24,
        ).prop_map(|v| v.concat())
    ) {
        let d = decide(&s, &scope());
        // Whatever it decides agrees with `check`.
        prop_assert_eq!(matches!(d, Decision::RunMalformed(_)), check(&s).is_err(), "{}", s);
    }
}
