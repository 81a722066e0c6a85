//! [`DeadLetters`]: writes to the DLQ in flight, and the ones waiting to be tried again.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::time::Instant;

use super::slots::SlotKey;
use crate::dlq::{DeadLetter, DlqError, DlqErrorKind, DlqSink};
use crate::{Error, ErrorKind};

use crate::policy::Backoff;

type Write = Pin<Box<dyn Future<Output = (SlotKey, DeadLetter, Result<(), DlqError>)> + Send>>;

/// How a write ended, for the dispatcher.
#[derive(Debug)]
pub(crate) enum Written {
    /// The sink confirmed it: the record may be REJECTed now.
    Confirmed(SlotKey),
    /// It failed; the letter waits for the next try. `began_failing` is true on the first failure
    /// after a healthy spell (fetching pauses).
    Failed {
        key: SlotKey,
        error: DlqError,
        began_failing: bool,
    },
    /// It failed in a way no retry can mend: nothing waits for another try, the worker stops.
    Refused { key: SlotKey, error: DlqError },
}

/// The DLQ writes of one worker. While the sink fails (a write failed and none succeeded since),
/// [`is_failing`](Self::is_failing) is true and the dispatcher fetches nothing new; failed letters
/// are tried again together, with backoff, until one succeeds.
pub(crate) struct DeadLetters {
    sink: Arc<dyn DlqSink>,
    timeout: Duration,
    backoff: Backoff,
    writing: FuturesUnordered<Write>,
    waiting: Vec<(SlotKey, DeadLetter)>,
    retry_at: Option<Instant>,
    /// Consecutive rounds of failed writes, for the backoff.
    failed_rounds: u16,
    failing: bool,
}

impl DeadLetters {
    pub(crate) fn new(sink: Arc<dyn DlqSink>, backoff: Backoff, timeout: Duration) -> Self {
        Self {
            sink,
            timeout,
            backoff,
            writing: FuturesUnordered::new(),
            waiting: Vec::new(),
            retry_at: None,
            failed_rounds: 0,
            failing: false,
        }
    }

    /// Starts writing `letter` for the record in slot `key`.
    pub(crate) fn write(&mut self, key: SlotKey, letter: DeadLetter) {
        let sink = self.sink.clone();
        let timeout = self.timeout;
        self.writing.push(Box::pin(async move {
            let result = match tokio::time::timeout(timeout, sink.send(&letter)).await {
                Ok(result) => result,
                Err(_) => Err(Error::new(
                    ErrorKind::Dlq,
                    format!("the dead-letter write did not finish within {timeout:?}"),
                )
                .into()),
            };
            (key, letter, result)
        }));
    }

    /// The next write that ended.
    pub(crate) fn poll_written(&mut self, cx: &mut Context<'_>, now: Instant) -> Poll<Written> {
        let Poll::Ready(Some((key, letter, result))) = self.writing.poll_next_unpin(cx) else {
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
            Err(error) if error.kind() == DlqErrorKind::Permanent => {
                Poll::Ready(Written::Refused { key, error })
            }
            Err(error) => {
                let began_failing = !self.failing;
                self.failing = true;
                self.waiting.push((key, letter));
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
        for (key, letter) in std::mem::take(&mut self.waiting) {
            self.write(key, letter);
        }
        true
    }

    /// Whether the sink is failing: the last write failed and letters still wait for it.
    pub(crate) fn is_failing(&self) -> bool {
        self.failing && !(self.waiting.is_empty() && self.writing.is_empty())
    }

    /// When the waiting letters are tried again.
    pub(crate) fn next_retry(&self) -> Option<Instant> {
        self.retry_at
    }

    /// Writes in flight or waiting.
    pub(crate) fn len(&self) -> usize {
        self.writing.len() + self.waiting.len()
    }

    /// Gives up on the letters waiting for another try (the sink refused for good): their keys.
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

impl std::fmt::Debug for DeadLetters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeadLetters")
            .field("sink", &self.sink)
            .field("writing", &self.writing.len())
            .field("waiting", &self.waiting.len())
            .field("failing", &self.failing)
            .finish_non_exhaustive()
    }
}
