//! [`IntoOutcome`]: what a handler's return value means.

use std::convert::Infallible;

use super::JobError;
use crate::Outcome;

/// A handler's return value, turned into the job's [`Outcome`].
///
/// | Return value            | Outcome                                                        |
/// |-------------------------|----------------------------------------------------------------|
/// | `()`                    | `Accept`                                                       |
/// | `Outcome`               | itself                                                         |
/// | `Ok(t)`                 | `t.into_outcome()`                                             |
/// | `Err(e)`                | `e.into()` as a [`JobError`]: retry unless it says otherwise   |
///
/// Implement it for your own result types to keep handlers short.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a handler's result",
    label = "does not implement `IntoOutcome`",
    note = "a handler returns `()`, `Outcome`, or `Result<T, E>` where `T: IntoOutcome` and `E: Into<JobError>` (any `std::error::Error + Send + Sync + 'static`, `anyhow::Error` or a string)"
)]
pub trait IntoOutcome {
    /// The outcome this value stands for.
    fn into_outcome(self) -> Outcome;
}

impl IntoOutcome for () {
    fn into_outcome(self) -> Outcome {
        Outcome::Accept
    }
}

impl IntoOutcome for Outcome {
    fn into_outcome(self) -> Outcome {
        self
    }
}

impl IntoOutcome for JobError {
    fn into_outcome(self) -> Outcome {
        JobError::into_outcome(self)
    }
}

impl IntoOutcome for Infallible {
    fn into_outcome(self) -> Outcome {
        match self {}
    }
}

impl<T, E> IntoOutcome for Result<T, E>
where
    T: IntoOutcome,
    E: Into<JobError>,
{
    fn into_outcome(self) -> Outcome {
        match self {
            Ok(value) => value.into_outcome(),
            Err(error) => error.into().into_outcome(),
        }
    }
}
