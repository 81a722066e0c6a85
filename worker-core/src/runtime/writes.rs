//! [`Writes`]: confirmed writes that a record waits for while it keeps its lock — its dead letter
//! ([`DeadLetters`]) or its copy in a delay topic ([`Moves`]) — in flight, and the failed ones
//! waiting to be tried again.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::time::Instant;

use super::slots::SlotKey;
use crate::delay::{DelaySink, DelayedRecord};
use crate::dlq::{DeadLetter, DlqError, DlqErrorKind, DlqSink};
use crate::policy::Backoff;
use crate::{Error, ErrorKind};

type Write<T, E> = Pin<Box<dyn Future<Output = (SlotKey, T, Result<(), E>)> + Send>>;
type Sender<T, E> =
    Arc<dyn Fn(T) -> Pin<Box<dyn Future<Output = Result<(), E>> + Send>> + Send + Sync>;

/// Dead letters on their way to the sink.
pub(crate) type DeadLetters = Writes<DeadLetter, DlqError>;
/// Records on their way to a delay topic.
pub(crate) type Moves = Writes<DelayedRecord, Error>;

/// How a write ended, for the dispatcher.
#[derive(Debug)]
pub(crate) enum Written<E> {
    /// The sink confirmed it: the record may be settled now.
    Confirmed(SlotKey),
    /// It failed; it waits for the next try. `began_failing` is true on the first failure after a
    /// healthy spell.
    Failed {
        key: SlotKey,
        error: E,
        began_failing: bool,
    },
    /// It failed in a way no retry can mend: nothing waits for another try, the worker stops.
    Refused { key: SlotKey, error: E },
}

/// The writes of one kind of one worker. While the sink fails (a write failed and none succeeded
/// since), [`is_failing`](Self::is_failing) is true; failed items are tried again together, with
/// backoff, until one succeeds.
pub(crate) struct Writes<T, E> {
    send: Sender<T, E>,
    permanent: fn(&E) -> bool,
    timeout: Duration,
    backoff: Backoff,
    writing: FuturesUnordered<Write<T, E>>,
    waiting: Vec<(SlotKey, T)>,
    retry_at: Option<Instant>,
    /// Consecutive rounds of failed writes, for the backoff.
    failed_rounds: u16,
    failing: bool,
    /// What is written, for the timeout's message.
    what: &'static str,
}

impl DeadLetters {
    pub(crate) fn new(sink: Arc<dyn DlqSink>, backoff: Backoff, timeout: Duration) -> Self {
        Writes::with(
            Arc::new(move |letter: DeadLetter| {
                let sink = sink.clone();
                Box::pin(async move { sink.send(&letter).await })
            }),
            |error: &DlqError| error.kind() == DlqErrorKind::Permanent,
            backoff,
            timeout,
            "dead-letter write",
        )
    }
}

impl Moves {
    pub(crate) fn new(sink: Arc<dyn DelaySink>, backoff: Backoff, timeout: Duration) -> Self {
        Writes::with(
            Arc::new(move |record: DelayedRecord| {
                let sink = sink.clone();
                Box::pin(async move { sink.send(&record).await })
            }),
            |error: &Error| crate::delay::is_permanent(error.kind()),
            backoff,
            timeout,
            "write to the delay topic",
        )
    }
}

impl<T: Clone + Send + 'static, E: From<Error> + Send + 'static> Writes<T, E> {
    fn with(
        send: Sender<T, E>,
        permanent: fn(&E) -> bool,
        backoff: Backoff,
        timeout: Duration,
        what: &'static str,
    ) -> Self {
        Self {
            send,
            permanent,
            timeout,
            backoff,
            writing: FuturesUnordered::new(),
            waiting: Vec::new(),
            retry_at: None,
            failed_rounds: 0,
            failing: false,
            what,
        }
    }

    /// Starts writing `item` for the record in slot `key`.
    pub(crate) fn write(&mut self, key: SlotKey, item: T) {
        let send = self.send.clone();
        let timeout = self.timeout;
        let what = self.what;
        let sending = send(item.clone());
        self.writing.push(Box::pin(async move {
            let result = match tokio::time::timeout(timeout, sending).await {
                Ok(result) => result,
                Err(_) => Err(Error::new(
                    ErrorKind::Dlq,
                    format!("the {what} did not finish within {timeout:?}"),
                )
                .into()),
            };
            (key, item, result)
        }));
    }

    /// The next write that ended.
    pub(crate) fn poll_written(&mut self, cx: &mut Context<'_>, now: Instant) -> Poll<Written<E>> {
        let Poll::Ready(Some((key, item, result))) = self.writing.poll_next_unpin(cx) else {
            return Poll::Pending;
        };
        match result {
            Ok(()) => {
                self.failing = false;
                self.failed_rounds = 0;
                if !self.waiting.is_empty() {
                    // It works again: try the others now.
                    self.retry_at = Some(now);
                }
                Poll::Ready(Written::Confirmed(key))
            }
            Err(error) if (self.permanent)(&error) => Poll::Ready(Written::Refused { key, error }),
            Err(error) => {
                let began_failing = !self.failing;
                self.failing = true;
                self.waiting.push((key, item));
                if self.retry_at.is_none() {
                    self.failed_rounds = self.failed_rounds.saturating_add(1);
                    self.retry_at = Some(now + self.backoff.delay(self.failed_rounds));
                }
                Poll::Ready(Written::Failed {
                    key,
                    error,
                    began_failing,
                })
            }
        }
    }

    /// Starts again every waiting write if their retry is due. Returns whether it did.
    pub(crate) fn retry_due(&mut self, now: Instant) -> bool {
        if self.retry_at.is_none_or(|at| at > now) {
            return false;
        }
        self.retry_at = None;
        for (key, item) in std::mem::take(&mut self.waiting) {
            self.write(key, item);
        }
        true
    }

    /// Whether the sink is failing: the last write failed and items still wait for it.
    pub(crate) fn is_failing(&self) -> bool {
        self.failing && !(self.waiting.is_empty() && self.writing.is_empty())
    }

    /// When the waiting items are tried again.
    pub(crate) fn next_retry(&self) -> Option<Instant> {
        self.retry_at
    }

    /// Writes in flight or waiting.
    pub(crate) fn len(&self) -> usize {
        self.writing.len() + self.waiting.len()
    }

    /// Gives up on the items waiting for another try (the sink refused for good): their keys.
    pub(crate) fn give_up_waiting(&mut self) -> Vec<SlotKey> {
        self.retry_at = None;
        self.waiting.drain(..).map(|(key, _)| key).collect()
    }

    /// Gives up on every write, in flight or waiting (the grace period is over).
    pub(crate) fn abandon(&mut self) {
        self.writing = FuturesUnordered::new();
        self.waiting.clear();
        self.retry_at = None;
    }
}

impl<T, E> std::fmt::Debug for Writes<T, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writes")
            .field("what", &self.what)
            .field("writing", &self.writing.len())
            .field("waiting", &self.waiting.len())
            .field("failing", &self.failing)
            .finish_non_exhaustive()
    }
}
