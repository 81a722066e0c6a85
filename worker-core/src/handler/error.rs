//! [`JobError`]: a handler's failure, and whether to retry it.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use super::{DecodeError, IntoOutcome};
use crate::Outcome;

/// The error type boxed inside a [`JobError`].
type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// Why a handler failed, and what to do about it.
///
/// Any `std::error::Error + Send + Sync + 'static`, an `anyhow::Error` and a string convert into a
/// `JobError` that **retries** (the retry policy picks the delay), so `?` works in handlers that
/// return `Result<_, JobError>`. Say otherwise explicitly:
///
/// - [`JobError::permanent`]: the job can never succeed; it is rejected ([`Outcome::Reject`]).
/// - [`JobError::retry_after`]: retry, but not before a delay (an HTTP 429's `Retry-After`).
///
/// ```
/// use std::time::Duration;
/// use worker_core::handler::JobError;
///
/// fn classify(status: u16) -> Result<(), JobError> {
///     match status {
///         200..=299 => Ok(()),
///         429 => Err(JobError::retry_after(Duration::from_secs(30), "rate limited")),
///         400..=499 => Err(JobError::permanent(format!("rejected with {status}"))),
///         _ => Err(JobError::retry(format!("server error {status}"))),
///     }
/// }
/// # assert!(classify(200).is_ok());
/// ```
///
/// `JobError` does not implement `std::error::Error` itself (that would make the blanket
/// conversion above overlap with `From<T> for T`), the same trade-off `anyhow::Error` makes.
pub struct JobError {
    error: BoxError,
    decision: Decision,
}

/// What the runtime should do with the failed job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Decision {
    Retry { after: Option<Duration> },
    Permanent,
    Decode,
}

impl JobError {
    /// A failure that may succeed later: retry when the retry policy says so.
    pub fn retry(error: impl Into<BoxError>) -> Self {
        Self {
            error: error.into(),
            decision: Decision::Retry { after: None },
        }
    }

    /// A failure that may succeed later, but not before `after`.
    pub fn retry_after(after: Duration, error: impl Into<BoxError>) -> Self {
        Self {
            error: error.into(),
            decision: Decision::Retry { after: Some(after) },
        }
    }

    /// A failure that will never succeed: reject the job.
    pub fn permanent(error: impl Into<BoxError>) -> Self {
        Self {
            error: error.into(),
            decision: Decision::Permanent,
        }
    }

    /// Whether the job is rejected (a permanent or decode failure) rather than retried.
    pub fn is_permanent(&self) -> bool {
        matches!(self.decision, Decision::Permanent | Decision::Decode)
    }

    /// The minimum delay before the next attempt, if one was given.
    pub fn retry_delay(&self) -> Option<Duration> {
        match self.decision {
            Decision::Retry { after } => after,
            Decision::Permanent | Decision::Decode => None,
        }
    }

    /// The underlying error.
    pub fn error(&self) -> &(dyn StdError + Send + Sync + 'static) {
        &*self.error
    }

    /// The underlying error, by value.
    pub fn into_error(self) -> BoxError {
        self.error
    }

    /// The error and its sources, joined with `": "`: the outcome's reason.
    fn reason(&self) -> String {
        let mut reason = self.error.to_string();
        let mut source = self.error.source();
        while let Some(cause) = source {
            let cause = cause.to_string();
            // anyhow's `Display` of a context may already include its cause; avoid repeating it.
            if !reason.ends_with(&cause) {
                reason.push_str(": ");
                reason.push_str(&cause);
            }
            source = cause_source(source);
        }
        reason
    }

    /// The outcome this error ends its job with.
    pub fn into_outcome(self) -> Outcome {
        let reason = self.reason();
        match self.decision {
            Decision::Retry { after: None } => Outcome::retry(reason),
            Decision::Retry { after: Some(after) } => Outcome::retry_after(after, reason),
            Decision::Permanent => Outcome::reject(reason),
            Decision::Decode => DecodeError::new(reason).into_outcome(),
        }
    }
}

/// The next link of an error chain.
fn cause_source<'a>(
    error: Option<&'a (dyn StdError + 'static)>,
) -> Option<&'a (dyn StdError + 'static)> {
    error.and_then(StdError::source)
}

impl<E> From<E> for JobError
where
    E: Into<BoxError>,
{
    /// A retryable failure.
    fn from(error: E) -> Self {
        Self::retry(error)
    }
}

impl From<DecodeError> for JobError {
    /// A decode failure: the job goes to the dead-letter topic with reason `decode`.
    fn from(error: DecodeError) -> Self {
        Self {
            error: error.message().to_owned().into(),
            decision: Decision::Decode,
        }
    }
}

impl fmt::Debug for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobError")
            .field("decision", &self.decision)
            .field("error", &self.error)
            .finish()
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}
