//! Plain async functions as job handlers.
//!
//! A handler is an `async fn` whose arguments say what it needs from the [`Job`] and whose return
//! value says what happened:
//!
//! ```
//! use serde::Deserialize;
//! use worker_core::handler::{Handler, JobError, Json, Meta, State};
//!
//! #[derive(Deserialize)]
//! struct Sms {
//!     to: String,
//!     text: String,
//! }
//!
//! #[derive(Clone)]
//! struct Gateway;
//!
//! async fn send_sms(
//!     meta: Meta,
//!     State(gateway): State<Gateway>,
//!     Json(sms): Json<Sms>,
//! ) -> Result<(), JobError> {
//!     let _ = (meta.offset(), gateway, sms.to, sms.text);
//!     Ok(())
//! }
//!
//! // A `tower::Service<Job, Response = Outcome, Error = Infallible>`:
//! let service = send_sms.with_state(Gateway);
//! # let _ = service;
//! ```
//!
//! - **Leading arguments** implement [`FromJobParts`] and only look at the job: [`Meta`], [`Key`],
//!   [`Headers`], [`State`], [`CancellationToken`](tokio_util::sync::CancellationToken).
//! - **The last argument** implements [`FromJob`] and may take the payload: [`Json`],
//!   [`Bytes`](bytes::Bytes), [`String`], the whole [`Job`], or any leading-argument extractor.
//! - **The return type** implements [`IntoOutcome`]: `()`, [`Outcome`], or `Result<T, E>` with
//!   `E: Into<`[`JobError`]`>` (any `std::error::Error + Send + Sync`, `anyhow::Error`, a string).
//!
//! Extractors run synchronously before the handler is called: a job is entirely in memory, so there
//! is nothing to await, and the whole call needs no allocation ([`HandlerFuture`] is a named
//! future). A payload that does not decode never reaches the handler: the job ends with the
//! extractor's rejection (see [`DecodeError`]).
//!
//! The [`#[handler]`](macro@crate::handler) attribute turns a handler fn into a [`JobDefinition`]:
//! a value that carries the job's name and default topic and checks each argument at compile time.
//!
//! ```
//! use serde::Deserialize;
//! use worker_core::Worker;
//! use worker_core::handler::{JobDefinition, JobError, Json, NamedJob, handler};
//! use worker_core::testing::MemoryBroker;
//!
//! #[derive(Deserialize)]
//! struct Sms {
//!     to: String,
//! }
//!
//! /// Sends one SMS.
//! #[handler(topic = "sms", name = "send_sms")]
//! async fn send_sms(Json(sms): Json<Sms>) -> Result<(), JobError> {
//!     let _ = sms.to;
//!     Ok(())
//! }
//!
//! # fn main() -> worker_core::Result<()> {
//! let broker = MemoryBroker::new();
//! let worker = Worker::builder(broker.member("worker-1"))
//!     .route(send_sms.topic(), send_sms.into_service(()))
//!     .build()?;
//! # let _ = worker;
//! # Ok(())
//! # }
//! ```
//!
//! # Blocking work
//!
//! Each handler call is a task of its own, so an `await` in one never holds up another. Work that
//! blocks its thread instead (a synchronous client, `std::thread::sleep`, rendering a large PDF)
//! belongs in [`tokio::task::spawn_blocking`]: a blocked runtime thread runs nothing else, and if
//! every one is blocked the worker cannot renew locks either.
//!
//! ```
//! use worker_core::handler::{JobError, handler};
//!
//! fn render_invoice(order: &str) -> Vec<u8> {
//!     order.as_bytes().repeat(2) // stands for CPU-heavy, synchronous work
//! }
//!
//! #[handler(topic = "invoices", name = "render_invoice")]
//! async fn render(order: String) -> Result<(), JobError> {
//!     let pdf = tokio::task::spawn_blocking(move || render_invoice(&order))
//!         .await
//!         .map_err(|e| JobError::retry(format!("the renderer panicked: {e}")))?;
//!     let _ = pdf;
//!     Ok(())
//! }
//! # let _ = render;
//! ```

mod batch;
mod definition;
mod error;
pub mod extract;
mod future;
mod into_outcome;
pub(crate) mod macro_support;
mod retry_on_error;
mod service;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod worker_tests;

use std::future::Future;

use crate::Job;

pub use batch::{BatchJobDefinition, BatchOutput};
pub use definition::{DefinedJob, JobDefinition, NamedJob, define_job};
pub use error::JobError;
pub use extract::{
    DecodeError, FromJob, FromJobParts, FromRef, Headers, Json, Key, Meta, State, ViaJob, ViaParts,
};
pub use future::{HandlerFuture, ServiceFuture};
pub use into_outcome::IntoOutcome;
pub use retry_on_error::{RetryOnError, RetryOnErrorFuture, RetryOnErrorLayer};
pub use service::HandlerService;

