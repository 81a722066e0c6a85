//! The native share-group client, from the `worker-kafka` crate, plugged into the runtime: a
//! [`KafkaSource`] is a [`ShareSource`].
//!
//! ```no_run
//! # async fn run() -> worker_core::Result<()> {
//! use worker_core::delay::DelayTopic;
//! use worker_core::kafka::{DelayTopics, KafkaSource};
//!
//! let source = KafkaSource::builder("127.0.0.1:9092", "sms-workers")
//!     .topic("sms")
//!     .delay_topics(DelayTopic::default())
//!     .build()
//!     .await?;
//! # let _ = source;
//! # Ok(()) }
//! ```

pub use worker_kafka::{
    Admin, BrokerDlq, DeliveryLimit, DeliveryLimitSource, DlqTopicState, GroupRenewal, KafkaConfig,
    KafkaSource, KafkaSourceBuilder, OffsetReset, PartitionOffsets, ShareGroupDescription,
    ShareGroupMember,
};

use crate::delay::DelayTopic;
use crate::source::{
    AckKind, AckReceipt, BrokerDeadLetters, Delivery, DeliveryId, Renewal, ShareSource,
};
use crate::{Error, ErrorKind, Result};

/// Subscribes a [`KafkaSource`] to the delay topics of its topics.
pub trait DelayTopics {
    /// Also subscribes to the delay topics of every topic ([`DelayTopic::tiers`] with the
    /// builder's group), worked out when the source is built: what a worker with a delay sink
    /// ([`WorkerBuilder::delay`](crate::WorkerBuilder::delay)) needs, since the records it moves
    /// come back through them.
    fn delay_topics(self, delay: DelayTopic) -> Self;
}

impl DelayTopics for KafkaSourceBuilder {
    fn delay_topics(self, delay: DelayTopic) -> Self {
        self.derived_topics(move |topic, group| delay.tiers(topic, group))
    }
}

impl ShareSource for KafkaSource {
    async fn fetch(&self, max_records: u32) -> Result<Vec<Delivery>> {
        Ok(KafkaSource::fetch(self, max_records).await?)
    }

    fn acknowledge(&self, id: &DeliveryId, kind: AckKind) -> AckReceipt {
        KafkaSource::acknowledge(self, id, kind)
    }

    fn renew(&self, id: &DeliveryId) -> AckReceipt {
        KafkaSource::renew(self, id)
    }

    async fn close(&self) -> Result<()> {
        Ok(KafkaSource::close(self).await?)
    }

    async fn delivery_limit(&self) -> Result<Option<u16>> {
        Ok(KafkaSource::delivery_limit(self).await?)
    }

    async fn renewal(&self) -> Result<Renewal> {
        Ok(KafkaSource::renewal(self).await?)
    }

    async fn broker_dlq(&self) -> Result<BrokerDeadLetters> {
        Ok(KafkaSource::broker_dlq(self).await?)
    }

    fn pause(&self, topic: &str, paused: bool) {
        KafkaSource::pause(self, topic, paused);
    }

    fn pause_partition(&self, topic: &str, partition: i32, paused: bool) {
        KafkaSource::pause_partition(self, topic, partition, paused);
    }

    fn group(&self) -> Option<&str> {
        Some(KafkaSource::group(self))
    }

    fn fetch_requests(&self) -> usize {
        KafkaSource::leaders(self)
    }
}

/// The client's errors keep their message and cause; their kind maps one to one.
impl From<worker_kafka::Error> for Error {
    fn from(err: worker_kafka::Error) -> Self {
        let (kind, message, source) = err.into_parts();
        let kind = match kind {
            worker_kafka::ErrorKind::Config => ErrorKind::Config,
            worker_kafka::ErrorKind::Io => ErrorKind::Io,
            worker_kafka::ErrorKind::Protocol => ErrorKind::Protocol,
            worker_kafka::ErrorKind::Broker => ErrorKind::Broker,
            worker_kafka::ErrorKind::Unsupported => ErrorKind::Unsupported,
            worker_kafka::ErrorKind::Authorization => ErrorKind::Authorization,
            worker_kafka::ErrorKind::Authentication => ErrorKind::Authentication,
            worker_kafka::ErrorKind::Group => ErrorKind::Group,
            worker_kafka::ErrorKind::Closed => ErrorKind::Closed,
            // `ErrorKind` is non-exhaustive: a kind added later is at worst a protocol failure.
            _ => ErrorKind::Protocol,
        };
        Error::from_parts(kind, message, source)
    }
}
