//! Cron schedules in a time zone. Input: the time zone name, a newline, then the
//! expression. A schedule that parses fires after "now" (a fixed instant and the
//! clock), and its next fire times increase.
#![no_main]

use bosun_core::cron::Schedule;
use chrono::{TimeZone, Utc};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (tz, expr) = text.split_once('\n').unwrap_or(("UTC", text));
    let Ok(schedule) = Schedule::parse(expr, tz) else {
        return;
    };
    for now in [
        Utc.with_ymd_and_hms(2026, 3, 29, 0, 30, 0).single(),
        Some(Utc::now()),
    ]
    .into_iter()
    .flatten()
    {
        let next = schedule.next_after(now);
        let Some(next) = next else {
            panic!("{expr:?} in {tz:?} parsed but has no fire time after {now}");
        };
        assert!(next > now, "{expr:?} in {tz:?}: {next} is not after {now}");
        if let Some(after) = schedule.next_after(next) {
            assert!(
                after > next,
                "{expr:?} in {tz:?}: {after} is not after {next}"
            );
        }
    }
});
