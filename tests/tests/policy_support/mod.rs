//! The harness of the failure-policy tests: a topic and group per test, a recording source, the
//! Kafka dead-letter sink, and readers for the DLQ topic.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::convert::Infallible;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use rdkafka::Message;
use rdkafka::message::{Headers, OwnedMessage};
use tests::{produce, producer, unique};
use tokio::time::Instant;
use tower::service_fn;
use worker_core::dlq::{DlqSink, KafkaDlqSink, headers};
use worker_core::kafka::{Admin, KafkaSource};
use worker_core::source::{AckKind, AckReceipt, Delivery, DeliveryId, ShareSource};
use worker_core::{Job, Outcome};

pub(crate) const WORKER: &str = "policy-test-worker";

/// Every attempt of every record: (delivery count, when the handler started).
pub(crate) type Attempts = BTreeMap<i64, Vec<(u16, Instant)>>;

/// What the worker did to the broker: every acknowledgement and how many records it fetched.
#[derive(Default)]
pub(crate) struct Ledger {
    pub(crate) acks: Mutex<Vec<(i64, AckKind)>>,
    pub(crate) fetched: Mutex<usize>,
}

impl Ledger {
    pub(crate) fn acks_of(&self, offset: i64) -> Vec<AckKind> {
        let acks = self.acks.lock().expect("ledger");
        acks.iter()
            .filter(|(o, _)| *o == offset)
            .map(|(_, k)| *k)
            .collect()
    }

    pub(crate) fn fetched(&self) -> usize {
        *self.fetched.lock().expect("ledger")
    }
}

/// The Kafka source, recording into a ledger.
pub(crate) struct Recorded {
    pub(crate) inner: KafkaSource,
    pub(crate) ledger: Arc<Ledger>,
}

impl ShareSource for Recorded {
    async fn fetch(&self, max_records: u32) -> worker_core::Result<Vec<Delivery>> {
        let batch = self.inner.fetch(max_records).await?;
        *self.ledger.fetched.lock().expect("ledger") += batch.len();
        Ok(batch)
    }

    fn acknowledge(&self, id: &DeliveryId, kind: AckKind) -> AckReceipt {
        self.ledger
            .acks
            .lock()
            .expect("ledger")
            .push((id.offset, kind));
        self.inner.acknowledge(id, kind)
    }

    fn renew(&self, id: &DeliveryId) -> AckReceipt {
        self.inner.renew(id)
    }

    fn close(&self) -> impl Future<Output = worker_core::Result<()>> + Send {
        ShareSource::close(&self.inner)
    }

    fn delivery_limit(&self) -> impl Future<Output = worker_core::Result<Option<u16>>> + Send {
        ShareSource::delivery_limit(&self.inner)
    }
}

pub(crate) struct Setup {
    pub(crate) admin: Admin,
    pub(crate) topic: String,
    pub(crate) group: String,
}

impl Setup {
    /// A topic holding `values` in partition 0, and a share group that reads it from the start
    /// with `lock` locks. The DLQ topic `{topic}.dlq` is created when `dlq` is true.
    pub(crate) async fn new(
        values: Vec<String>,
        lock: Duration,
        dlq: bool,
    ) -> anyhow::Result<Self> {
        let admin = Admin::connect(tests::bootstrap())
            .await
            .context("connecting to the broker")?;
        let topic = unique("policy");
        let group = unique("policy-workers");
        admin.create_topic(&topic, 1, 1).await?;
        if dlq {
            admin.create_topic(&format!("{topic}.dlq"), 1, 1).await?;
        }
        admin
            .set_group_config(&group, "share.auto.offset.reset", "earliest")
            .await?;
        admin
            .set_group_config(
                &group,
                "share.record.lock.duration.ms",
                &lock.as_millis().to_string(),
            )
            .await?;
        produce(&producer(&[("linger.ms", "5")])?, &topic, Some(0), values).await?;
        Ok(Self {
            admin,
            topic,
            group,
        })
    }

    pub(crate) async fn source(&self, ledger: &Arc<Ledger>) -> anyhow::Result<Recorded> {
        let inner = KafkaSource::builder(tests::bootstrap(), &self.group)
            .topic(&self.topic)
            .max_wait(Duration::from_millis(100))
            .build()
            .await?;
        Ok(Recorded {
            inner,
            ledger: ledger.clone(),
        })
    }

    pub(crate) fn sink(&self, delivery_timeout: Duration) -> anyhow::Result<Arc<dyn DlqSink>> {
        Ok(Arc::new(
            KafkaDlqSink::builder(tests::bootstrap(), &self.group)
                .worker(WORKER)
                .delivery_timeout(delivery_timeout)
                .build()?,
        ))
    }

    pub(crate) async fn lag(&self) -> anyhow::Result<i64> {
        Ok(self.admin.share_group_lag(&self.group, &self.topic).await?)
    }
}

pub(crate) use tests::read_records as read_dlq;

/// The headers of a dead letter, by key.
pub(crate) fn header_map(message: &OwnedMessage) -> HashMap<String, String> {
    let mut map = HashMap::new();
    if let Some(headers) = message.headers() {
        for header in headers.iter() {
            let value = header
                .value
                .map(String::from_utf8_lossy)
                .unwrap_or_default();
            map.insert(header.key.to_owned(), value.into_owned());
        }
    }
    map
}

/// The source offset a dead letter points at.
pub(crate) fn source_offset(message: &OwnedMessage) -> anyhow::Result<i64> {
    header_map(message)
        .get(headers::OFFSET)
        .context("no offset header")?
        .parse()
        .context("the offset header is a number")
}

/// Decodes the payload as JSON before the "handler" runs, as the `Json<T>` extractor will.
pub(crate) fn json_route(
    handled: Arc<Mutex<BTreeSet<i64>>>,
) -> impl tower::Service<Job, Response = Outcome, Error = Infallible, Future: Send> + Send + 'static
{
    service_fn(move |job: Job| {
        let outcome = match serde_json::from_slice::<serde_json::Value>(
            job.payload().map(|p| &p[..]).unwrap_or_default(),
        ) {
            Err(err) => Outcome::undecodable(format!("invalid JSON: {err}")),
            Ok(_) => {
                handled.lock().expect("ledger").insert(job.id().offset);
                Outcome::Accept
            }
        };
        async move { Ok::<_, Infallible>(outcome) }
    })
}

pub(crate) fn json_values(records: i64, broken: impl Fn(i64) -> bool) -> Vec<String> {
    (0..records)
        .map(|i| {
            if broken(i) {
                format!("{{\"n\": {i}, oops")
            } else {
                format!("{{\"n\": {i}}}")
            }
        })
        .collect()
}
