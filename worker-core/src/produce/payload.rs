//! [`Payload`]: how a job's payload type is written, so that enqueueing is typed by the handler.

use bytes::Bytes;
use serde::Serialize;

use crate::handler::Json;

/// A last-argument extractor whose payload can be enqueued: the type a producer writes for a job
/// that takes `Self`.
///
/// `#[handler]` generates `enqueue(&producer, &payload)` with `payload: &<P as Payload>::Value`
/// for the job's last argument `P`, so a value of another type does not compile.
#[diagnostic::on_unimplemented(
    message = "a job taking `{Self}` has no payload that can be enqueued",
    note = "typed enqueue works for jobs whose last argument is `Json<T>` (with `T: Serialize`), `String` or `Bytes`"
)]
pub trait Payload {
    /// The value a producer hands over.
    type Value: ?Sized;

    /// The record value for `value`.
    fn encode(value: &Self::Value) -> Result<Bytes, String>;
}

impl<T: Serialize> Payload for Json<T> {
    type Value = T;

    fn encode(value: &T) -> Result<Bytes, String> {
        serde_json::to_vec(value)
            .map(Bytes::from)
            .map_err(|err| format!("as JSON: {err}"))
    }
}

impl Payload for String {
    type Value = str;

    fn encode(value: &str) -> Result<Bytes, String> {
        Ok(Bytes::copy_from_slice(value.as_bytes()))
    }
}

impl Payload for Bytes {
    type Value = [u8];

    fn encode(value: &[u8]) -> Result<Bytes, String> {
        Ok(Bytes::copy_from_slice(value))
    }
}
