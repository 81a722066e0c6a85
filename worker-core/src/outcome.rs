//! [`Outcome`]: what a handler says happened to its job.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

/// What a handler says happened. Every job ends with one; the runtime turns it into an
/// acknowledgement the moment it is known.
///
/// | Outcome  | Acknowledgement                                                          |
/// |----------|--------------------------------------------------------------------------|
/// | `Accept` | ACCEPT: done for good                                                    |
/// | `Retry`  | RELEASE: the broker delivers it again, with its delivery count + 1       |
/// | `Reject` | REJECT: the broker archives it and never delivers it again               |
/// | `Undecodable` | REJECT: the payload can never be read                               |
///
/// The [failure policy](crate::policy) sits between the outcome and the acknowledgement: a `Retry`
/// is held for a backoff (or `after`) before its RELEASE, a failure on the last attempt goes to the
/// dead-letter sink, and so do `Reject` (reason `rejected`, unless switched off) and `Undecodable`
/// (reason `decode`); those are REJECTed only once the sink confirmed the write.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// The job succeeded.
    Accept,
    /// The job failed in a way that may succeed later.
    Retry {
        /// Wait this long before the next attempt, if the handler knows (a rate limit's
        /// `Retry-After`, say), capped at the backoff's max. `None` lets the retry policy choose.
        after: Option<Duration>,
        /// Why, for logs and the dead-letter record.
        reason: Cow<'static, str>,
    },
    /// The job can never succeed: drop it (and log why).
    Reject {
        /// Why, for logs and the dead-letter record.
        reason: Cow<'static, str>,
    },
    /// The payload does not decode into what the handler takes (bad JSON, wrong schema): it goes
    /// to the dead-letter sink with reason `decode` and is never retried. Extractors such as
    /// `Json<T>` return it without calling the handler.
    Undecodable {
        /// What did not decode, for logs and the dead-letter record.
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

    /// The payload does not decode: dead-letter it (reason `decode`), never retry it.
    pub fn undecodable(reason: impl Into<Cow<'static, str>>) -> Self {
        Outcome::Undecodable {
            reason: reason.into(),
        }
    }

    /// The lower-case name used in logs and metrics: `accept`, `retry`, `reject` or `undecodable`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Outcome::Accept => "accept",
            Outcome::Retry { .. } => "retry",
            Outcome::Reject { .. } => "reject",
            Outcome::Undecodable { .. } => "undecodable",
        }
    }

    /// Why the job did not succeed, `None` for `Accept`.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Outcome::Accept => None,
            Outcome::Retry { reason, .. }
            | Outcome::Reject { reason }
            | Outcome::Undecodable { reason } => Some(reason),
        }
    }

    /// The acknowledgement this outcome becomes without the failure policy (tests only: the
    /// runtime applies the policy).
    #[cfg(test)]
    pub(crate) fn ack_kind(&self) -> crate::source::AckKind {
        use crate::source::AckKind;
        match self {
            Outcome::Accept => AckKind::Accept,
            Outcome::Retry { .. } => AckKind::Release,
            Outcome::Reject { .. } | Outcome::Undecodable { .. } => AckKind::Reject,
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
    use crate::source::AckKind;

    #[test]
    fn outcomes_map_to_acknowledgements() {
        assert_eq!(Outcome::Accept.ack_kind(), AckKind::Accept);
        assert_eq!(Outcome::retry("x").ack_kind(), AckKind::Release);
        assert_eq!(
            Outcome::retry_after(Duration::from_secs(1), "x").ack_kind(),
            AckKind::Release
        );
        assert_eq!(Outcome::reject("x").ack_kind(), AckKind::Reject);
        assert_eq!(Outcome::undecodable("x").ack_kind(), AckKind::Reject);
    }

    #[test]
    fn outcomes_say_why() {
        assert_eq!(Outcome::Accept.to_string(), "accept");
        assert_eq!(Outcome::reject("bad json").to_string(), "reject: bad json");
        assert_eq!(Outcome::retry("timeout").reason(), Some("timeout"));
        assert_eq!(
            Outcome::undecodable("expected a JSON object").to_string(),
            "undecodable: expected a JSON object"
        );
        assert!(matches!(
            Outcome::retry_after(Duration::from_secs(3), "429"),
            Outcome::Retry { after: Some(d), .. } if d == Duration::from_secs(3)
        ));
    }
}
