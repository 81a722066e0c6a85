//! Procedural macros for `worker-core`: the `#[handler]` attribute.
//!
//! Use them through `worker_core` (`worker_core::handler`), which re-exports them: the generated
//! code names `worker_core::__private` only.
//!
//! The crate is thin: the expansion lives in plain functions over `proc_macro2` tokens
//! (modules `args`, `signature`, `expand`) so it is unit tested without a compiler.

mod args;
mod expand;
mod signature;

use proc_macro::TokenStream;

/// Turns an `async fn` handler into a job definition with a name and a default topic.
///
/// ```text
/// #[worker_core::handler(topic = "sms", name = "send_sms")]
/// async fn send_sms(meta: Meta, Json(sms): Json<Sms>) -> Result<(), JobError> { ... }
///
/// Worker::builder(source).job(send_sms, ()); // the generated unit struct, routed on "sms"
/// send_sms::handle(meta, Json(sms)).await;   // the function as written
/// ```
///
/// (A compiled example lives in `worker_core::handler`: proc-macro crates cannot run doc tests
/// that use the crate they generate code for.)
///
/// Arguments of the attribute:
///
/// - `topic = "..."` (required): the topic the job reads unless configuration overrides it.
/// - `name = "..."`: the job's name in logs, metrics and dead-letter records; defaults to the
///   function's name.
/// - `state = Type`: the state the arguments are checked against; defaults to `T` of the first
///   `State<T>` argument, or `()`.
/// - `crate = "path"`: where `worker_core` is, when it is renamed.
///
/// The function becomes an associated function `handle` of a unit struct with the function's
/// name, which implements `worker_core::handler::JobDefinition`. Each argument is checked on its
/// own span: payload extractors must come last, every argument must be an extractor, the return
/// type must implement `IntoOutcome` and the future must be `Send`. On error the function is
/// emitted unchanged next to the `compile_error!`, so IDEs keep working.
#[proc_macro_attribute]
pub fn handler(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::handler(args.into(), item.into()).into()
}
