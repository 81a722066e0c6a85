//! The headers of delayed records and of records waiting in a delay topic.
//!
//! | header | on | value |
//! |---|---|---|
//! | `share.not-before` | any record | when it may run, RFC 3339 (`2026-12-24T18:00:00.000Z`, or with an offset such as `+01:00`); before that the worker holds it or moves it to the delay topic |
//! | `share.attempt` | delay-topic records | handler attempts (deliveries) the record used before it was moved, decimal; its next attempt is this plus the delay record's own delivery count |
//! | `share.origin.topic` | delay-topic records | the topic it was moved from (its route) |
//! | `share.origin.partition` | delay-topic records | the partition it was moved from, decimal |
//! | `share.origin.offset` | delay-topic records | the offset it was moved from, decimal |
//!
//! Only the worker writes `share.attempt` and `share.origin.*`, and it reads them only on records
//! of a delay topic: on any other record they are ordinary headers.

use std::time::{Duration, SystemTime};

/// When the record may run (RFC 3339).
pub const NOT_BEFORE: &str = "share.not-before";
/// Handler attempts used before the record was moved to the delay topic.
pub const ATTEMPT: &str = "share.attempt";
/// The topic a delay-topic record was moved from.
pub const ORIGIN_TOPIC: &str = "share.origin.topic";
/// The partition a delay-topic record was moved from.
pub const ORIGIN_PARTITION: &str = "share.origin.partition";
/// The offset a delay-topic record was moved from.
pub const ORIGIN_OFFSET: &str = "share.origin.offset";

/// Whether `key` is one of the headers the worker sets when it moves a record (they are replaced,
/// never repeated, on every move).
pub fn is_delay_header(key: &str) -> bool {
    matches!(
        key,
        NOT_BEFORE | ATTEMPT | ORIGIN_TOPIC | ORIGIN_PARTITION | ORIGIN_OFFSET
    )
}

/// `at` as the value of [`NOT_BEFORE`]: RFC 3339 in UTC with milliseconds, rounded up to the
/// next whole millisecond: a time cut down would let the job run up to a millisecond early.
pub fn format_not_before(at: SystemTime) -> String {
    let past_ms = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| since.subsec_nanos() % 1_000_000);
    let at = match past_ms {
        0 => at,
        past => at + std::time::Duration::from_nanos(u64::from(1_000_000 - past)),
    };
    humantime::format_rfc3339_millis(at).to_string()
}

/// The time in a [`NOT_BEFORE`] value: RFC 3339 with `Z` or a `±hh:mm` offset, seconds with an
/// optional fraction. The error says what is wrong; it never panics on any bytes.
pub fn parse_not_before(value: &[u8]) -> Result<SystemTime, String> {
    let text = std::str::from_utf8(value)
        .map_err(|_| "share.not-before is not UTF-8".to_owned())?
        .trim();
    let bad = |why: &str| format!("share.not-before {text:?} is not an RFC 3339 time: {why}");
    if text.len() > 64 {
        return Err(bad("too long"));
    }
    let upper = text.to_ascii_uppercase();
    let text = upper.as_str();
    // The offset: `Z`, or `+hh:mm` / `-hh:mm` after the time (the date has `-` too, so look only
    // past the `T`).
    let time_at = text
        .find(['T', ' '])
        .ok_or_else(|| bad("no `T` between date and time"))?;
    let (local, offset) = if let Some(local) = text.strip_suffix('Z') {
        (local, 0i64)
    } else {
        let sign_at = text[time_at..]
            .rfind(['+', '-'])
            .map(|i| i + time_at)
            .ok_or_else(|| bad("no `Z` or `±hh:mm` offset"))?;
        let (local, offset) = text.split_at(sign_at);
        let sign = if offset.starts_with('-') { -1 } else { 1 };
        let digits = &offset[1..];
        let (hours, minutes) = digits
            .split_once(':')
            .ok_or_else(|| bad("the offset is not `±hh:mm`"))?;
        let number = |s: &str, max: i64| {
            s.parse::<i64>()
                .ok()
                .filter(|n| s.len() == 2 && (0..=max).contains(n))
        };
        let (Some(hours), Some(minutes)) = (number(hours, 23), number(minutes, 59)) else {
            return Err(bad("the offset is not `±hh:mm`"));
        };
        (local, sign * (hours * 3600 + minutes * 60))
    };
    let utc = humantime::parse_rfc3339_weak(local).map_err(|err| bad(&err.to_string()))?;
    let shift = Duration::from_secs(offset.unsigned_abs());
    // `+02:00` means the local time is two hours ahead of UTC.
    let at = if offset >= 0 {
        utc.checked_sub(shift)
    } else {
        utc.checked_add(shift)
    };
    at.ok_or_else(|| bad("out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64, millis: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(millis)
    }

    /// A time between two milliseconds is written as the later one: never earlier than asked.
    #[test]
    fn a_fraction_of_a_millisecond_rounds_up() {
        let when = at(1_798_101_600, 250) + Duration::from_micros(1);
        let text = format_not_before(when);
        assert_eq!(text, "2026-12-24T08:40:00.251Z");
        assert!(parse_not_before(text.as_bytes()).unwrap() >= when);
        let whole = at(1_798_101_600, 999) + Duration::from_nanos(999_999);
        assert_eq!(format_not_before(whole), "2026-12-24T08:40:01.000Z");
    }

    #[test]
    fn formats_utc_with_milliseconds_and_parses_it_back() {
        let when = at(1_798_101_600, 250);
        let text = format_not_before(when);
        assert_eq!(text, "2026-12-24T08:40:00.250Z");
        assert_eq!(parse_not_before(text.as_bytes()), Ok(when));
    }

    #[test]
    fn offsets_fractions_and_lower_case_are_read() {
        let utc = at(1_798_101_600, 0);
        for text in [
            "2026-12-24T08:40:00Z",
            "2026-12-24T09:40:00+01:00",
            "2026-12-24T03:10:00-05:30",
            "2026-12-24t08:40:00z",
            " 2026-12-24T08:40:00.000Z ",
        ] {
            assert_eq!(parse_not_before(text.as_bytes()), Ok(utc), "{text}");
        }
        assert_eq!(
            parse_not_before(b"2026-12-24T08:40:00.5Z"),
            Ok(at(1_798_101_600, 500))
        );
    }

    #[test]
    fn anything_else_is_an_error_naming_the_header() {
        for bad in [
            &b""[..],
            b"tomorrow",
            b"2026-12-24",
            b"2026-12-24T08:40:00",
            b"2026-12-24T08:40:00+1:00",
            b"2026-12-24T08:40:00+01:60",
            b"2026-12-24T08:40:00+24:00",
            b"2026-13-24T08:40:00Z",
            b"\xff\xfe",
            b"2026-12-24T08:40:00Z2026-12-24T08:40:00Z2026-12-24T08:40:00Z2026-12-24T08:40Z",
        ] {
            let err = parse_not_before(bad).expect_err("refused");
            assert!(err.contains("share.not-before"), "{err}");
        }
    }

    #[test]
    fn the_worker_s_own_headers_are_known() {
        assert!(is_delay_header(NOT_BEFORE) && is_delay_header(ORIGIN_OFFSET));
        assert!(!is_delay_header("traceparent"));
    }
}
