//! The runtime's instruments, made once per worker from a [`Meter`].

use std::sync::Arc;
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, Meter, UpDownCounter};

use crate::dlq::DlqReason;
use crate::source::{AckError, AckKind};

use super::names;

/// Bucket bounds, in seconds, for handler and fetch durations: 1 ms to 5 min.
const DURATION_BOUNDS: [f64; 17] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0,
];
/// Bucket bounds for delivery counts (Kafka's limit is 2 to 10, default 5).
const DELIVERY_COUNT_BOUNDS: [f64; 7] = [1.0, 2.0, 3.0, 4.0, 5.0, 7.0, 10.0];

/// The instruments one worker records to. With no meter provider installed every call is a no-op.
#[derive(Debug)]
pub(crate) struct Metrics {
    fetched: Counter<u64>,
    completed: Counter<u64>,
    handler_duration: Histogram<f64>,
    in_flight: UpDownCounter<i64>,
    route_paused: UpDownCounter<i64>,
    held: UpDownCounter<i64>,
    delayed: UpDownCounter<i64>,
    moved: Counter<u64>,
    rate_limit_waits: Counter<u64>,
    key_waits: Counter<u64>,
    renewals: Counter<u64>,
    renewal_failures: Counter<u64>,
    locks_lost: Counter<u64>,
    acks: Counter<u64>,
    ack_failures: Counter<u64>,
    possible_duplicates: Counter<u64>,
    dlq_writes: Counter<u64>,
    dlq_broker_handoffs: Counter<u64>,
    dlq_failures: Counter<u64>,
    fetch_duration: Histogram<f64>,
    delivery_count: Histogram<u64>,
    stalls: Counter<u64>,
    lateness: Histogram<f64>,
    /// The gauges as last reported, so they can be moved by the difference.
    reported_in_flight: i64,
    reported_held: i64,
    reported_delayed: i64,
}

fn topic(topic: &Arc<str>) -> KeyValue {
    KeyValue::new(names::TOPIC, topic.clone())
}

/// Every `outcome` a handler call can end with (`Ending::as_str`).
pub(crate) const OUTCOMES: [&str; 6] = [
    "accept",
    "retry",
    "reject",
    "undecodable",
    "panic",
    "timeout",
];
/// Every acknowledgement type (`AckKind::as_str`).
const ACK_KINDS: [AckKind; 3] = [AckKind::Accept, AckKind::Release, AckKind::Reject];
/// Every error class (`AckError::as_str`).
pub(crate) const ACK_ERRORS: [&str; 6] = [
    "session_lost",
    "lock_lost",
    "leader_moved",
    "closed",
    "duplicate",
    "broker",
];

