//! [`DecodeError`]: a payload that can never be processed.

use std::borrow::Cow;
use std::fmt;

use crate::Outcome;
use crate::handler::IntoOutcome;

/// A payload that could not be decoded: the job goes to the dead-letter topic with reason
/// `decode`, without running the handler and without retries.
///
/// Until the failure policy carries a dedicated outcome for it, a decode failure is an
/// [`Outcome::Reject`] whose reason starts with [`DecodeError::REASON_PREFIX`];
/// [`DecodeError::is_decode_failure`] recognises one.
///
/// A handler that decodes by hand returns one through [`JobError`](crate::handler::JobError)
/// (`From<DecodeError>`) or as its own `Err`: `Result<T, DecodeError>` is an
/// [`IntoOutcome`]. It deliberately does not implement `std::error::Error`, which would make `?`
/// turn it into an ordinary, retryable error.
#[derive(Debug)]
pub struct DecodeError {
    message: Cow<'static, str>,
}

impl DecodeError {
    /// What every decode failure's reason starts with.
    pub const REASON_PREFIX: &'static str = "decode:";

    /// A decode failure described by `error`.
    pub fn new(error: impl fmt::Display) -> Self {
        Self {
            message: Cow::Owned(error.to_string()),
        }
    }

    /// A decode failure with a fixed description.
    pub const fn from_static(message: &'static str) -> Self {
        Self {
            message: Cow::Borrowed(message),
        }
    }

    /// What went wrong.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether `outcome` is a decode failure (made from a [`DecodeError`]).
    pub fn is_decode_failure(outcome: &Outcome) -> bool {
        matches!(outcome, Outcome::Reject { reason } if reason.starts_with(Self::REASON_PREFIX))
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", Self::REASON_PREFIX, self.message)
    }
}

impl IntoOutcome for DecodeError {
    fn into_outcome(self) -> Outcome {
        Outcome::reject(self.to_string())
    }
}
