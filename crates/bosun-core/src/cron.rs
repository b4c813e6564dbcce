//! Cron schedules in a time zone: five-field expressions (minute, hour, day of month,
//! month, day of week) with lists, ranges, steps and names, plus the `@hourly`-style
//! macros, and the next fire time after an instant.
//!
//! Fire times are wall-clock times in the schedule's IANA zone, and daylight-saving
//! changes follow one stated rule:
//! - a local time that does not exist (clocks jump forward over it) fires once, at the
//!   first instant after the jump (`30 2 * * *` fires at 03:00 on that day);
//! - a local time that happens twice (clocks fall back) fires once, at its first
//!   occurrence; the repeated hour fires nothing more.
//!
//! As in Vixie cron, when both day of month and day of week are restricted (neither is
//! `*`) a day matches if either does.

use chrono::{DateTime, Datelike, Duration, NaiveDate, NaiveDateTime, TimeZone, Timelike, Utc};
use chrono_tz::Tz;

use crate::ValidationError;

/// A parsed schedule bound to its time zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    expression: String,
    tz: Tz,
    minutes: u64,
    hours: u32,
    /// Bits 1..=31.
    days: u32,
    /// Bits 1..=12.
    months: u16,
    /// Bits 0..=6, Sunday = 0.
    weekdays: u8,
    days_star: bool,
    weekdays_star: bool,
}

/// How far ahead a search looks: two leap-year cycles, so `0 0 29 2 *` always fires.
const SEARCH_DAYS: i64 = 8 * 366 + 2;

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/// Parses an IANA time zone name (`Europe/Berlin`, `UTC`).
pub fn parse_timezone(name: &str) -> Result<Tz, ValidationError> {
    name.trim().parse::<Tz>().map_err(|_| {
        ValidationError::new(
            "timezone",
            format!(
                "unknown time zone {name:?}; use an IANA name such as \"UTC\" or \"Europe/Berlin\""
            ),
        )
    })
}

struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
    /// The first name's number (`jan` = 1, `sun` = 0).
    names_from: u32,
}

const FIELDS: [Field; 5] = [
    Field {
        name: "minute",
        min: 0,
        max: 59,
        names: &[],
        names_from: 0,
    },
    Field {
        name: "hour",
        min: 0,
        max: 23,
        names: &[],
        names_from: 0,
    },
    Field {
        name: "day of month",
        min: 1,
        max: 31,
        names: &[],
        names_from: 0,
    },
    Field {
        name: "month",
        min: 1,
        max: 12,
        names: &MONTHS,
        names_from: 1,
    },
    // 7 is Sunday too; folded into 0 after parsing.
    Field {
        name: "day of week",
        min: 0,
        max: 7,
        names: &WEEKDAYS,
        names_from: 0,
    },
];

impl Field {
    fn value(&self, s: &str) -> Result<u32, String> {
        let lower = s.to_ascii_lowercase();
        if let Some(i) = self.names.iter().position(|n| *n == lower) {
            return Ok(self.names_from + i as u32);
        }
        let v: u32 = s.parse().map_err(|_| {
            if self.names.is_empty() {
                format!("{} {s:?} is not a number", self.name)
            } else {
                format!(
                    "{} {s:?} is neither a number nor one of {}",
                    self.name,
                    self.names.join(", ")
                )
            }
        })?;
        if v < self.min || v > self.max {
            return Err(format!(
                "{} {v} is out of range {}-{}",
                self.name, self.min, self.max
            ));
        }
        Ok(v)
    }

