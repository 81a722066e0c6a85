//! The crate's one public error type.

use std::fmt;

/// Something went wrong that the caller has to know about.
///
/// Control flow (retry, reject, shutdown) is never an `Error`: those are outcomes and
/// acknowledgement results. An `Error` means a call could not do its job; [`Error::kind`] says why.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

/// What kind of failure an [`Error`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The configuration is invalid (names the key and what was expected).
    Config,
    /// The network failed: connect, read or write, or a timeout waiting for a broker.
    Io,
    /// A broker sent bytes that do not decode, or a response that breaks the protocol.
    Protocol,
    /// The broker answered with an error code that cannot be retried.
    Broker,
    /// The broker is too old or has share groups switched off.
    Unsupported,
    /// Not allowed: a topic or group authorization failure.
    Authorization,
    /// The broker refused who we are or how we connect: SASL credentials or mechanism, a
    /// certificate not trusted (either side), a security protocol the listener does not speak.
    Authentication,
    /// The group cannot be joined (wrong group type, full, ...).
    Group,
    /// The dead-letter sink failed.
    Dlq,
    /// The source or worker is closed.
    Closed,
}

impl Error {
    /// A new error of `kind` with a message that says what went wrong and where.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// Attaches the underlying cause.
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message, without the cause.
    pub fn message(&self) -> &str {
        &self.message
    }

    pub(crate) fn from_parts(
        kind: ErrorKind,
        message: String,
        source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        Self {
            kind,
            message,
            source,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(source) = &self.source {
            write!(f, ": {source}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl From<std::io::Error> for Error {
    fn from(err: std::io::Error) -> Self {
        Error::new(ErrorKind::Io, "i/o error").with_source(err)
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
