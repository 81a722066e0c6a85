//! Extractors that take the job's payload: the last argument of a handler.

use std::convert::Infallible;

use bytes::Bytes;
use serde::de::DeserializeOwned;

use super::{DecodeError, FromJob};
use crate::Job;

/// The record value is null: nothing to decode.
const NULL_VALUE: DecodeError = DecodeError::from_static("the record has no value");

/// The record value, parsed as JSON into `T`.
///
/// A value that is null or not valid JSON for `T` is a [`DecodeError`]: the handler is not
/// called and the job goes to the dead-letter topic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Json<T>(pub T);

impl<S, T> FromJob<S> for Json<T>
where
    T: DeserializeOwned,
{
    type Rejection = DecodeError;

    fn from_job(job: Job, _state: &S) -> Result<Self, DecodeError> {
        let value = job.payload().ok_or(NULL_VALUE)?;
        serde_json::from_slice(value)
            .map(Json)
            .map_err(|error| DecodeError::new(format_args!("invalid JSON: {error}")))
    }
}

/// The record value, without a copy. A null value is a [`DecodeError`]; take the [`Job`] to see
/// null values.
impl<S> FromJob<S> for Bytes {
    type Rejection = DecodeError;

    fn from_job(job: Job, _state: &S) -> Result<Self, DecodeError> {
        let (delivery, _cancel) = job.into_parts();
        delivery.value.ok_or(NULL_VALUE)
    }
}

/// The record value as UTF-8 text. A null value or invalid UTF-8 is a [`DecodeError`].
impl<S> FromJob<S> for String {
    type Rejection = DecodeError;

    fn from_job(job: Job, _state: &S) -> Result<Self, DecodeError> {
        let value = job.payload().ok_or(NULL_VALUE)?;
        std::str::from_utf8(value)
            .map(str::to_owned)
            .map_err(|error| DecodeError::new(format_args!("invalid UTF-8: {error}")))
    }
}

/// The whole job: the delivery, payload included, and its cancellation token.
impl<S> FromJob<S> for Job {
    type Rejection = Infallible;

    fn from_job(job: Job, _state: &S) -> Result<Self, Infallible> {
        Ok(job)
    }
}