    /// The set of values of one field as bits.
    fn parse(&self, text: &str) -> Result<u64, String> {
        let mut bits = 0u64;
        for item in text.split(',') {
            if item.is_empty() {
                return Err(format!("{} {text:?} has an empty list item", self.name));
            }
            let (range, step) = match item.split_once('/') {
                Some((r, s)) => {
                    let step: u32 = s.parse().ok().filter(|s| *s > 0).ok_or_else(|| {
                        format!("{} step {s:?} must be a positive number", self.name)
                    })?;
                    (r, Some(step))
                }
                None => (item, None),
            };
            let (lo, hi) = if range == "*" {
                (self.min, self.max)
            } else if let Some((a, b)) = range.split_once('-') {
                let (a, b) = (self.value(a)?, self.value(b)?);
                if a > b {
                    return Err(format!("{} range {range:?} runs backwards", self.name));
                }
                (a, b)
            } else {
                let a = self.value(range)?;
                // `5/15` means from 5 to the end, every 15 (as Vixie cron reads it).
                (a, if step.is_some() { self.max } else { a })
            };
            let step = step.unwrap_or(1);
            // A step past the field's end (up to u32::MAX) selects `lo` alone.
            let mut v = Some(lo);
            while let Some(x) = v.filter(|x| *x <= hi) {
                bits |= 1 << x;
                v = x.checked_add(step);
            }
        }
        Ok(bits)
    }
}

impl Schedule {
    /// Parses a cron expression in the IANA zone `timezone`. Errors name the field:
    /// `schedule` or `timezone`.
    pub fn parse(expression: &str, timezone: &str) -> Result<Schedule, ValidationError> {
        let tz = parse_timezone(timezone)?;
        let expression = expression.trim().to_string();
        let bad = |m: String| {
            ValidationError::new("schedule", format!("invalid cron {expression:?}: {m}"))
        };
        let expanded = match expression.to_ascii_lowercase().as_str() {
            "@yearly" | "@annually" => "0 0 1 1 *".to_string(),
            "@monthly" => "0 0 1 * *".to_string(),
            "@weekly" => "0 0 * * 0".to_string(),
            "@daily" | "@midnight" => "0 0 * * *".to_string(),
            "@hourly" => "0 * * * *".to_string(),
            s if s.starts_with('@') => {
                return Err(bad(
                    "unknown macro; use @yearly, @monthly, @weekly, @daily or @hourly".into(),
                ))
            }
            _ => expression.clone(),
        };
        let parts: Vec<&str> = expanded.split_whitespace().collect();
        if parts.len() != 5 {
            return Err(bad(format!(
                "expected 5 fields (minute hour day-of-month month day-of-week), found {}",
                parts.len()
            )));
        }
        let mut bits = [0u64; 5];
        for (i, (field, text)) in FIELDS.iter().zip(&parts).enumerate() {
            bits[i] = field.parse(text).map_err(bad)?;
        }
        let mut weekdays = bits[4];
        if weekdays & (1 << 7) != 0 {
            weekdays = (weekdays & !(1 << 7)) | 1;
        }
        let schedule = Schedule {
            tz,
            minutes: bits[0],
            hours: bits[1] as u32,
            days: bits[2] as u32,
            months: bits[3] as u16,
            weekdays: weekdays as u8,
            days_star: parts[2] == "*",
            weekdays_star: parts[4] == "*",
            expression: expression.clone(),
        };
        // `0 0 31 2 *` parses but never fires: refuse it rather than never check.
        let probe = Utc.with_ymd_and_hms(2000, 1, 1, 0, 0, 0).single();
        if probe.and_then(|p| schedule.next_after(p)).is_none() {
            return Err(bad("it never fires (no such date)".into()));
        }
        Ok(schedule)
    }

    pub fn expression(&self) -> &str {
        &self.expression
    }

    pub fn timezone(&self) -> Tz {
        self.tz
    }

    fn day_matches(&self, d: NaiveDate) -> bool {
        if self.months & (1 << d.month()) == 0 {
            return false;
        }
        let dom = self.days & (1 << d.day()) != 0;
        let dow = self.weekdays & (1 << d.weekday().num_days_from_sunday()) != 0;
        if self.days_star || self.weekdays_star {
            dom && dow
        } else {
            dom || dow
        }
    }

