//! [`DecodeError`]: a payload that can never be processed.

use std::borrow::Cow;
use std::fmt;

use crate::Outcome;
use crate::handler::IntoOutcome;

/// A payload that could not be decoded: it becomes [`Outcome::Undecodable`], so the job goes to
/// the dead-letter topic with reason `decode`, without running the handler and without retries.
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
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the payload does not decode: {}", self.message)
    }
}

impl IntoOutcome for DecodeError {
    fn into_outcome(self) -> Outcome {
        Outcome::undecodable(self.message)
    }
}