/// The `#[handler]` attribute, also at [`worker_core::handler`](macro@crate::handler) (the crate
/// root), so that `use worker_core::handler::{handler, Json, Meta};` works.
pub use worker_macros::handler;

#[cfg(doc)]
use crate::Outcome;

/// An async fn that can handle a [`Job`].
///
/// Implemented for `async fn`s (and closures returning futures) of up to 12 arguments, where every
/// argument but the last implements [`FromJobParts`], the last implements [`FromJob`], and the
/// output implements [`IntoOutcome`]. `T` records the argument types and `S` is the state the
/// handler is given (see [`with_state`](Self::with_state)); neither is ever written by hand.
///
/// Turn a handler into a `tower::Service` with [`with_state`](Self::with_state), or with
/// [`into_service`](HandlerWithoutStateExt::into_service) when it needs no state.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a job handler",
    label = "not a job handler",
    note = "a handler is an `async fn` with at most 12 arguments: leading arguments implement `FromJobParts` (`Meta`, `Key`, `Headers`, `State<_>`, `CancellationToken`), the last implements `FromJob` (`Json<_>`, `Bytes`, `String`, `Job`, or a leading extractor), and the output implements `IntoOutcome`",
    note = "with `#[worker_core::handler]` on the function, the other errors point at the offending argument or return type"
)]
pub trait Handler<T, S>: Clone + Send + Sync + Sized + 'static {
    /// The future the handler returns: resolves to the job's [`Outcome`].
    type Future: Future<Output = crate::Outcome> + Send + 'static;

    /// Extracts the arguments from `job` and `state` and calls the handler.
    ///
    /// Extraction happens before this returns; if an extractor rejects the job the future resolves
    /// to its rejection at once and the handler is not called.
    fn call(self, job: Job, state: &S) -> Self::Future;

    /// The handler as a `tower::Service`, given `state` (cloned into [`State`] extractors).
    fn with_state(self, state: S) -> HandlerService<Self, T, S> {
        HandlerService::new(self, state)
    }
}

/// [`Handler::into_service`](HandlerWithoutStateExt::into_service) for handlers that need no
/// state.
pub trait HandlerWithoutStateExt<T>: Handler<T, ()> {
    /// The handler as a `tower::Service` with `()` as its state.
    fn into_service(self) -> HandlerService<Self, T, ()>;
}

impl<H, T> HandlerWithoutStateExt<T> for H
where
    H: Handler<T, ()>,
{
    fn into_service(self) -> HandlerService<Self, T, ()> {
        HandlerService::new(self, ())
    }
}

/// Ends `call` with the rejection's outcome when an extractor fails.
macro_rules! extract_or_return {
    ($e:expr) => {
        match $e {
            Ok(value) => value,
            Err(rejection) => return HandlerFuture::rejected(IntoOutcome::into_outcome(rejection)),
        }
    };
}

impl<F, Fut, Res, S> Handler<((),), S> for F
where
    F: FnOnce() -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Res> + Send + 'static,
    Res: IntoOutcome,
{
    type Future = HandlerFuture<Fut>;

    fn call(self, _job: Job, _state: &S) -> Self::Future {
        HandlerFuture::running(self())
    }
}

/// Implements [`Handler`] for functions of `$leading` parts extractors and one last extractor.
macro_rules! impl_handler {
    ([$($leading:ident),*], $last:ident) => {
        #[allow(non_snake_case)]
        impl<F, Fut, Res, S, M, $($leading,)* $last> Handler<(M, $($leading,)* $last,), S> for F
        where
            F: FnOnce($($leading,)* $last) -> Fut + Clone + Send + Sync + 'static,
            Fut: Future<Output = Res> + Send + 'static,
            Res: IntoOutcome,
            $($leading: FromJobParts<S>,)*
            $last: FromJob<S, M>,
        {
            type Future = HandlerFuture<Fut>;

            fn call(self, job: Job, state: &S) -> Self::Future {
                $(let $leading = extract_or_return!($leading::from_job_parts(&job, state));)*
                let $last = extract_or_return!($last::from_job(job, state));
                HandlerFuture::running(self($($leading,)* $last))
            }
        }
    };
}

impl_handler!([], T1);
impl_handler!([T1], T2);
impl_handler!([T1, T2], T3);
impl_handler!([T1, T2, T3], T4);
impl_handler!([T1, T2, T3, T4], T5);
impl_handler!([T1, T2, T3, T4, T5], T6);
impl_handler!([T1, T2, T3, T4, T5, T6], T7);
impl_handler!([T1, T2, T3, T4, T5, T6, T7], T8);
impl_handler!([T1, T2, T3, T4, T5, T6, T7, T8], T9);
impl_handler!([T1, T2, T3, T4, T5, T6, T7, T8, T9], T10);
impl_handler!([T1, T2, T3, T4, T5, T6, T7, T8, T9, T10], T11);
impl_handler!([T1, T2, T3, T4, T5, T6, T7, T8, T9, T10, T11], T12);
