//! Property tests over this crate's parsers of outside input — state documents as the
//! state backend receives them, and cron schedules in a time zone — the stable-Rust
//! counterpart of the `state_json` and `cron` targets in `fuzz/`. Each runs a bounded
//! number of generated inputs and asserts: no panic, an error that names the field,
//! a bounded time per input, and the invariants a parsed value promises.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use bosun_core::cron::Schedule;
use bosun_core::state::{StateDoc, MAX_SERIAL};
use chrono::{TimeZone, Utc};
use proptest::prelude::*;

const PER_INPUT: Duration = Duration::from_secs(2);

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Numbers as a client might write a serial or version: in and out of every range.
fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<u64>().prop_map(|n| n.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        (MAX_SERIAL - 2..=MAX_SERIAL).prop_map(|n| n.to_string()),
        Just("18446744073709551616".to_string()),
        Just("1e400".to_string()),
        Just("1.5".to_string()),
        Just("\"7\"".to_string()),
        Just("null".to_string()),
    ]
}

const JSON_PIECES: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"version\"",
    "\"serial\"",
    "\"lineage\"",
    "\"outputs\"",
    "\"value\"",
    "\"sensitive\"",
    "4",
    "1",
    "-1",
    "true",
    "\"l\"",
    "\"\"",
    "null",
    "\"é\\u0000\"",
];

proptest! {
    #![proptest_config(config(512))]

    /// Any body: a document whose fields hold what they promise, or a refusal naming
    /// the problem.
    #[test]
    fn state_documents_never_panic(body in prop_oneof![
        prop::collection::vec(any::<u8>(), 0..256),
        prop::collection::vec(prop::sample::select(JSON_PIECES), 0..40).prop_map(|p| p.concat().into_bytes()),
    ]) {
        let started = Instant::now();
        let parsed = StateDoc::parse(&body);
        prop_assert!(started.elapsed() < PER_INPUT);
        match parsed {
            Ok(doc) => {
                prop_assert!(!doc.lineage.is_empty());
                prop_assert!(doc.serial <= MAX_SERIAL);
            }
            Err(e) => prop_assert!(e.0.len() > 10, "{}", e),
        }
    }

    /// The serial and version, written any way: accepted exactly when the store can keep
    /// them, otherwise refused naming the field.
    #[test]
    fn serials_are_accepted_only_when_the_store_keeps_them(serial in number(), version in number()) {
        let body = format!(r#"{{"version":{version},"serial":{serial},"lineage":"l"}}"#);
        match StateDoc::parse(body.as_bytes()) {
            Ok(doc) => {
                prop_assert_eq!(doc.serial.to_string(), serial);
                prop_assert!(doc.serial <= MAX_SERIAL);
            }
            Err(e) => {
                // A number JSON itself cannot hold (`1e400`) is refused where it is written.
                let named = e.0.contains("\"serial\"")
                    || e.0.contains("\"version\"")
                    || e.0.contains("not JSON: number out of range");
                prop_assert!(named, "{}", e);
                let fits = serial.parse::<u64>().is_ok_and(|s| s <= MAX_SERIAL);
                let version_ok = version.parse::<u64>().is_ok();
                prop_assert!(!(fits && version_ok), "refused {body}: {e}");
            }
        }
    }
}

const CRON_PIECES: &[&str] = &[
    "*",
    "*/",
    "0",
    "5",
    "15",
    "59",
    "60",
    "23",
    "24",
    "31",
    "32",
    "12",
    "13",
    "7",
    "-",
    ",",
    "/",
    " ",
    "  ",
    "MON",
    "sun",
    "JAN",
    "dec",
    "@daily",
    "@hourly",
    "@yearly",
    "@reboot",
    "L",
    "?",
    "1-5",
    "99999999999999999999",
    "\t",
    "é",
];

const ZONES: &[&str] = &[
    "UTC",
    "Europe/Paris",
    "America/New_York",
    "Australia/Lord_Howe",
    "Asia/Kathmandu",
    "Pacific/Chatham",
    "Nowhere/City",
    "",
    "utc",
    "Etc/GMT+12",
];

proptest! {
    #![proptest_config(config(512))]

    /// Any expression in any zone: a schedule whose fire times move forward, or an error
    /// naming the field — quickly.
    #[test]
    fn cron_schedules_never_panic(
        expr in prop_oneof![
            prop::collection::vec(prop::sample::select(CRON_PIECES), 0..14).prop_map(|p| p.concat()),
            ".{0,40}",
        ],
        tz in prop::sample::select(ZONES),
        at in 0i64..4_102_444_800,
    ) {
        let started = Instant::now();
        match Schedule::parse(&expr, tz) {
            Ok(schedule) => {
                let now = Utc.timestamp_opt(at, 0).single().unwrap();
                let next = schedule.next_after(now);
                prop_assert!(next.is_some(), "{expr:?} in {tz}: no fire time after {now}");
                let next = next.unwrap();
                prop_assert!(next > now);
                if let Some(after) = schedule.next_after(next) {
                    prop_assert!(after > next, "{expr:?} in {tz}: {after} not after {next}");
                }
                let _ = schedule.interval_after(now);
            }
            Err(e) => prop_assert!(
                matches!(e.field.as_str(), "schedule" | "cron" | "timezone") && !e.message.is_empty(),
                "{e:?}"
            ),
        }
        prop_assert!(started.elapsed() < PER_INPUT, "{expr:?} in {tz} took {:?}", started.elapsed());
    }
}
