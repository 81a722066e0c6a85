//! The names of the worker's metrics and of its attributes, as the OpenTelemetry API sees them.
//!
//! A Prometheus exporter turns dots into underscores, appends the unit (`_seconds`) and `_total`
//! to counters: `share_worker.records.completed` is scraped as
//! `share_worker_records_completed_total`.

/// Records acquired by fetches (counter; `topic`).
pub const RECORDS_FETCHED: &str = "share_worker.records.fetched";
/// Handler calls that ended (counter; `topic`, `outcome`: `accept`, `retry`, `reject`,
/// `undecodable`, `timeout`, `panic`).
pub const RECORDS_COMPLETED: &str = "share_worker.records.completed";
/// How long handlers ran, in seconds (histogram; `topic`, `outcome`).
pub const HANDLER_DURATION: &str = "share_worker.handler.duration";
/// Records holding a slot: fetched and not yet settled with the broker (up-down counter).
pub const RECORDS_IN_FLIGHT: &str = "share_worker.records.in_flight";
/// Retries waiting out their backoff, locks renewed (up-down counter).
pub const RECORDS_HELD: &str = "share_worker.records.held";
/// Records waiting for their `share.not-before`, locks renewed (up-down counter).
pub const RECORDS_DELAYED: &str = "share_worker.records.delayed";
/// Records moved to a delay topic, counted once the copy is confirmed (counter; `topic`,
/// `reason`: `retry`, `not_before`, `rate_limit`, `key_busy`, `shutdown`).
pub const RECORDS_MOVED: &str = "share_worker.records.moved";
/// Times a record had to wait for a rate-limit permit (counter; `topic`, `limit`: `global`,
/// `route`, `key`). Waiting never raises a record's delivery count.
pub const RATE_LIMIT_WAITS: &str = "share_worker.rate_limit.waits";
/// Times a record had to wait for its key (`key-concurrency`) (counter; `topic`).
pub const KEY_WAITS: &str = "share_worker.key.waits";
/// Lock renewals (RENEW) sent (counter; `topic`).
pub const LOCK_RENEWALS: &str = "share_worker.lock.renewals";
/// Lock renewals the broker refused or that got no answer (counter; `topic`, `error`).
pub const LOCK_RENEWAL_FAILURES: &str = "share_worker.lock.renewal_failures";
/// Records whose lock was lost before they were settled (a renewal failed): a running job is
/// cancelled and the broker delivers the record again (counter; `topic`).
pub const LOCKS_LOST: &str = "share_worker.locks.lost";
/// Acknowledgements the broker confirmed (counter; `topic`, `ack`: `accept`, `release`,
/// `reject`).
pub const ACKS: &str = "share_worker.acks";
/// Acknowledgements that did not take effect (counter; `topic`, `ack`, `error`). A failed
/// `accept` means the record may be processed twice.
pub const ACK_FAILURES: &str = "share_worker.ack.failures";
/// Records that may be processed again: a failed accept, a lost lock (counter; `topic`).
pub const POSSIBLE_DUPLICATES: &str = "share_worker.possible_duplicates";
/// Dead letters the sink confirmed (counter; `topic`, `reason`).
pub const DLQ_WRITES: &str = "share_worker.dlq.writes";
/// Records of the dead-letter path REJECTed for the broker's own dead-letter queue to write
/// (Kafka 4.4's KIP-1191; counter; `topic`, `reason`). The reason is only here and in the log:
/// the broker's letter does not carry it.
pub const DLQ_BROKER_HANDOFFS: &str = "share_worker.dlq.broker_handoffs";
/// Dead-letter writes that failed and will be tried again (counter).
pub const DLQ_FAILURES: &str = "share_worker.dlq.failures";
/// How long a fetch took, in seconds, long polls included (histogram; `result`: `ok`, `error`).
pub const FETCH_DURATION: &str = "share_worker.fetch.duration";
/// The broker's delivery count of fetched records (histogram; `topic`). Counts above 1 are
/// redeliveries: retries, lost locks, crashed workers.
pub const DELIVERY_COUNT: &str = "share_worker.delivery_count";
/// Times the worker's dispatcher loop ran late by more than a quarter of the shortest lock
/// (counter): every runtime thread was busy or blocked, so renewals ran late too. Move blocking
/// handler work to `spawn_blocking`.
pub const DISPATCHER_STALLS: &str = "share_worker.dispatcher.stalls";
/// How late the dispatcher loop was when it stalled, in seconds (histogram).
pub const DISPATCHER_LATENESS: &str = "share_worker.dispatcher.lateness";
/// Records of a partition not yet settled by the share group, sampled from
/// DescribeShareGroupOffsets (gauge; `group`, `topic`, `partition`). The autoscaling signal.
pub const GROUP_LAG: &str = "share_worker.group.lag";
/// 1 while a route's topic is paused fleet-wide by the control topic, else 0 (gauge; `topic`).
pub const ROUTE_PAUSED: &str = "share_worker.route.paused";
/// The unfinished records a route may hold now: its share of the slots, which lanes move with
/// the work of the other lanes (gauge; `topic`).
pub const ROUTE_SLOTS: &str = "share_worker.route.slots";
/// Ticks of a periodic job this worker fired (counter; `job`).
pub const CRON_FIRINGS: &str = "share_worker.cron.firings";
/// Marks on the cron topic ignored for being more than a tick ahead of the broker's time
/// (counter; `job`).
pub const CRON_MARKS_IGNORED: &str = "share_worker.cron.marks_ignored";
/// 1 while a periodic job has missed two ticks, else 0 (gauge; `job`).
pub const CRON_OVERDUE: &str = "share_worker.cron.overdue";
/// Commands read from the control topic (counter; `result`: `obeyed`, `refused`).
pub const CONTROL_COMMANDS: &str = "share_worker.control.commands";
/// Records per call of a batch handler (histogram; `topic`).
pub const BATCH_SIZE: &str = "share_worker.batch.size";

