//! How long each dead-letter topic has been missing: operators sometimes create a topic after
//! starting the workers, so a missing topic may pass by itself for a grace period, then stops the
//! worker.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The dead-letter topics found missing, each with when it was first known to be.
#[derive(Debug)]
pub(super) struct MissingTopics {
    grace: Duration,
    since: Mutex<HashMap<String, Instant>>,
}

/// What a missing topic means now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Missing {
    /// Missing for this long, within the grace period: it may still be created.
    Waiting(Duration),
    /// Missing for this long, past the grace period: give up.
    GaveUp(Duration),
}

impl MissingTopics {
    pub(super) fn new(grace: Duration) -> Self {
        Self {
            grace,
            since: Mutex::new(HashMap::new()),
        }
    }

    /// The grace period.
    pub(super) fn grace(&self) -> Duration {
        self.grace
    }

    /// `topic` was found missing at `now` by a write that began at `began`: how long it has been
    /// missing (since the first failing write began), and whether that is past the grace period.
    pub(super) fn missing(&self, topic: &str, began: Instant, now: Instant) -> Missing {
        let mut since = self.since.lock().unwrap_or_else(PoisonError::into_inner);
        let first = *since.entry(topic.to_owned()).or_insert(began);
        let missing = now.saturating_duration_since(first);
        if missing >= self.grace {
            Missing::GaveUp(missing)
        } else {
            Missing::Waiting(missing)
        }
    }

    /// `topic` exists (a write to it succeeded, or the cluster says so): forget it was missing.
    pub(super) fn found(&self, topic: &str) {
        let mut since = self.since.lock().unwrap_or_else(PoisonError::into_inner);
        if !since.is_empty() {
            since.remove(topic);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn a_missing_topic_may_pass_within_the_grace_period_only() {
        let topics = MissingTopics::new(5 * SECOND);
        let t0 = Instant::now();
        assert_eq!(
            topics.missing("a.dlq", t0, t0 + 2 * SECOND),
            Missing::Waiting(2 * SECOND),
            "counted from when the first failing write began"
        );
        assert_eq!(
            topics.missing("a.dlq", t0 + 3 * SECOND, t0 + 4 * SECOND),
            Missing::Waiting(4 * SECOND),
            "a later write does not restart the clock"
        );
        assert_eq!(
            topics.missing("b.dlq", t0 + 4 * SECOND, t0 + 5 * SECOND),
            Missing::Waiting(SECOND),
            "each topic has its own clock"
        );
        assert_eq!(
            topics.missing("a.dlq", t0 + 5 * SECOND, t0 + 5 * SECOND),
            Missing::GaveUp(5 * SECOND)
        );
    }

    #[test]
    fn a_topic_found_starts_over() {
        let topics = MissingTopics::new(5 * SECOND);
        let t0 = Instant::now();
        topics.missing("a.dlq", t0, t0 + SECOND);
        topics.found("a.dlq");
        assert_eq!(
            topics.missing("a.dlq", t0 + 10 * SECOND, t0 + 11 * SECOND),
            Missing::Waiting(SECOND)
        );
    }

    #[test]
    fn no_grace_gives_up_at_once() {
        let topics = MissingTopics::new(Duration::ZERO);
        let t0 = Instant::now();
        assert_eq!(
            topics.missing("a.dlq", t0, t0),
            Missing::GaveUp(Duration::ZERO)
        );
    }
}
