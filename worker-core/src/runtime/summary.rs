//! [`Summary`]: what a worker did, returned by [`Worker::run`](super::Worker::run).

use crate::source::AckError;

/// What a worker did between start and shutdown.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Summary {
    /// Records fetched.
    pub fetched: u64,
    /// Jobs whose outcome was `Accept`, handed to the source as ACCEPT.
    pub accepted: u64,
    /// Jobs whose outcome was `Retry` (panics and timeouts included), handed to the source.
    pub retried: u64,
    /// Jobs whose outcome was `Reject`, handed to the source as REJECT.
    pub rejected: u64,
    /// Handlers that panicked (each counted as a retry).
    pub panicked: u64,
    /// Handlers that ran past the job timeout (each counted as a retry).
    pub timed_out: u64,
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
