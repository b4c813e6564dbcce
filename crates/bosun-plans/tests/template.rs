//! Templating: the four layers of `vars`, the namespaces, host fields, value
//! rendering, unresolved references collected, syntax errors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;

use bosun_plans::model::{parse_inventory, parse_plan, Inventory, Plan};
use bosun_plans::template::{check, references, render, HostInfo, Scope};
use proptest::prelude::*;
use serde_json::{json, Value};

const PLAN: &str = r#"name: layers
inputs:
  release: { default: "1.0" }
  x: { default: from-input-default }
  bare: { description: no default }
vars:
  x: from-plan
  only_plan: p
  y: from-plan
  z: from-plan
  w: from-plan
steps:
  - command: "true"
"#;

const INVENTORY: &str = r#"environments:
  prod: { vars: { x: from-env, y: from-env, z: from-env, only_env: e } }
hosts:
  web-1:
    address: 10.0.0.1
    environment: prod
    labels: [web, db]
    vars: { x: from-host, y: from-host, only_host: h }
  lone: {}
"#;

fn fixtures() -> (Plan, Inventory) {
    (
        parse_plan(Path::new("p.yaml"), PLAN).unwrap(),
        parse_inventory(Path::new("i.yaml"), INVENTORY).unwrap(),
    )
}

fn scope(host: usize, inputs: Value) -> Scope {
    let (plan, inv) = fixtures();
    let inputs: BTreeMap<String, Value> = serde_json::from_value(inputs).unwrap();
    Scope::for_host(&plan, &inv, &inv.hosts[host], &inputs)
}

fn r(template: &str, scope: &Scope) -> (String, Vec<String>) {
    let out = render(template, scope).unwrap();
    (out.text, out.unresolved)
}

#[test]
fn vars_layers_plan_then_environment_then_host_then_inputs() {
    let s = scope(0, json!({"x": "from-override"}));
    let t = "{{ vars.x }}|{{ vars.y }}|{{ vars.z }}|{{ vars.w }}";
    // x: every layer, the run's override wins; y: host over environment over plan;
    // z: environment over plan; w: plan only.
    assert_eq!(r(t, &s).0, "from-override|from-host|from-env|from-plan");
    // Without an override, the input's default is the top layer.
    assert_eq!(
        r(t, &scope(0, json!({}))).0,
        "from-input-default|from-host|from-env|from-plan"
    );
    // Keys from each layer show through.
    assert_eq!(
        r(
            "{{ vars.only_plan }}{{ vars.only_env }}{{ vars.only_host }}",
            &s
        )
        .0,
        "peh"
    );
    // A host without an environment or vars: plan vars and inputs only.
    let lone = scope(1, json!({}));
    assert_eq!(r("{{ vars.y }}", &lone).0, "from-plan");
    assert_eq!(r("{{ vars.x }}", &lone).0, "from-input-default");
    let (text, unresolved) = r("[{{ vars.only_env }}]", &lone);
    assert_eq!(
        (text.as_str(), unresolved),
        ("[]", vec!["vars.only_env".to_string()])
    );
}

#[test]
fn env_and_inputs_namespaces_are_their_layer_only() {
    let s = scope(0, json!({"release": "2.0", "extra": 5}));
    assert_eq!(r("{{ env.x }} {{ env.only_env }}", &s).0, "from-env e");
    let (text, unresolved) = r("{{ env.only_host }}|{{ env.only_plan }}", &s);
    assert_eq!(text, "|");
    assert_eq!(unresolved, ["env.only_host", "env.only_plan"]);
    // Inputs: overrides over defaults; the other layers are not there.
    assert_eq!(
        r("{{ inputs.release }} {{ inputs.x }} {{ inputs.extra }}", &s).0,
        "2.0 from-input-default 5"
    );
    assert_eq!(r("{{ inputs.release }}", &scope(0, json!({}))).0, "1.0");
    assert_eq!(r("{{ vars.release }}", &s).0, "2.0");
    let (_, unresolved) = r("{{ inputs.only_plan }}{{ inputs.bare }}", &s);
    assert_eq!(unresolved, ["inputs.only_plan", "inputs.bare"]);
    // The scope itself.
    assert_eq!(s.env.get("only_host"), None);
    assert_eq!(s.inputs.get("release"), Some(&json!("2.0")));
    assert_eq!(s.vars.get("only_host"), Some(&json!("h")));
}

