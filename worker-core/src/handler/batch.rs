//! [`BatchJobDefinition`]: a `#[handler(batch(...))]` job, whose function takes the decoded
//! payloads of a whole batch and answers one result per item.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tower::Service;

use super::{FromJob, IntoOutcome, NamedJob};
use crate::runtime::Batch;
use crate::{Job, Outcome};

/// A batch job the worker can run: its batching and its batch service. Implemented by
/// [`#[handler(batch(max = …, linger = "…"))]`](macro@crate::handler); route it with
/// [`Route::batch_job`](crate::Route::batch_job).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a batch job definition for a worker whose state is `{S}`",
    label = "not a batch job definition",
    note = "put `#[worker_core::handler(topic = \"...\", batch(max = 100, linger = \"200ms\"))]` on an `async fn` whose last argument is a `Vec` of an extractor"
)]
pub trait BatchJobDefinition<T, S>: NamedJob + Send + 'static {
    /// How its records are batched.
    fn batch(&self) -> Batch;

    /// The handler as a batch service, called with `state`.
    fn into_batch_service(
        self,
        state: S,
    ) -> impl Service<Vec<Job>, Response = Vec<Outcome>, Error = Infallible, Future: Send + 'static>
    + Clone
    + Send
    + Sync
    + 'static;
}

/// What a batch handler returns: one result per item, in order.
#[diagnostic::on_unimplemented(
    message = "a batch handler returns one result per item: `Vec<R>` with `R: IntoOutcome`, not `{Self}`",
    label = "not `Vec<R>`"
)]
pub trait BatchOutput {
    /// The outcome of each item.
    fn into_outcomes(self) -> Vec<Outcome>;
}

impl<R: IntoOutcome> BatchOutput for Vec<R> {
    fn into_outcomes(self) -> Vec<Outcome> {
        self.into_iter().map(IntoOutcome::into_outcome).collect()
    }
}

/// Where the decoded items of a batch came from, and the outcomes of the jobs that did not
/// decode.
#[doc(hidden)]
#[derive(Debug)]
pub struct BatchPlaces {
    /// The job index of each decoded item.
    at: Vec<usize>,
    outcomes: Vec<Option<Outcome>>,
}

/// Extracts `Item` from each job of `jobs`: the items, and their places. A job whose extraction
/// fails gets its rejection as its outcome and is not handed to the handler.
#[doc(hidden)]
pub fn decode_batch<S, M, Item>(jobs: Vec<Job>, state: &S) -> (Vec<Item>, BatchPlaces)
where
    Item: FromJob<S, M>,
{
    let mut places = BatchPlaces {
        at: Vec::with_capacity(jobs.len()),
        outcomes: vec![None; jobs.len()],
    };
    let mut items = Vec::with_capacity(jobs.len());
    for (index, job) in jobs.into_iter().enumerate() {
        match Item::from_job(job, state) {
            Ok(item) => {
                items.push(item);
                places.at.push(index);
            }
            Err(rejection) => places.outcomes[index] = Some(rejection.into_outcome()),
        }
    }
    (items, places)
}

impl BatchPlaces {
    /// Every job's outcome once `call` (the handler's future over the decoded items, `None`
    /// when none decoded, or the outcome of a leading argument that could not be extracted)
    /// has answered. An answer with a missing or extra result retries every decoded item.
    pub async fn finish<F>(mut self, call: Result<Option<F>, Outcome>) -> Vec<Outcome>
    where
        F: Future,
        F::Output: BatchOutput,
    {
        match call {
            Err(outcome) => self.fill(&outcome),
            Ok(None) => {}
            Ok(Some(call)) => {
                let answered = call.await.into_outcomes();
                if answered.len() == self.at.len() {
                    for (index, outcome) in self.at.iter().zip(answered) {
                        self.outcomes[*index] = Some(outcome);
                    }
                } else {
                    let reason = format!(
                        "the batch handler answered {} results for {} items",
                        answered.len(),
                        self.at.len()
                    );
                    self.fill(&Outcome::retry(reason));
                }
            }
        }
        self.outcomes
            .into_iter()
            .map(|o| o.unwrap_or_else(|| Outcome::retry("no result for this record")))
            .collect()
    }

    fn fill(&mut self, outcome: &Outcome) {
        for slot in self.outcomes.iter_mut().filter(|o| o.is_none()) {
            *slot = Some(outcome.clone());
        }
    }
}

/// A batch handler function with its state, as a service: what `#[handler(batch(...))]`
/// generates its batch service from.
#[doc(hidden)]
#[derive(Clone)]
pub struct BatchHandlerService<F, S> {
    handle: F,
    state: S,
}

impl<F, S> std::fmt::Debug for BatchHandlerService<F, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchHandlerService")
            .finish_non_exhaustive()
    }
}

impl<F, S> BatchHandlerService<F, S> {
    pub fn new(handle: F, state: S) -> Self {
        Self { handle, state }
    }
}

impl<F, S, Fut> Service<Vec<Job>> for BatchHandlerService<F, S>
where
    F: Fn(Vec<Job>, &S) -> Fut,
    Fut: Future<Output = Vec<Outcome>> + Send + 'static,
{
    type Response = Vec<Outcome>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Vec<Outcome>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, jobs: Vec<Job>) -> Self::Future {
        let call = (self.handle)(jobs, &self.state);
        Box::pin(async move { Ok(call.await) })
    }
}
