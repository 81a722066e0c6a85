//! [`DlqError`]: why a dead letter was not written, and whether trying again can help.

use std::fmt;

use crate::Error;

/// A dead-letter write that failed. Its [`kind`](Self::kind) decides what the worker does next.
#[derive(Debug)]
pub struct DlqError {
    kind: DlqErrorKind,
    error: Error,
}

/// Whether a failed dead-letter write can succeed later.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DlqErrorKind {
    /// It may pass by itself (a broker down or slow, a leader moving): the worker keeps the records
    /// locked, stops fetching and tries again with backoff.
    Unavailable,
    /// It will not pass by itself (not authorised, an invalid topic name, a topic that does not
    /// exist): the worker releases what it holds and stops with this error.
    Permanent,
}

impl DlqError {
    /// A failure that may pass by itself.
    pub fn unavailable(error: Error) -> Self {
        Self {
            kind: DlqErrorKind::Unavailable,
            error,
        }
    }

    /// A failure that will not pass by itself: the worker stops.
    pub fn permanent(error: Error) -> Self {
        Self {
            kind: DlqErrorKind::Permanent,
            error,
        }
    }

    /// Whether trying again can help.
    pub fn kind(&self) -> DlqErrorKind {
        self.kind
    }

    /// What went wrong.
    pub fn error(&self) -> &Error {
        &self.error
    }

    /// The underlying error.
    pub fn into_error(self) -> Error {
        self.error
    }
}

/// Any other error is taken as one that may pass by itself.
impl From<Error> for DlqError {
    fn from(error: Error) -> Self {
        Self::unavailable(error)
    }
}

impl fmt::Display for DlqError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl std::error::Error for DlqError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}
