//! The range rule of each worker setting, written once: [`WorkerBuilder::build`] applies them, and
//! so does the binary's TOML validation (worker-cli), each naming the setting its own way
//! (`concurrency` here, `worker.concurrency` at a file's line there). Each answers `Err` with
//! what was expected (and what was found), without the setting's name.
//!
//! [`WorkerBuilder::build`]: crate::WorkerBuilder::build

use std::time::Duration;

/// The longest topic name Kafka accepts.
pub const MAX_TOPIC_NAME: usize = 249;

/// A Kafka topic name: 1 to 249 of `a-z A-Z 0-9 . _ -`, and neither `.` nor `..`. The broker
/// refuses anything else; checking first names the setting (or the record) at fault instead of
/// failing at the first produce.
pub fn topic_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("it is empty".to_owned());
    }
    if name == "." || name == ".." {
        return Err(format!("{name:?} is reserved"));
    }
    if name.len() > MAX_TOPIC_NAME {
        return Err(format!(
            "it is {} bytes long, Kafka allows at most {MAX_TOPIC_NAME}",
            name.len()
        ));
    }
    topic_chars(name)
}

/// Only the characters Kafka allows in topic names, for a part of a name (a template's text).
pub fn topic_chars(text: &str) -> Result<(), String> {
    match text
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        Some(c) => Err(format!("{c:?} is not allowed (only a-z A-Z 0-9 . _ -)")),
        None => Ok(()),
    }
}

/// Untrusted text as one log line: control characters (newlines, escapes, NUL) shown escaped,
/// cut to `max_chars` characters with `…` when longer. What a log line quotes from a record, a
/// header or the control topic, so that nothing read can forge a line or hide one.
pub fn one_line(text: &str, max_chars: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max_chars * 2));
    for (n, c) in text.chars().enumerate() {
        if n == max_chars {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// The longest job id (`share.job-id`).
pub const MAX_JOB_ID: usize = 64;

/// A job id (`share.job-id`, a cancellation's key): 1 to 64 of `a-z A-Z 0-9 . _ : -`. A header
/// that is not one is no job id: the record runs, and no cancellation can name it.
pub fn job_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > MAX_JOB_ID {
        return Err(format!(
            "a job id of {} bytes (1 to {MAX_JOB_ID})",
            id.len()
        ));
    }
    match id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-')))
    {
        Some(c) => Err(format!(
            "{c:?} is not allowed in a job id (only a-z A-Z 0-9 . _ : -)"
        )),
        None => Ok(()),
    }
}

/// Handlers running at most: at least 1, and below 2^32 (the permits of a semaphore).
pub fn concurrency(concurrency: usize) -> Result<(), String> {
    if concurrency == 0 || u32::try_from(concurrency).is_err() {
        return Err(format!(
            "expected at least 1 (and below 2^32), found {concurrency}"
        ));
    }
    Ok(())
}

/// The most records one fetch asks for: at least 1.
pub fn max_poll_records(max: u32) -> Result<(), String> {
    if max == 0 {
        return Err("expected at least 1, found 0".to_owned());
    }
    Ok(())
}

/// When a lock is renewed, as a fraction of it: strictly between 0 and 1.
pub fn renew_at(fraction: f64) -> Result<(), String> {
    if !(fraction > 0.0 && fraction < 1.0) {
        return Err(format!(
            "expected a fraction of the lock duration between 0 and 1 (exclusive), found {fraction}"
        ));
    }
    Ok(())
}

/// A timeout, a hold or a delay bound: above 0.
pub fn above_zero(duration: Duration) -> Result<(), String> {
    if duration.is_zero() {
        return Err("expected a duration above 0".to_owned());
    }
    Ok(())
}

/// How often the delivery-count limit is read again: at least once a second, so a worker never
/// keeps its coordinator busy with the question.
pub fn delivery_limit_refresh(every: Duration) -> Result<(), String> {
    if every < Duration::from_secs(1) {
        return Err("expected at least 1s".to_owned());
    }
    Ok(())
}

/// Deliveries of a record at most: at least 1.
pub fn max_attempts(attempts: u16) -> Result<(), String> {
    if attempts == 0 {
        return Err("expected at least 1, found 0".to_owned());
    }
    Ok(())
}

/// The delivery-count limit assumed when the broker's cannot be read: at least 2, Kafka's
/// smallest `share.delivery.count.limit`.
pub fn assumed_delivery_limit(limit: u16) -> Result<(), String> {
    if limit < 2 {
        return Err(format!(
            "expected at least 2 (Kafka's smallest delivery-count limit), found {limit}"
        ));
    }
    Ok(())
}

/// A retry backoff: its first delay above 0, its longest at least the first, and each delay at
/// least the one before (a finite factor of at least 1). `Err` names the part that is wrong.
pub fn backoff(initial: Duration, max: Duration, factor: f64) -> Result<(), (BackoffPart, String)> {
    if initial.is_zero() {
        return Err((
            BackoffPart::Initial,
            "expected a duration above 0".to_owned(),
        ));
    }
    if max < initial {
        return Err((
            BackoffPart::Max,
            "expected at least the initial backoff".to_owned(),
        ));
    }
    if !(factor >= 1.0 && factor.is_finite()) {
        return Err((
            BackoffPart::Factor,
            format!("expected at least 1.0, found {factor}"),
        ));
    }
    Ok(())
}

/// Which part of a backoff [`backoff`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackoffPart {
    /// The first retry's delay.
    Initial,
    /// The longest delay.
    Max,
    /// How much each delay grows over the one before.
    Factor,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names_kafka_accepts() {
        for good in [
            "sms.dlq",
            "a",
            "A-b_c.9",
            "...",
            &"x".repeat(MAX_TOPIC_NAME),
        ] {
            assert_eq!(topic_name(good), Ok(()), "{good}");
        }
    }

    #[test]
    fn topic_names_kafka_refuses() {
        for (bad, why) in [
            ("", "empty"),
            (".", "reserved"),
            ("..", "reserved"),
            ("team/sms.dlq", "'/' is not allowed"),
            ("sms dlq", "' ' is not allowed"),
            ("sms\0.dlq", "'\\0' is not allowed"),
            ("smś.dlq", "'ś' is not allowed"),
            (&"x".repeat(MAX_TOPIC_NAME + 1), "250 bytes long"),
        ] {
            let err = topic_name(bad).unwrap_err();
            assert!(err.contains(why), "{bad:?}: {err}");
        }
    }

    #[test]
    fn job_ids() {
        for good in [
            "a",
            "appointment-42:reminder",
            "3f2c.9_x",
            &"x".repeat(MAX_JOB_ID),
        ] {
            assert_eq!(job_id(good), Ok(()), "{good}");
        }
        for bad in ["", "a/b", "a b", "é", &"x".repeat(MAX_JOB_ID + 1)] {
            assert!(job_id(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn untrusted_text_is_one_line() {
        assert_eq!(
            one_line("a\nb\r\u{1b}[2J\0", 64),
            "a\\nb\\r\\u{1b}[2J\\u{0}"
        );
        assert_eq!(one_line("abcdef", 3), "abc…");
        assert_eq!(one_line("ok", 3), "ok");
    }
}