/// Attribute: the record's topic (= its route).
pub const TOPIC: &str = "topic";
/// Attribute: how a handler call ended.
pub const OUTCOME: &str = "outcome";
/// Attribute: the acknowledgement type.
pub const ACK: &str = "ack";
/// Attribute: the error class (an [`AckError`](crate::source::AckError) name).
pub const ERROR: &str = "error";
/// Attribute: why a record was dead-lettered ([`DlqReason`](crate::dlq::DlqReason)).
pub const REASON: &str = "reason";
/// Attribute: `ok` or `error`.
pub const RESULT: &str = "result";
/// Attribute: the share group.
pub const GROUP: &str = "group";
/// Attribute: the partition.
pub const PARTITION: &str = "partition";
/// Attribute: a periodic job's name.
pub const JOB: &str = "job";
/// Attribute: which rate limit (`global`, `route`, `key`).
pub const LIMIT: &str = "limit";

/// Every metric the worker and [`LagMonitor`](super::LagMonitor) record, in the order above.
pub const ALL: [&str; 30] = [
    RECORDS_FETCHED,
    RECORDS_COMPLETED,
    HANDLER_DURATION,
    RECORDS_IN_FLIGHT,
    RECORDS_HELD,
    RECORDS_DELAYED,
    RECORDS_MOVED,
    RATE_LIMIT_WAITS,
    KEY_WAITS,
    LOCK_RENEWALS,
    LOCK_RENEWAL_FAILURES,
    LOCKS_LOST,
    ACKS,
    ACK_FAILURES,
    POSSIBLE_DUPLICATES,
    DLQ_WRITES,
    DLQ_BROKER_HANDOFFS,
    DLQ_FAILURES,
    FETCH_DURATION,
    DELIVERY_COUNT,
    DISPATCHER_STALLS,
    DISPATCHER_LATENESS,
    GROUP_LAG,
    ROUTE_PAUSED,
    ROUTE_SLOTS,
    CRON_FIRINGS,
    CRON_MARKS_IGNORED,
    CRON_OVERDUE,
    CONTROL_COMMANDS,
    BATCH_SIZE,
];
