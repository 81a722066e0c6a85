//! The run's statistics: JSON to `--stats-json`, one line to stderr.

use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::Serialize;
use worker_core::Summary;

use crate::activity::Activity;

/// What one `share-worker run` did.
#[derive(Debug, Serialize)]
pub(crate) struct Stats {
    /// Handler calls that finished.
    processed: u64,
    /// Records ACCEPTed.
    accepted: u64,
    /// Records RELEASEd: retries, unrouted records and those released at shutdown.
    released: u64,
    /// Records moved to a delay topic (copied, then accepted): long waits and retries.
    moved: u64,
    /// Records that waited for their `share.not-before` in the worker.
    delayed: u64,
    /// Times a record waited for a rate-limit permit.
    rate_limited: u64,
    /// Times a record waited for its key (`key-concurrency`).
    key_waits: u64,
    /// Records whose handler rejected them.
    rejected: u64,
    /// Dead letters written to the DLQ topic.
    dlq: u64,
    /// Lock renewals issued.
    renewed: u64,
    /// Acknowledgements that did not take effect.
    ack_failures: u64,
    /// Wall-clock seconds from start to exit.
    duration_s: f64,
    /// Records fetched.
    fetched: u64,
    /// Retryable failures released for another attempt.
    retried: u64,
    /// Records sent down the dead-letter path (written, or rejected without a sink).
    dead_lettered: u64,
    /// Records rejected because no dead-letter sink is configured.
    rejected_without_dlq: u64,
    /// Records REJECTed for the broker's dead-letter queue to write (`dlq.mode = "broker"`).
    dlq_broker: u64,
    /// Handlers cut off by `job-timeout`.
    timed_out: u64,
    /// Jobs cancelled through the control topic: acknowledged without running.
    cancelled: u64,
    /// Records that may be processed again.
    possible_duplicates: u64,
    /// Fetches that failed.
    fetch_errors: u64,
    /// Batches handed to batch routes' handlers (an http batch route sends a request per batch
    /// that holds a JSON payload, several when its record ids pass 6 KiB).
    batches: u64,
    /// Seconds from the first handler call to the end of the last.
    busy_s: f64,
    /// Handler calls per busy second.
    rate_per_s: f64,
}

impl Stats {
    pub(crate) fn new(summary: &Summary, activity: &Activity, elapsed: Duration) -> Self {
        let processed = activity.calls.load(Ordering::Relaxed);
        let duration_s = elapsed.as_secs_f64();
        let busy_s = activity.busy().as_secs_f64();
        Self {
            processed,
            accepted: summary.accepted,
            released: summary.retried.saturating_sub(summary.moved_retries)
                + summary.unrouted
                + summary.released_on_shutdown
                + summary.dlq_released_on_shutdown
                + summary.moves_abandoned,
            moved: summary.moved,
            delayed: summary.delayed,
            rate_limited: summary.rate_limited,
            key_waits: summary.key_waits,
            rejected: summary.rejected,
            dlq: summary.dlq_written,
            renewed: summary.renewals,
            ack_failures: summary.ack_failures.total(),
            duration_s,
            fetched: summary.fetched,
            retried: summary.retried,
            dead_lettered: summary.dead_letters.total(),
            rejected_without_dlq: summary.rejected_without_dlq,
            dlq_broker: summary.dlq_broker_handoffs,
            timed_out: summary.timed_out,
            cancelled: summary.cancelled,
            possible_duplicates: summary.possible_duplicates,
            fetch_errors: summary.fetch_errors,
            batches: summary.batches,
            busy_s,
            rate_per_s: if busy_s > 0.0 {
                processed as f64 / busy_s
            } else {
                0.0
            },
        }
    }

    /// The one-line summary.
    pub(crate) fn line(&self) -> String {
        format!(
            "share-worker: processed {} in {:.1}s ({:.0}/s while busy): accepted {}, released {}, moved {}, rejected {}, dlq {}{}, renewed {}, ack failures {}",
            self.processed,
            self.duration_s,
            self.rate_per_s,
            self.accepted,
            self.released,
            self.moved,
            self.rejected,
            self.dlq,
            if self.dlq_broker > 0 {
                format!(" (+{} to the broker's dlq)", self.dlq_broker)
            } else {
                String::new()
            },
            self.renewed,
            self.ack_failures
        )
    }

    /// Pretty JSON.
    pub(crate) fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|err| format!("{{\"error\": \"{err}\"}}"))
    }
}
