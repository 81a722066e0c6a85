//! Extractors: how a handler's arguments are taken from its [`Job`].
//!
//! Every argument but the last implements [`FromJobParts`]: it looks at the job without taking it.
//! The last argument implements [`FromJob`]: it may take the job, payload included. Every
//! [`FromJobParts`] type is also a [`FromJob`] (through the [`ViaParts`] marker), so the last
//! argument may be either.
//!
//! Extraction is synchronous: a job is already in memory. An extractor that fails ends the job with
//! its rejection (an [`IntoOutcome`]) and the handler is not called.
//!
//! # Writing an extractor
//!
//! ```
//! use worker_core::Job;
//! use worker_core::handler::{DecodeError, FromJob};
//!
//! /// A payload of comma-separated values.
//! struct Csv(Vec<String>);
//!
//! impl<S> FromJob<S> for Csv {
//!     type Rejection = DecodeError;
//!
//!     fn from_job(job: Job, _state: &S) -> Result<Self, DecodeError> {
//!         let text = job
//!             .payload()
//!             .ok_or_else(|| DecodeError::new("the record has no value"))?;
//!         let text = std::str::from_utf8(text).map_err(DecodeError::new)?;
//!         Ok(Csv(text.split(',').map(str::to_owned).collect()))
//!     }
//! }
//! ```
//!
//! Return [`DecodeError`] for input that can never be processed: the runtime sends such a job to the
//! dead-letter topic with reason `decode` instead of retrying it.

mod decode;
mod parts;
mod payload;

use crate::Job;

use super::IntoOutcome;

pub use decode::DecodeError;
pub use parts::{FromRef, Headers, Key, Meta, State};
pub use payload::Json;

/// An extractor for a leading handler argument: reads what it needs from the job and the state.
///
/// Implemented by [`Meta`], [`Key`], [`Headers`], [`State`] and
/// [`CancellationToken`](tokio_util::sync::CancellationToken). Implement it for your own types that
/// need no payload; types that consume the payload implement [`FromJob`] instead.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a leading argument of a job handler",
    label = "not a `FromJobParts` extractor",
    note = "leading arguments implement `FromJobParts<S>`: `Meta`, `Key`, `Headers`, `State<_>`, `CancellationToken`, or your own type",
    note = "an extractor that takes the payload (`Json<_>`, `Bytes`, `String`, `Job`) must be the last argument"
)]
pub trait FromJobParts<S>: Sized {
    /// What the job ends with when extraction fails.
    type Rejection: IntoOutcome;

    /// Extracts the value from `job` and `state`.
    fn from_job_parts(job: &Job, state: &S) -> Result<Self, Self::Rejection>;
}

/// An extractor for the last handler argument: may take the job, payload included.
///
/// Implemented by [`Json`], [`Bytes`](bytes::Bytes), [`String`], [`Job`] and every
/// [`FromJobParts`] type. `M` tells those two groups apart; leave it at its default when you
/// implement this trait.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be the last argument of a job handler",
    label = "not a `FromJob` extractor",
    note = "the last argument implements `FromJob<S>` (`Json<_>`, `Bytes`, `String`, `Job`, your own payload type) or `FromJobParts<S>` (`Meta`, `Key`, `Headers`, `State<_>`, `CancellationToken`)"
)]
pub trait FromJob<S, M = ViaJob>: Sized {
    /// What the job ends with when extraction fails.
    type Rejection: IntoOutcome;

    /// Extracts the value from `job` and `state`.
    fn from_job(job: Job, state: &S) -> Result<Self, Self::Rejection>;
}

/// Marker for [`FromJob`] implementations that take the job.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct ViaJob;

/// Marker for the [`FromJob`] implementation every [`FromJobParts`] type gets.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct ViaParts;

impl<S, T> FromJob<S, ViaParts> for T
where
    T: FromJobParts<S>,
{
    type Rejection = T::Rejection;

    fn from_job(job: Job, state: &S) -> Result<Self, Self::Rejection> {
        T::from_job_parts(&job, state)
    }
}
