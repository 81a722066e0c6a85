//! The range rule of each worker setting, written once: [`WorkerBuilder::build`] applies them, and
//! so does the binary's TOML validation (worker-cli), each naming the setting its own way
//! (`concurrency` here, `worker.concurrency` at a file's line there). Each answers `Err` with
//! what was expected (and what was found), without the setting's name.
//!
//! [`WorkerBuilder::build`]: crate::WorkerBuilder::build

use std::time::Duration;

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