    /// The instant a local wall time means in the schedule's zone: the first of two in a
    /// repeated hour, the end of the jump for a skipped one.
    fn resolve(&self, local: NaiveDateTime) -> Option<DateTime<Utc>> {
        if let Some(t) = self.tz.from_local_datetime(&local).earliest() {
            return Some(t.with_timezone(&Utc));
        }
        // Inside a jump forward: clocks change on a minute, and no jump is longer than a
        // day, so the first existing minute after it is the jump's end.
        (1..=24 * 60).find_map(|m| {
            self.tz
                .from_local_datetime(&(local + Duration::minutes(m)))
                .earliest()
                .map(|t| t.with_timezone(&Utc))
        })
    }

    /// The first fire time strictly after `after`; `None` if there is none within eight
    /// years (only for schedules that never fire, which [`Schedule::parse`] refuses).
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // Local times map to instants in order, so start a little before `after`'s wall
        // time (further back than any zone's offset change) and take the first later one.
        let local = after.with_timezone(&self.tz).naive_local() - Duration::hours(3);
        let start = local.with_second(0)?.with_nanosecond(0)?;
        let first_day = start.date();
        for offset in 0..SEARCH_DAYS {
            let day = first_day.checked_add_signed(Duration::days(offset))?;
            if !self.day_matches(day) {
                continue;
            }
            for hour in 0..24u32 {
                if self.hours & (1 << hour) == 0 {
                    continue;
                }
                for minute in 0..60u32 {
                    if self.minutes & (1 << minute) == 0 {
                        continue;
                    }
                    let candidate = day.and_hms_opt(hour, minute, 0)?;
                    if candidate < start {
                        continue;
                    }
                    match self.resolve(candidate) {
                        Some(t) if t > after => return Some(t),
                        _ => {}
                    }
                }
            }
        }
        None
    }

    /// The schedule's interval at `after`: the gap between the next two fire times.
    pub fn interval_after(&self, after: DateTime<Utc>) -> Option<Duration> {
        let a = self.next_after(after)?;
        let b = self.next_after(a)?;
        Some(b - a)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn fires(expr: &str, tz: &str, from: &str, n: usize) -> Vec<String> {
        let s = Schedule::parse(expr, tz).unwrap();
        let mut t = utc(from);
        let mut out = Vec::new();
        for _ in 0..n {
            t = s.next_after(t).unwrap();
            out.push(t.with_timezone(&s.timezone()).to_rfc3339());
        }
        out
    }

    #[test]
    fn fields_lists_ranges_steps_names() {
        assert_eq!(
            fires("*/20 9-10 * * *", "UTC", "2024-03-01T08:59:00Z", 4),
            [
                "2024-03-01T09:00:00+00:00",
                "2024-03-01T09:20:00+00:00",
                "2024-03-01T09:40:00+00:00",
                "2024-03-01T10:00:00+00:00"
            ]
        );
        // Weekdays by name, months by name, a list and a stepped range.
        assert_eq!(
            fires("0 6 * jan,Mar MON-wed", "UTC", "2024-02-28T00:00:00Z", 3),
            [
                "2024-03-04T06:00:00+00:00",
                "2024-03-05T06:00:00+00:00",
                "2024-03-06T06:00:00+00:00"
            ]
        );
        assert_eq!(
            fires("5/30 0 1-10/5 * *", "UTC", "2024-01-01T00:00:00Z", 4),
            [
                "2024-01-01T00:05:00+00:00",
                "2024-01-01T00:35:00+00:00",
                "2024-01-06T00:05:00+00:00",
                "2024-01-06T00:35:00+00:00"
            ]
        );
        // 7 is Sunday; day of month OR day of week when both are restricted.
        assert_eq!(
            fires("0 0 13 * 7", "UTC", "2024-09-01T00:00:00Z", 3),
            [
                "2024-09-08T00:00:00+00:00",
                "2024-09-13T00:00:00+00:00",
                "2024-09-15T00:00:00+00:00"
            ]
        );
        assert_eq!(
            fires("@daily", "UTC", "2024-01-01T00:00:00Z", 1),
            ["2024-01-02T00:00:00+00:00"]
        );
        assert_eq!(
            fires("0 0 29 2 *", "UTC", "2025-01-01T00:00:00Z", 1),
            ["2028-02-29T00:00:00+00:00"]
        );
    }

    #[test]
    fn time_zone_is_respected() {
        // 09:00 in Tokyo is 00:00 UTC.
        assert_eq!(
            fires("0 9 * * *", "Asia/Tokyo", "2024-06-01T01:00:00Z", 1),
            ["2024-06-02T09:00:00+09:00"]
        );
        let s = Schedule::parse("0 9 * * *", "America/New_York").unwrap();
        assert_eq!(
            s.next_after(utc("2024-06-01T00:00:00Z")).unwrap(),
            utc("2024-06-01T13:00:00Z")
        );
        assert_eq!(
            s.next_after(utc("2024-12-01T00:00:00Z")).unwrap(),
            utc("2024-12-01T14:00:00Z")
        );
    }

    #[test]
    fn daylight_saving_jumps() {
        // Berlin springs forward 2024-03-31 02:00 → 03:00: 02:30 fires once, at 03:00.
        assert_eq!(
            fires("30 2 * * *", "Europe/Berlin", "2024-03-30T12:00:00Z", 2),
            ["2024-03-31T03:00:00+02:00", "2024-04-01T02:30:00+02:00"]
        );
        // Every 15 minutes across the gap: the skipped hour collapses into one fire.
        assert_eq!(
            fires("*/30 * * * *", "Europe/Berlin", "2024-03-31T00:15:00Z", 3),
            [
                "2024-03-31T01:30:00+01:00",
                "2024-03-31T03:00:00+02:00",
                "2024-03-31T03:30:00+02:00"
            ]
        );
        // Falls back 2024-10-27 03:00 → 02:00: 02:30 fires once, the first time.
        assert_eq!(
            fires("30 2 * * *", "Europe/Berlin", "2024-10-26T12:00:00Z", 2),
            ["2024-10-27T02:30:00+02:00", "2024-10-28T02:30:00+01:00"]
        );
        // Hourly through the repeated hour: 02:00 (first), then 03:00; never backwards.
        assert_eq!(
            fires("0 * * * *", "Europe/Berlin", "2024-10-26T23:30:00Z", 3),
            [
                "2024-10-27T02:00:00+02:00",
                "2024-10-27T03:00:00+01:00",
                "2024-10-27T04:00:00+01:00"
            ]
        );
        // From inside the second pass of the repeated hour, the next fire is later.
        let s = Schedule::parse("*/10 * * * *", "Europe/Berlin").unwrap();
        let second_pass = utc("2024-10-27T01:15:00Z"); // 02:15 +01:00
        let next = s.next_after(second_pass).unwrap();
        assert_eq!(next, utc("2024-10-27T02:00:00Z")); // 03:00 +01:00
    }

    #[test]
    fn refusals_name_the_field() {
        for (expr, tz, field, needle) in [
            ("* * * *", "UTC", "schedule", "expected 5 fields"),
            (
                "60 * * * *",
                "UTC",
                "schedule",
                "minute 60 is out of range 0-59",
            ),
            (
                "* * * foo *",
                "UTC",
                "schedule",
                "neither a number nor one of jan",
            ),
            ("*/0 * * * *", "UTC", "schedule", "step"),
            ("5-1 * * * *", "UTC", "schedule", "runs backwards"),
            ("0 0 31 2 *", "UTC", "schedule", "never fires"),
            ("@often", "UTC", "schedule", "unknown macro"),
            ("1,,2 * * * *", "UTC", "schedule", "empty list item"),
            ("0 * * * *", "Mars/Olympus", "timezone", "unknown time zone"),
        ] {
            let e = Schedule::parse(expr, tz).unwrap_err();
            assert_eq!(e.field, field, "{expr}: {e}");
            assert!(e.message.contains(needle), "{expr}: {e}");
        }
    }

    #[test]
    fn a_huge_step_selects_the_start_alone() {
        // Found by the `cron` fuzz target: `1 + u32::MAX` overflowed (and wrapped to
        // minute 0 in release builds).
        for expr in ["1/4294967295 * * * *", "2/4294967294 * * * *"] {
            let s = Schedule::parse(expr, "UTC").unwrap();
            assert_eq!(s.minutes, 1 << expr[..1].parse::<u32>().unwrap(), "{expr}");
        }
        assert_eq!(
            fires("2/4294967295 0 * * *", "UTC", "2024-01-01T00:00:00Z", 2),
            ["2024-01-01T00:02:00+00:00", "2024-01-02T00:02:00+00:00"]
        );
    }

    #[test]
    fn interval_is_the_gap_between_the_next_two_fires() {
        let s = Schedule::parse("0 */6 * * *", "UTC").unwrap();
        assert_eq!(
            s.interval_after(utc("2024-01-01T00:30:00Z")).unwrap(),
            Duration::hours(6)
        );
    }

    fn field(min: u32, max: u32) -> impl Strategy<Value = String> {
        let item = prop_oneof![
            (min..=max).prop_map(|v| v.to_string()),
            (min..=max, min..=max).prop_map(|(a, b)| format!("{}-{}", a.min(b), a.max(b))),
            (min..=max, min..=max, 1u32..7).prop_map(|(a, b, s)| format!(
                "{}-{}/{s}",
                a.min(b),
                a.max(b)
            )),
        ];
        prop_oneof![
            Just("*".to_string()),
            (1..=max.max(2)).prop_map(|s| format!("*/{s}")),
            prop::collection::vec(item, 1..4).prop_map(|v| v.join(",")),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// In UTC the next fire time agrees with croner, an independent implementation.
        #[test]
        fn agrees_with_croner_in_utc(
            m in field(0, 59), h in field(0, 23), dom in field(1, 28), mon in field(1, 12),
            dow in field(0, 6), start in 946_684_800i64..4_102_444_800,
        ) {
            let expr = format!("{m} {h} {dom} {mon} {dow}");
            let ours = Schedule::parse(&expr, "UTC").unwrap();
            let theirs = croner::Cron::new(&expr).parse().unwrap();
            let t = Utc.timestamp_opt(start, 0).unwrap();
            prop_assert_eq!(ours.next_after(t), theirs.find_next_occurrence(&t, false).ok());
        }

        /// In zones with daylight saving, fires always move forward, and each one is a
        /// matching wall time or the end of a jump that skipped one.
        #[test]
        fn forward_and_matching_across_dst(
            m in field(0, 59), h in field(0, 23), start in 1_600_000_000i64..1_800_000_000,
            zone in prop::sample::select(vec!["Europe/Berlin", "America/New_York",
                "Australia/Lord_Howe", "America/Santiago"]),
        ) {
            let s = Schedule::parse(&format!("{m} {h} * * *"), zone).unwrap();
            let mut t = Utc.timestamp_opt(start, 0).unwrap();
            for _ in 0..20 {
                let next = s.next_after(t).unwrap();
                prop_assert!(next > t);
                let local = next.with_timezone(&s.tz).naive_local();
                let matches = s.hours & (1 << local.hour()) != 0
                    && s.minutes & (1 << local.minute()) != 0;
                let after_jump = s.tz.offset_from_utc_datetime(&(next - Duration::minutes(1)).naive_utc())
                    != s.tz.offset_from_utc_datetime(&next.naive_utc());
                prop_assert!(matches || after_jump, "{} fired at {}", s.expression, local);
                t = next;
            }
        }
    }
}
