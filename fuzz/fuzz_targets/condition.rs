//! `when:` conditions: parsed, evaluated against a small fixed scope, and printed back —
//! what the printer writes parses to the same expression.
#![no_main]

use std::collections::BTreeMap;

use bosun_plans::condition::{check, decide, parse, references};
use bosun_plans::template::{HostInfo, Scope};
use libfuzzer_sys::fuzz_target;
use serde_json::json;

fn scope() -> Scope {
    let vars: BTreeMap<String, serde_json::Value> = [
        ("name".to_string(), json!("web")),
        ("count".to_string(), json!(3)),
        ("ratio".to_string(), json!(0.5)),
        ("on".to_string(), json!(true)),
        ("list".to_string(), json!(["a", "b", 1])),
        ("map".to_string(), json!({"k": {"n": [1, 2]}})),
    ]
    .into_iter()
    .collect();
    Scope {
        env: vars.clone(),
        inputs: BTreeMap::from([("port".to_string(), json!(8080))]),
        vars,
        host: HostInfo {
            name: "web-1".into(),
            address: "10.0.0.1".into(),
            labels: vec!["web".into(), "eu".into()],
        },
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = check(text);
    let _ = decide(text, &scope());
    if let Ok(expr) = parse(text) {
        let _ = references(&expr);
        let printed = expr.to_string();
        match parse(&printed) {
            Ok(again) => assert_eq!(
                again.to_string(),
                printed,
                "printing is not stable for {text:?}"
            ),
            Err(e) => panic!("{text:?} printed as {printed:?}, which does not parse: {e:?}"),
        }
    }
});
