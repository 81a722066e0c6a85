//! [`Outcome`]: what a handler says happened to its job.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use crate::source::AckKind;

/// What a handler says happened. Every job ends with one; the runtime turns it into an
/// acknowledgement the moment it is known.
///
/// | Outcome  | Acknowledgement                                                          |
/// |----------|--------------------------------------------------------------------------|
/// | `Accept` | ACCEPT: done for good                                                    |
/// | `Retry`  | RELEASE: the broker delivers it again, with its delivery count + 1       |
/// | `Reject` | REJECT: the broker archives it and never delivers it again               |
///
/// `Retry::after` is a hint for the retry policy (hold the record, renewing its lock, for that
/// long before releasing it); until that policy exists a retry is released at once.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// The job succeeded.
    Accept,
    /// The job failed in a way that may succeed later.
    Retry {
        /// Wait at least this long before the next attempt, if the handler knows (a rate limit's
        /// `Retry-After`, say). `None` lets the retry policy choose.
        after: Option<Duration>,
        /// Why, for logs and the dead-letter record.
        reason: Cow<'static, str>,
    },
    /// The job can never succeed: drop it (and log why).
    Reject {
        /// Why, for logs and the dead-letter record.
        reason: Cow<'static, str>,
    },
}

impl Outcome {
    /// Retry, with the retry policy choosing when.
    pub fn retry(reason: impl Into<Cow<'static, str>>) -> Self {
        Outcome::Retry {
            after: None,
            reason: reason.into(),
        }
    }

    /// Retry, not before `after`.
    pub fn retry_after(after: Duration, reason: impl Into<Cow<'static, str>>) -> Self {
        Outcome::Retry {
            after: Some(after),
            reason: reason.into(),
        }
    }

    /// Reject for good.
    pub fn reject(reason: impl Into<Cow<'static, str>>) -> Self {
        Outcome::Reject {
            reason: reason.into(),
        }
    }

    /// The lower-case name used in logs and metrics: `accept`, `retry` or `reject`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Outcome::Accept => "accept",
            Outcome::Retry { .. } => "retry",
            Outcome::Reject { .. } => "reject",
        }
    }

    /// Why the job did not succeed, `None` for `Accept`.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Outcome::Accept => None,
            Outcome::Retry { reason, .. } | Outcome::Reject { reason } => Some(reason),
        }
    }

    /// The acknowledgement this outcome becomes (before any retry policy).
    pub(crate) fn ack_kind(&self) -> AckKind {
        match self {
            Outcome::Accept => AckKind::Accept,
            Outcome::Retry { .. } => AckKind::Release,
            Outcome::Reject { .. } => AckKind::Reject,
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.reason() {
            Some(reason) => write!(f, "{}: {reason}", self.as_str()),
            None => f.write_str(self.as_str()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_map_to_acknowledgements() {
        assert_eq!(Outcome::Accept.ack_kind(), AckKind::Accept);
        assert_eq!(Outcome::retry("x").ack_kind(), AckKind::Release);
        assert_eq!(
            Outcome::retry_after(Duration::from_secs(1), "x").ack_kind(),
            AckKind::Release
        );
        assert_eq!(Outcome::reject("x").ack_kind(), AckKind::Reject);
    }

    #[test]
    fn outcomes_say_why() {
        assert_eq!(Outcome::Accept.to_string(), "accept");
        assert_eq!(Outcome::reject("bad json").to_string(), "reject: bad json");
        assert_eq!(Outcome::retry("timeout").reason(), Some("timeout"));
        assert!(matches!(
            Outcome::retry_after(Duration::from_secs(3), "429"),
            Outcome::Retry { after: Some(d), .. } if d == Duration::from_secs(3)
        ));
    }
}