#[test]
fn host_fields() {
    let s = scope(0, json!({}));
    assert_eq!(
        r("{{ host.name }}@{{ host.address }} {{ host.labels }} {{ host.labels[1] }} {{ host.labels | join(',') }}", &s).0,
        "web-1@10.0.0.1 ['web', 'db'] db web,db"
    );
    assert_eq!(
        r("{% for l in host.labels %}{{ l }};{% endfor %}", &s).0,
        "web;db;"
    );
    let lone = scope(1, json!({}));
    assert_eq!(
        r("{{ host.address }} {{ host.labels }}", &lone).0,
        "lone []"
    );
    let (_, unresolved) = r("{{ host.port }}", &lone);
    assert_eq!(unresolved, ["host.port"]);
}

fn plain_scope(vars: Value) -> Scope {
    Scope {
        vars: serde_json::from_value(vars).unwrap(),
        host: HostInfo {
            name: "h".into(),
            address: "a".into(),
            labels: vec![],
            facts: None,
        },
        ..Scope::default()
    }
}

#[test]
fn values_render_as_text() {
    let s = plain_scope(json!({
        "s": "text", "i": 3, "neg": -7, "f": 1.5, "one": 1.0, "t": true, "no": false,
        "nil": null, "list": ["a", 1, true], "map": {"k": "v"}, "big": 18446744073709551615u64
    }));
    let cases = [
        ("{{ vars.s }}", "text"),
        ("{{ vars.i }}", "3"),
        ("{{ vars.neg }}", "-7"),
        ("{{ vars.f }}", "1.5"),
        ("{{ vars.one }}", "1.0"),
        ("{{ vars.t }} {{ vars.no }}", "true false"),
        ("[{{ vars.nil }}]", "[]"),
        ("{{ vars.list }}", "['a', 1, True]"),
        ("{{ vars.map }}", "{'k': 'v'}"),
        ("{{ vars.map.k }}", "v"),
        ("{{ vars.big }}", "18446744073709551615"),
        ("{{ vars.i + 1 }}", "4"),
        ("{{ vars.s | upper }}", "TEXT"),
        ("<{{ vars.s }}>&", "<text>&"),
        ("no template here {", "no template here {"),
        ("line\n", "line\n"),
        ("{% if vars.t %}\nyes\n{% endif %}\n", "yes\n"),
        ("{% for i in range(3) %}{{ i }}{% endfor %}", "012"),
        ("{# a comment #}x", "x"),
    ];
    for (t, want) in cases {
        let out = render(t, &s).unwrap();
        assert_eq!(out.text, want, "{t}");
        assert!(out.unresolved.is_empty(), "{t}: {:?}", out.unresolved);
    }
}

#[test]
fn unresolved_references_render_empty_and_are_collected_as_written() {
    let s = plain_scope(json!({"db": {"host": "x"}, "a": "A"}));
    let cases: &[(&str, &str, &[&str])] = &[
        ("[{{ vars.missing }}]", "[]", &["vars.missing"]),
        (
            "{{ vars.missing }}{{ vars.missing }}{{ env.e }}",
            "",
            &["vars.missing", "env.e"],
        ),
        ("{{ vars.db.port }}", "", &["vars.db.port"]),
        ("{{ vars.missing.deeper }}", "", &["vars.missing"]),
        ("{{ foo }}-{{ vars.a }}", "-A", &["foo"]),
        (
            "/srv/{{ vars.app }}/app.conf",
            "/srv//app.conf",
            &["vars.app"],
        ),
        ("{{ 'x' ~ vars.nope ~ 'y' }}", "xy", &["vars.nope"]),
        ("{{ vars.nope | upper }}", "", &["vars.nope"]),
        ("{% if vars.flag %}on{% endif %}", "", &["vars.flag"]),
        (
            "{% for x in vars.items %}{{ x }}{% endfor %}",
            "",
            &["vars.items"],
        ),
        // Guards are not misses.
        ("{{ vars.missing | default('d') }}", "d", &[]),
        ("{{ vars.missing | d('d') }}", "d", &[]),
        ("{{ vars.db.port | default(5432) }}", "5432", &[]),
        ("{% if vars.missing is defined %}x{% endif %}", "", &[]),
        ("{% if vars.missing is undefined %}u{% endif %}", "u", &[]),
        (
            "{{ vars.other }}{{ vars.missing | default('') }}",
            "",
            &["vars.other"],
        ),
        // Branches not taken are not evaluated.
        ("{% if false %}{{ vars.never }}{% endif %}", "", &[]),
    ];
    for (t, want, unresolved) in cases {
        let out = render(t, &s).unwrap();
        assert_eq!(out.text, *want, "{t}");
        assert_eq!(out.unresolved, *unresolved, "{t}");
    }
}