impl Metrics {
    /// The instruments, with every counter series known at start (per route topic, outcome, ack
    /// kind, error class and dead-letter reason) recorded at 0: dashboards and `rate()` alerts see
    /// a series from the first scrape, not from the first event (the Prometheus convention).
    pub(crate) fn new<'a>(meter: &Meter, topics: impl IntoIterator<Item = &'a str>) -> Self {
        let metrics = Self::uninitialised(meter);
        for name in topics {
            metrics.zero(&KeyValue::new(names::TOPIC, Arc::<str>::from(name)));
        }
        metrics.dlq_failures.add(0, &[]);
        metrics.stalls.add(0, &[]);
        metrics
    }

    /// Records 0 on every counter series of one topic.
    fn zero(&self, topic: &KeyValue) {
        let topic = || topic.clone();
        self.fetched.add(0, &[topic()]);
        for outcome in OUTCOMES {
            self.completed
                .add(0, &[topic(), KeyValue::new(names::OUTCOME, outcome)]);
        }
        self.renewals.add(0, &[topic()]);
        self.route_paused.add(0, &[topic()]);
        self.locks_lost.add(0, &[topic()]);
        self.possible_duplicates.add(0, &[topic()]);
        for error in ACK_ERRORS {
            self.renewal_failures
                .add(0, &[topic(), KeyValue::new(names::ERROR, error)]);
        }
        for kind in ACK_KINDS {
            let ack = || KeyValue::new(names::ACK, kind.as_str());
            self.acks.add(0, &[topic(), ack()]);
            for error in ACK_ERRORS {
                self.ack_failures
                    .add(0, &[topic(), ack(), KeyValue::new(names::ERROR, error)]);
            }
        }
        for reason in DlqReason::ALL {
            self.dlq_writes
                .add(0, &[topic(), KeyValue::new(names::REASON, reason.as_str())]);
        }
    }

    fn uninitialised(meter: &Meter) -> Self {
        let records = "{record}";
        Self {
            fetched: meter
                .u64_counter(names::RECORDS_FETCHED)
                .with_description("Records acquired by fetches.")
                .with_unit(records)
                .build(),
            completed: meter
                .u64_counter(names::RECORDS_COMPLETED)
                .with_description("Handler calls that ended, by outcome.")
                .with_unit(records)
                .build(),
            handler_duration: meter
                .f64_histogram(names::HANDLER_DURATION)
                .with_description("How long handlers ran.")
                .with_unit("s")
                .with_boundaries(DURATION_BOUNDS.to_vec())
                .build(),
            route_paused: meter
                .i64_up_down_counter(names::ROUTE_PAUSED)
                .with_description(
                    "1 while the route's topic is paused fleet-wide by the control topic.",
                )
                .build(),
            in_flight: meter
                .i64_up_down_counter(names::RECORDS_IN_FLIGHT)
                .with_description("Records fetched and not yet settled with the broker.")
                .with_unit(records)
                .build(),
            held: meter
                .i64_up_down_counter(names::RECORDS_HELD)
                .with_description("Retries waiting out their backoff, locks renewed.")
                .with_unit(records)
                .build(),
            delayed: meter
                .i64_up_down_counter(names::RECORDS_DELAYED)
                .with_description("Records waiting for their not-before, locks renewed.")
                .with_unit(records)
                .build(),
            moved: meter
                .u64_counter(names::RECORDS_MOVED)
                .with_description("Records moved to a delay topic, by reason.")
                .with_unit(records)
                .build(),
            rate_limit_waits: meter
                .u64_counter(names::RATE_LIMIT_WAITS)
                .with_description("Times a record waited for a rate-limit permit.")
                .with_unit("{wait}")
                .build(),
            key_waits: meter
                .u64_counter(names::KEY_WAITS)
                .with_description("Times a record waited for its key to be free.")
                .with_unit("{wait}")
                .build(),
            renewals: meter
                .u64_counter(names::LOCK_RENEWALS)
                .with_description("Lock renewals (RENEW) sent.")
                .with_unit("{request}")
                .build(),
            renewal_failures: meter
                .u64_counter(names::LOCK_RENEWAL_FAILURES)
                .with_description("Lock renewals that failed.")
                .with_unit("{request}")
                .build(),
            locks_lost: meter
                .u64_counter(names::LOCKS_LOST)
                .with_description("Records whose lock was lost before their outcome.")
                .with_unit(records)
                .build(),
            acks: meter
                .u64_counter(names::ACKS)
                .with_description("Acknowledgements the broker confirmed.")
                .with_unit(records)
                .build(),
            ack_failures: meter
                .u64_counter(names::ACK_FAILURES)
                .with_description("Acknowledgements that did not take effect.")
                .with_unit(records)
                .build(),
            possible_duplicates: meter
                .u64_counter(names::POSSIBLE_DUPLICATES)
                .with_description("Records that may be processed again.")
                .with_unit(records)
                .build(),
            dlq_writes: meter
                .u64_counter(names::DLQ_WRITES)
                .with_description("Dead letters the sink confirmed.")
                .with_unit(records)
                .build(),
            dlq_broker_handoffs: meter
                .u64_counter(names::DLQ_BROKER_HANDOFFS)
                .with_description(
                    "Records REJECTed for the broker's own dead-letter queue to write (KIP-1191).",
                )
                .with_unit(records)
                .build(),
            dlq_failures: meter
                .u64_counter(names::DLQ_FAILURES)
                .with_description("Dead-letter writes that failed (tried again).")
                .with_unit("{write}")
                .build(),
            fetch_duration: meter
                .f64_histogram(names::FETCH_DURATION)
                .with_description("How long fetches took, long polls included.")
                .with_unit("s")
                .with_boundaries(DURATION_BOUNDS.to_vec())
                .build(),
            delivery_count: meter
                .u64_histogram(names::DELIVERY_COUNT)
                .with_description("The broker's delivery count of fetched records.")
                .with_unit("{delivery}")
                .with_boundaries(DELIVERY_COUNT_BOUNDS.to_vec())
                .build(),
            stalls: meter
                .u64_counter(names::DISPATCHER_STALLS)
                .with_description("Times the dispatcher loop ran late enough to endanger locks.")
                .with_unit("{stall}")
                .build(),
            lateness: meter
                .f64_histogram(names::DISPATCHER_LATENESS)
                .with_description("How late the dispatcher loop was when it stalled.")
                .with_unit("s")
                .with_boundaries(DURATION_BOUNDS.to_vec())
                .build(),
            reported_in_flight: 0,
            reported_held: 0,
            reported_delayed: 0,
        }
    }

    pub(crate) fn fetch_ended(&self, took: Duration, ok: bool) {
        let result = if ok { "ok" } else { "error" };
        self.fetch_duration
            .record(took.as_secs_f64(), &[KeyValue::new(names::RESULT, result)]);
    }

    /// `records` of topic `name` were fetched (counted once per topic and batch).
    pub(crate) fn fetched(&self, name: &Arc<str>, records: u64) {
        self.fetched.add(records, &[topic(name)]);
    }

    pub(crate) fn delivered(&self, name: &Arc<str>, delivery_count: u16) {
        self.delivery_count
            .record(u64::from(delivery_count), &[topic(name)]);
    }

    pub(crate) fn completed(&self, name: &Arc<str>, outcome: &'static str, took: Duration) {
        let attrs = [topic(name), KeyValue::new(names::OUTCOME, outcome)];
        self.completed.add(1, &attrs);
        self.handler_duration.record(took.as_secs_f64(), &attrs);
    }

    /// Moves the gauges to the current counts.
    pub(crate) fn occupancy(&mut self, in_flight: usize, held: usize, delayed: usize) {
        let in_flight = i64::try_from(in_flight).unwrap_or(i64::MAX);
        let held = i64::try_from(held).unwrap_or(i64::MAX);
        let delayed = i64::try_from(delayed).unwrap_or(i64::MAX);
        if delayed != self.reported_delayed {
            self.delayed.add(delayed - self.reported_delayed, &[]);
            self.reported_delayed = delayed;
        }
        if in_flight != self.reported_in_flight {
            self.in_flight.add(in_flight - self.reported_in_flight, &[]);
            self.reported_in_flight = in_flight;
        }
        if held != self.reported_held {
            self.held.add(held - self.reported_held, &[]);
            self.reported_held = held;
        }
    }

    /// A route's topic was paused (`true`) or resumed fleet-wide.
    pub(crate) fn route_paused(&self, name: &Arc<str>, paused: bool) {
        self.route_paused
            .add(if paused { 1 } else { -1 }, &[topic(name)]);
    }

    pub(crate) fn moved(&self, name: &Arc<str>, reason: &'static str) {
        self.moved
            .add(1, &[topic(name), KeyValue::new(names::REASON, reason)]);
    }

    pub(crate) fn rate_limited(&self, name: &Arc<str>, limit: &'static str) {
        self.rate_limit_waits
            .add(1, &[topic(name), KeyValue::new(names::LIMIT, limit)]);
    }

    pub(crate) fn key_waited(&self, name: &Arc<str>) {
        self.key_waits.add(1, &[topic(name)]);
    }

    pub(crate) fn renewed(&self, name: &Arc<str>) {
        self.renewals.add(1, &[topic(name)]);
    }

    pub(crate) fn renewal_failed(&self, name: &Arc<str>, error: &AckError) {
        self.renewal_failures.add(
            1,
            &[topic(name), KeyValue::new(names::ERROR, error.as_str())],
        );
    }

    pub(crate) fn lock_lost(&self, name: &Arc<str>) {
        self.locks_lost.add(1, &[topic(name)]);
    }

    pub(crate) fn possible_duplicate(&self, name: &Arc<str>) {
        self.possible_duplicates.add(1, &[topic(name)]);
    }

    pub(crate) fn acked(&self, name: &Arc<str>, kind: AckKind, result: Result<(), &AckError>) {
        match result {
            Ok(()) => self
                .acks
                .add(1, &[topic(name), KeyValue::new(names::ACK, kind.as_str())]),
            Err(error) => self.ack_failures.add(
                1,
                &[
                    topic(name),
                    KeyValue::new(names::ACK, kind.as_str()),
                    KeyValue::new(names::ERROR, error.as_str()),
                ],
            ),
        }
    }

    pub(crate) fn dead_lettered(&self, name: &Arc<str>, reason: DlqReason) {
        self.dlq_writes.add(
            1,
            &[topic(name), KeyValue::new(names::REASON, reason.as_str())],
        );
    }

    pub(crate) fn handed_to_broker_dlq(&self, name: &Arc<str>, reason: DlqReason) {
        self.dlq_broker_handoffs.add(
            1,
            &[topic(name), KeyValue::new(names::REASON, reason.as_str())],
        );
    }

    pub(crate) fn dlq_failed(&self) {
        self.dlq_failures.add(1, &[]);
    }

    pub(crate) fn dispatcher_stalled(&self, late: Duration) {
        self.stalls.add(1, &[]);
        self.lateness.record(late.as_secs_f64(), &[]);
    }
}
