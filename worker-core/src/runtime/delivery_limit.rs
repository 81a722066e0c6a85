//! The group's delivery-count limit while the worker runs: read again now and then, since an
//! operator can change it (Kafka 4.3's group-level `share.delivery.count.limit`), and the failure
//! policy it makes. The read at start is a [start-up probe](super::startup).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use crate::Result;
use crate::policy::{Policy, PolicyConfig};
use crate::source::ShareSource;

/// The failure policy for `limit`, with the warnings a misfit deserves.
pub(crate) fn policy_for(config: &PolicyConfig, limit: Option<u16>) -> Policy {
    let policy = Policy::new(config, limit);
    if let (Some(max), Some(limit)) = (config.max_attempts, limit)
        && max >= limit
    {
        tracing::warn!(
            max_attempts = max,
            delivery_limit = limit,
            "`max_attempts` is at or above the group's delivery-count limit: capped to the limit - 1, the last delivery is reserved for the dead-letter hand-off"
        );
    }
    if policy.last_attempt() == 0 {
        tracing::error!(
            ?limit,
            "the delivery-count limit leaves no attempt for handlers: every record goes to the dead-letter path"
        );
    }
    tracing::info!(
        ?limit,
        max_attempts = policy.last_attempt(),
        "failure policy resolved"
    );
    policy
}

type Read<'a> = Pin<Box<dyn Future<Output = Result<Option<u16>>> + Send + 'a>>;

/// Reads the limit again every `every` while the worker runs.
pub(crate) struct LimitWatch<'a> {
    every: Duration,
    next: Instant,
    read: Option<Read<'a>>,
    current: Option<u16>,
    /// The last read failed (logged once per failing spell).
    failing: bool,
}

impl<'a> LimitWatch<'a> {
    pub(crate) fn new(current: Option<u16>, every: Duration) -> Self {
        Self {
            every,
            next: Instant::now() + every,
            read: None,
            current,
            failing: false,
        }
    }

    /// When the next read is due (`None` while one runs: its future wakes the loop).
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.read.is_none().then_some(self.next)
    }

    /// Starts a read when due and polls the one running. `Ready(limit)` when it changed.
    pub(crate) fn poll_changed<S: ShareSource>(
        &mut self,
        source: &'a S,
        cx: &mut Context<'_>,
        now: Instant,
    ) -> Poll<Option<u16>> {
        if self.read.is_none() {
            if now < self.next {
                return Poll::Pending;
            }
            self.read = Some(Box::pin(source.delivery_limit()));
        }
        let Some(read) = self.read.as_mut() else {
            return Poll::Pending;
        };
        let Poll::Ready(result) = read.as_mut().poll(cx) else {
            return Poll::Pending;
        };
        self.read = None;
        self.next = now + self.every;
        match result {
            Ok(Some(limit)) => {
                if self.failing {
                    self.failing = false;
                    tracing::info!(
                        delivery_limit = limit,
                        "the delivery-count limit can be read again"
                    );
                }
                if self.current == Some(limit) {
                    return Poll::Pending;
                }
                tracing::warn!(from = ?self.current, to = limit, "the group's delivery-count limit changed: applying it");
                self.current = Some(limit);
                Poll::Ready(Some(limit))
            }
            Ok(None) => Poll::Pending,
            Err(err) => {
                if !self.failing {
                    self.failing = true;
                    tracing::warn!(error = %err, keeping = ?self.current, "cannot read the delivery-count limit again: keeping the last one");
                }
                Poll::Pending
            }
        }
    }
}