#[test]
fn syntax_errors_are_errors() {
    let s = plain_scope(json!({}));
    for bad in [
        "{{ vars.x",
        "{% if vars.x %}no end",
        "{{ vars. }}",
        "{% endfor %}",
        "{{ vars.x | no_such_filter }}",
    ] {
        let e = render(bad, &s).unwrap_err();
        assert_eq!(e.template, bad);
        assert!(!e.message.is_empty());
    }
    assert!(check("{{ vars.x").is_err());
    assert!(check("{{ vars.x }}").is_ok());
    assert!(check("plain").is_ok());
}

/// `host.facts.*` once the facts are in the scope; before (and for an unknown fact) an
/// unresolved reference named as written. References keep a fact's name.
#[test]
fn host_facts_render_once_gathered() {
    let mut s = scope(0, json!({}));
    let t = "{{ host.facts.os_family }}/{{ host.facts.arch }}";
    assert_eq!(r(t, &s), ("/".into(), vec!["host.facts".into()]));
    s.host.facts = Some(bosun_plans::facts::Facts {
        os_family: "redhat".into(),
        distribution: "rocky".into(),
        version: "9.3".into(),
        arch: "x86_64".into(),
        hostname: "web-1".into(),
    });
    assert_eq!(r(t, &s), ("redhat/x86_64".into(), vec![]));
    assert_eq!(
        r(
            "{% if host.facts.os_family == 'redhat' %}dnf{% endif %} {{ host.facts.version }} {{ host.facts.nope }}",
            &s
        ),
        ("dnf 9.3 ".into(), vec!["host.facts.nope".into()])
    );
    assert_eq!(
        references(
            "{{ host.facts.arch }} {{ host.facts.nope.deeper }} {{ host.facts }} {{ host.name.x }}"
        )
        .unwrap(),
        [
            "host.facts",
            "host.facts.arch",
            "host.facts.nope",
            "host.name"
        ]
    );
}

#[test]
fn references_are_listed_without_rendering() {
    assert_eq!(
        references("{{ vars.a }} {{ vars.b.c }} {{ env.e | default('x') }} {% for l in host.labels %}{{ l }}{{ loop.index }}{% endfor %} {{ foo }} {{ range(2) }} {{ vars['k'] }}").unwrap(),
        ["env.e", "foo", "host.labels", "vars.a", "vars.b"]
    );
    assert!(references("{{ x").is_err());
    assert!(references("no tags").unwrap().is_empty());
}

proptest! {
    /// Any value renders as itself, however odd its characters.
    #[test]
    fn a_string_value_renders_as_itself(v in any::<String>()) {
        let s = plain_scope(json!({"x": v}));
        let out = render("{{ vars.x }}", &s).unwrap();
        prop_assert_eq!(out.text, v);
        prop_assert!(out.unresolved.is_empty());
    }

    /// Text without template tags comes back unchanged.
    #[test]
    fn plain_text_is_unchanged(t in "[^{]*") {
        let out = render(&t, &plain_scope(json!({}))).unwrap();
        prop_assert_eq!(out.text, t);
    }

    /// Rendering never panics, whatever the input.
    #[test]
    fn render_never_panics(t in "(\\{\\{|\\}\\}|\\{%|%\\}|vars|\\.|x| |\\||'|\\(|\\)|[a-z0-9])*") {
        let _ = render(&t, &plain_scope(json!({"x": 1})));
    }
}
