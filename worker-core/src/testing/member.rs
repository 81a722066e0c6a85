//! One member of a [`MemoryBroker`]'s share group: the [`ShareSource`] the runtime drives.

use std::fmt;
use std::pin::pin;

use tokio::time::{Instant, sleep_until};

use std::time::Duration;

use crate::source::{AckError, AckKind, AckReceipt, Delivery, DeliveryId, ShareSource};
use crate::{Error, ErrorKind, Result};

use super::MemoryBroker;

/// A member of a [`MemoryBroker`]'s share group, made by [`MemoryBroker::member`].
///
/// It implements [`ShareSource`]: fetches acquire records for this member; acknowledgements and
/// renewals take effect at once and their receipts are ready immediately.
/// [`close`](ShareSource::close) makes every record the member holds available again at once.
///
/// Clones are handles to the same member (useful to inject faults into a member a worker owns).
#[derive(Clone)]
pub struct MemoryMember {
    broker: MemoryBroker,
    index: usize,
}

impl MemoryMember {
    pub(super) fn new(broker: MemoryBroker, index: usize) -> Self {
        Self { broker, index }
    }

    /// The name given to [`MemoryBroker::member`].
    pub fn name(&self) -> std::sync::Arc<str> {
        self.broker.shared.state().member_name(self.index)
    }

    /// How many records this member holds (acquired, not yet acknowledged, lock not ended).
    pub fn held(&self) -> usize {
        let mut state = self.broker.shared.state();
        state.expire(Instant::now());
        state.held_by(self.index)
    }

    /// Fault injection: the member's share session is lost and re-opened, as after a disconnect.
    /// Every record it holds becomes available again and acknowledgements or renewals of earlier
    /// deliveries fail with [`AckError::SessionLost`](crate::source::AckError::SessionLost).
    pub fn reset_session(&self) {
        let freed = self.broker.shared.state().release_member(self.index, false);
        if freed {
            self.broker.shared.available.notify_waiters();
        }
    }

    /// The broker this member belongs to.
    pub fn broker(&self) -> &MemoryBroker {
        &self.broker
    }
}

impl fmt::Debug for MemoryMember {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryMember")
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

/// A receipt that resolves to `result` after `latency`.
fn receipt(result: Result<(), AckError>, latency: Duration) -> AckReceipt {
    if latency.is_zero() {
        return AckReceipt::ready(result);
    }
    let (tx, rx) = AckReceipt::channel();
    tokio::spawn(async move {
        tokio::time::sleep(latency).await;
        tx.send(result);
    });
    rx
}

impl ShareSource for MemoryMember {
    async fn fetch(&self, max_records: u32) -> Result<Vec<Delivery>> {
        {
            let shared = &self.broker.shared;
            let deadline = Instant::now() + shared.state().config.fetch_wait;
            loop {
                let mut notified = pin!(shared.available.notified());
                notified.as_mut().enable();
                let wake_at = {
                    let now = Instant::now();
                    let mut state = shared.state();
                    if state.is_closed(self.index) {
                        return Err(Error::new(ErrorKind::Closed, "the member is closed"));
                    }
                    if let Some(kind) = state.fail_fetches {
                        return Err(Error::new(kind, "injected fetch failure"));
                    }
                    state.expire(now);
                    let batch = state.acquire(self.index, max_records, now);
                    if !batch.is_empty() || now >= deadline {
                        state.log_fetch(self.index, max_records, batch.len(), now);
                        return Ok(batch);
                    }
                    state.next_expiry().map_or(deadline, |at| at.min(deadline))
                };
                tokio::select! {
                    _ = notified => {}
                    _ = sleep_until(wake_at) => {}
                }
            }
        }
    }

    fn acknowledge(&self, id: &DeliveryId, kind: AckKind) -> AckReceipt {
        let (result, latency) = {
            let mut state = self.broker.shared.state();
            state.expire(Instant::now());
            (
                state.acknowledge(self.index, id, kind),
                state.config.ack_latency,
            )
        };
        let result = result.map(|freed| {
            if freed {
                self.broker.shared.available.notify_waiters();
            }
        });
        receipt(result, latency)
    }

    fn renew(&self, id: &DeliveryId) -> AckReceipt {
        let now = Instant::now();
        let (result, latency) = {
            let mut state = self.broker.shared.state();
            state.expire(now);
            (state.renew(self.index, id, now), state.config.ack_latency)
        };
        receipt(result, latency)
    }

    fn pause(&self, topic: &str, paused: bool) {
        self.broker.shared.state().pause(self.index, topic, paused);
        if !paused {
            self.broker.shared.available.notify_waiters();
        }
    }

    fn pause_partition(&self, topic: &str, partition: i32, paused: bool) {
        self.broker
            .shared
            .state()
            .pause_partition(self.index, topic, partition, paused);
        if !paused {
            self.broker.shared.available.notify_waiters();
        }
    }

    async fn delivery_limit(&self) -> Result<Option<u16>> {
        let state = self.broker.shared.state();
        if state.fail_limit_reads {
            return Err(Error::new(
                ErrorKind::Authorization,
                "injected failure reading the delivery-count limit",
            ));
        }
        Ok(Some(state.config.delivery_limit))
    }

    async fn close(&self) -> Result<()> {
        {
            let freed = self.broker.shared.state().release_member(self.index, true);
            if freed {
                self.broker.shared.available.notify_waiters();
            }
            Ok(())
        }
    }
}
