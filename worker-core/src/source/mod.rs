//! The port between the runtime and a share-group client.
//!
//! A [`ShareSource`] hands out [`Delivery`]s (records acquired under a time-limited lock) and takes
//! acknowledgements and renewals for them at any time, in any order, while further fetches go on.
//! That is the difference from every existing share consumer, which settles a whole poll before the
//! next one. Two implementations ship: the native Kafka client ([`crate::kafka`], from the `worker-kafka` crate) and
//! [`MemoryBroker`](crate::testing::MemoryBroker) for tests.

use std::future::Future;

use crate::Result;

/// The record vocabulary is the share-group client's (KIP-932's), re-exported: a source hands
/// out the client's own [`Delivery`] values, so nothing is converted between socket and handler.
pub use worker_kafka::{
    AckError, AckKind, AckReceipt, AckSender, BrokerDeadLetters, Delivery, DeliveryId, Header,
    Lease, Recovered, Renewal, Undecodable,
};

/// A share-group client as the runtime sees it.
///
/// Every method takes `&self`: a source is driven from several places at once (the fetch loop,
/// finishing handlers, the renewal scheduler), so implementations use interior synchronisation and a
/// background driver where they need one.
///
/// # Contract
///
/// - [`fetch`](Self::fetch) acquires **at most** `max_records` records (record_limit acquisition),
///   plus at most one for each acknowledgement (not renewal) queued while the call waits, whose
///   record's slot it may give to a broker still long-polling; it waits a short time when none are
///   available and returns them; an empty vector is a normal answer. Acknowledgements and
///   renewals queued before the call ride along with it. At most one fetch is in progress at a
///   time.
/// - [`acknowledge`](Self::acknowledge) and [`renew`](Self::renew) queue their request at once, before
///   they return, and never wait for a fetch: the source sends them with the next request to that
///   record's broker, or on their own when no fetch is due. The returned [`AckReceipt`] resolves when
///   the broker has answered for that record.
/// - A record is acknowledged once. After `Accept`, `Release` or `Reject` it is no longer held.
/// - [`close`](Self::close) sends what is queued, releases whatever is still acquired and leaves the
///   group. Calls after `close` fail with [`AckError::Closed`] or [`ErrorKind::Closed`](crate::ErrorKind::Closed).
pub trait ShareSource: Send + Sync + 'static {
    /// Acquires up to `max_records` records. `max_records` is never 0.
    fn fetch(&self, max_records: u32) -> impl Future<Output = Result<Vec<Delivery>>> + Send;

    /// Queues the final acknowledgement of one delivery.
    fn acknowledge(&self, id: &DeliveryId, kind: AckKind) -> AckReceipt;

    /// Queues a renewal of the acquisition lock of one delivery (RENEW). On success the lock runs
    /// for its full duration again from when the broker received the request.
    fn renew(&self, id: &DeliveryId) -> AckReceipt;

    /// Flushes queued acknowledgements, releases every record still acquired, closes the share
    /// sessions and leaves the group.
    fn close(&self) -> impl Future<Output = Result<()>> + Send;

    /// The group's delivery-count limit (Kafka: `group.share.delivery.count.limit`, or the group's
    /// `share.delivery.count.limit` override): a record released or whose lock ends at this many
    /// deliveries is archived by the broker. `Ok(None)` when the source cannot tell (the default).
    ///
    /// The worker asks once when it starts: its handlers get at most the limit − 1 attempts and the
    /// last delivery is reserved for the dead-letter hand-off (see [`crate::policy`]). When it is
    /// unknown the worker assumes Kafka's default, 5, unless `max_attempts` is configured.
    fn delivery_limit(&self) -> impl Future<Output = Result<Option<u16>>> + Send {
        async { Ok(None) }
    }

    /// Whether the acquisition locks of this source's records can be renewed. The worker asks once
    /// when it starts: without renewal it sends no RENEW and refuses a job timeout the lock cannot
    /// cover, since a handler running past its lock means the record is delivered again. The
    /// default: [`Renewal::Available`].
    fn renewal(&self) -> impl Future<Output = Result<Renewal>> + Send {
        async { Ok(Renewal::Available) }
    }

    /// Whether the broker writes this group's dead letters itself (Kafka 4.4's KIP-1191: every
    /// record REJECTed, and every record archived at the delivery-count limit). The worker asks
    /// once when it starts: in [broker mode](crate::WorkerBuilder::broker_dlq) it refuses to start
    /// without it, and with its own sink it warns that every letter would be written twice. The
    /// default: [`BrokerDeadLetters::Off`].
    fn broker_dlq(&self) -> impl Future<Output = Result<BrokerDeadLetters>> + Send {
        async {
            Ok(BrokerDeadLetters::Off {
                why: "this source has no broker-side dead-letter queue".to_owned(),
            })
        }
    }

    /// Stops (`paused`) or resumes fetching records of `topic`; acknowledgements and renewals of
    /// its records already held still flow. The worker pauses a route's topic while the route
    /// holds its full share of the slots, so that one stuck route cannot fill the worker with
    /// records it cannot start while other topics wait. The default ignores it: with such a
    /// source a stuck route's records can still take every slot.
    fn pause(&self, topic: &str, paused: bool) {
        let _ = (topic, paused);
    }

    /// Stops (`paused`) or resumes fetching records of one partition of `topic`, as
    /// [`pause`](Self::pause) does for a whole topic. Without a delay topic the worker pauses a
    /// partition while as many of its records wait for their keys (their per-key rate, their
    /// turn) as one key may have waiting: the partition's next records would most likely wait
    /// too, taking the slots the other partitions' keys need, while left in the broker they go
    /// to the group's other members. The default ignores it: with such a source a busy key can
    /// fill the worker's slots with records that wait.
    fn pause_partition(&self, topic: &str, partition: i32, paused: bool) {
        let _ = (topic, partition, paused);
    }

    /// The share group this source consumes as, for telemetry; `None` when it has no name (the
    /// default).
    fn group(&self) -> Option<&str> {
        None
    }

    /// How many requests one [`fetch`](Self::fetch) sends at once: a Kafka source sends one to
    /// each leader of its partitions. The worker lets a fetch ask for up to `max_poll_records`
    /// per request, so the slots are not split among leaders that each answer in their own round
    /// trip. The default: 1.
    fn fetch_requests(&self) -> usize {
        1
    }
}
