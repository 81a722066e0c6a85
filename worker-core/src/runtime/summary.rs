//! [`Summary`]: what a worker did, returned by [`Worker::run`](super::Worker::run).

use crate::dlq::DlqReason;
use crate::source::AckError;

/// What a worker did between start and shutdown.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Summary {
    /// Records fetched.
    pub fetched: u64,
    /// Jobs whose outcome was `Accept`, handed to the source as ACCEPT.
    pub accepted: u64,
    /// Retryable failures (`Retry`, panics, timeouts) below the last attempt: released for another
    /// attempt, after a backoff hold unless counted in `held_overflow`.
    pub retried: u64,
    /// Retries held for a backoff (renewing their lock) before their RELEASE.
    pub retries_scheduled: u64,
    /// Retries released at once, without a backoff, because `max_held` records were already held.
    pub held_overflow: u64,
    /// Jobs whose outcome was `Reject` (dead-lettered first unless `dlq_on_reject` is off).
    pub rejected: u64,
    /// Records sent down the dead-letter path, by reason: written to the sink and then rejected,
    /// or with no sink configured rejected at once (see `rejected_without_dlq`).
    pub dead_letters: DeadLetterCounts,
    /// Dead-letter writes the sink confirmed.
    pub dlq_written: u64,
    /// Dead-letter writes that failed (each is tried again; the record keeps its lock).
    pub dlq_failures: u64,
    /// Times fetching paused because the dead-letter sink started failing.
    pub dlq_pauses: u64,
    /// Records still waiting for the failing dead-letter sink when the shutdown grace period
    /// ended: RELEASEd, neither accepted nor rejected.
    pub dlq_released_on_shutdown: u64,
    /// Records that should have gone to the DLQ but were REJECTed because no sink is configured.
    pub rejected_without_dlq: u64,
    /// Records of the dead-letter path REJECTed for the broker to write their letters
    /// ([`broker_dlq`](crate::WorkerBuilder::broker_dlq), or no sink while the group has a broker
    /// dead-letter queue).
    pub dlq_broker_handoffs: u64,
    /// Handlers that panicked (each counted as a retry).
    pub panicked: u64,
    /// Handlers that ran past the job timeout (each counted as a retry).
    pub timed_out: u64,
    /// Jobs cancelled through the controls: acknowledged without running (each counted as
    /// accepted too).
    pub cancelled: u64,
    /// Records that waited for their `share.not-before` in the worker (held, lock renewed).
    pub delayed: u64,
    /// Records moved to a delay topic (the copy confirmed, the original accepted): long retries
    /// and waits, keys with too many records waiting, waiting records at shutdown.
    pub moved: u64,
    /// Of `moved`, the retries (also counted in `retried`, but not released).
    pub moved_retries: u64,
    /// Records still being moved to a delay topic when the shutdown grace period ended (or the
    /// delay topic refused them for good): RELEASEd.
    pub moves_abandoned: u64,
    /// Times a record waited for a rate-limit permit (never with its delivery count raised).
    pub rate_limited: u64,
    /// Times a record waited for its key (`key-concurrency`).
    pub key_waits: u64,
    /// Records released because no route handles their topic.
    pub unrouted: u64,
    /// Records released unfinished at shutdown.
    pub released_on_shutdown: u64,
    /// Lock renewals issued.
    pub renewals: u64,
    /// Lock renewals that failed: those jobs were cancelled.
    pub renewal_failures: u64,
    /// Acknowledgements that did not take effect.
    pub ack_failures: AckFailures,
    /// Outcomes not acknowledged (and not counted above) because the record's lock was lost first.
    pub late_acks_dropped: u64,
    /// Records that were (or may have been) processed and will be delivered again: late
    /// acknowledgements dropped, plus ACCEPTs that failed.
    pub possible_duplicates: u64,
    /// Fetches that failed.
    pub fetch_errors: u64,
    /// Times the dispatcher's loop ran late enough to endanger locks (something blocked every
    /// runtime thread).
    pub dispatcher_stalls: u64,
    /// Calls of batch handlers ([`Route::batched`](super::Route::batched)).
    pub batches: u64,
    /// Batch handler calls that panicked or answered a wrong number of outcomes: every record of
    /// each was retried.
    pub failed_batches: u64,
}

/// Dead-lettered records by [`DlqReason`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadLetterCounts {
    /// [`DlqReason::HandlerError`].
    pub handler_error: u64,
    /// [`DlqReason::Decode`].
    pub decode: u64,
    /// [`DlqReason::Timeout`].
    pub timeout: u64,
    /// [`DlqReason::Panic`].
    pub panic: u64,
    /// [`DlqReason::DeliveryLimit`].
    pub delivery_limit: u64,
    /// [`DlqReason::Rejected`].
    pub rejected: u64,
    /// [`DlqReason::NotBefore`].
    pub not_before: u64,
}

impl DeadLetterCounts {
    /// All dead-lettered records.
    pub fn total(&self) -> u64 {
        self.handler_error
            + self.decode
            + self.timeout
            + self.panic
            + self.delivery_limit
            + self.rejected
            + self.not_before
    }

    /// The count for one reason.
    pub fn get(&self, reason: DlqReason) -> u64 {
        match reason {
            DlqReason::HandlerError => self.handler_error,
            DlqReason::Decode => self.decode,
            DlqReason::Timeout => self.timeout,
            DlqReason::Panic => self.panic,
            DlqReason::DeliveryLimit => self.delivery_limit,
            DlqReason::Rejected => self.rejected,
            DlqReason::NotBefore => self.not_before,
        }
    }

    pub(crate) fn count(&mut self, reason: DlqReason) {
        let n = match reason {
            DlqReason::HandlerError => &mut self.handler_error,
            DlqReason::Decode => &mut self.decode,
            DlqReason::Timeout => &mut self.timeout,
            DlqReason::Panic => &mut self.panic,
            DlqReason::DeliveryLimit => &mut self.delivery_limit,
            DlqReason::Rejected => &mut self.rejected,
            DlqReason::NotBefore => &mut self.not_before,
        };
        *n += 1;
    }
}

/// Failed acknowledgements by kind of failure.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AckFailures {
    /// [`AckError::SessionLost`].
    pub session_lost: u64,
    /// [`AckError::LockLost`].
    pub lock_lost: u64,
    /// [`AckError::LeaderMoved`].
    pub leader_moved: u64,
    /// [`AckError::Closed`].
    pub closed: u64,
    /// [`AckError::Broker`] and any other failure.
    pub other: u64,
}

impl AckFailures {
    /// All failed acknowledgements.
    pub fn total(&self) -> u64 {
        self.session_lost + self.lock_lost + self.leader_moved + self.closed + self.other
    }

    pub(crate) fn count(&mut self, err: &AckError) {
        match err {
            AckError::SessionLost => self.session_lost += 1,
            AckError::LockLost => self.lock_lost += 1,
            AckError::LeaderMoved => self.leader_moved += 1,
            AckError::Closed => self.closed += 1,
            _ => self.other += 1,
        }
    }
}
