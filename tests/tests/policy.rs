//! The failure policy over the Kafka source, against the real broker, judged by ledgers: poison
//! records end in the DLQ exactly once with every provenance header, transient failures succeed on
//! attempt 2 after the configured backoff, panics never kill the worker, undecodable payloads never
//! reach the handler, and a missing DLQ topic stops nothing from being lost.
//!
//! The delivery limit is tested by letting a record's lock run out four times (limit 5) before a
//! worker sees it; the SIGKILL form of that scenario (kill the worker while the record is in
//! flight, again and again) needs the `share-worker` binary and is not here yet.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::convert::Infallible;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, ensure};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, OwnedMessage};
use rdkafka::{Message, Offset, TopicPartitionList};
use tests::{client_config, produce, producer, unique};
use tokio::time::Instant;
use tower::service_fn;
use worker_core::dlq::{DlqSink, KafkaDlqSink, headers};
use worker_core::kafka::{Admin, KafkaSource};
use worker_core::policy::Backoff;
use worker_core::source::{AckKind, AckReceipt, Delivery, DeliveryId, ShareSource};
use worker_core::{Job, Outcome, Worker};

const WORKER: &str = "policy-test-worker";

/// Every attempt of every record: (delivery count, when the handler started).
type Attempts = BTreeMap<i64, Vec<(u16, Instant)>>;

/// What the worker did to the broker: every acknowledgement and how many records it fetched.
#[derive(Default)]
struct Ledger {
    acks: Mutex<Vec<(i64, AckKind)>>,
    fetched: Mutex<usize>,
}

impl Ledger {
    fn acks_of(&self, offset: i64) -> Vec<AckKind> {
        let acks = self.acks.lock().expect("ledger");
        acks.iter()
            .filter(|(o, _)| *o == offset)
            .map(|(_, k)| *k)
            .collect()
    }

    fn fetched(&self) -> usize {
        *self.fetched.lock().expect("ledger")
    }
}

/// The Kafka source, recording into a ledger, with the group's delivery limit read through the
/// admin client (the port method the Kafka source will implement itself).
struct Recorded {
    inner: KafkaSource,
    limit: u16,
    ledger: Arc<Ledger>,
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
        self.inner.close()
    }

    async fn delivery_limit(&self) -> worker_core::Result<Option<u16>> {
        Ok(Some(self.limit))
    }
}

struct Setup {
    admin: Admin,
    topic: String,
    group: String,
}

impl Setup {
    /// A topic holding `values` in partition 0, and a share group that reads it from the start
    /// with `lock` locks. The DLQ topic `{topic}.dlq` is created when `dlq` is true.
    async fn new(values: Vec<String>, lock: Duration, dlq: bool) -> anyhow::Result<Self> {
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

    async fn source(&self, ledger: &Arc<Ledger>) -> anyhow::Result<Recorded> {
        let limit = self.admin.delivery_count_limit(&self.group).await?;
        let inner = KafkaSource::builder(tests::bootstrap(), &self.group)
            .topic(&self.topic)
            .max_wait(Duration::from_millis(100))
            .build()
            .await?;
        Ok(Recorded {
            inner,
            limit: u16::try_from(limit).context("the delivery limit fits a u16")?,
            ledger: ledger.clone(),
        })
    }

    fn sink(&self, delivery_timeout: Duration) -> anyhow::Result<Arc<dyn DlqSink>> {
        Ok(Arc::new(
            KafkaDlqSink::builder(tests::bootstrap(), &self.group)
                .worker(WORKER)
                .delivery_timeout(delivery_timeout)
                .build()?,
        ))
    }

    async fn lag(&self) -> anyhow::Result<i64> {
        Ok(self.admin.share_group_lag(&self.group, &self.topic).await?)
    }
}

/// Polls `condition` every 50 ms until it holds or `limit` passes.
async fn wait_for(
    what: &str,
    limit: Duration,
    mut condition: impl AsyncFnMut() -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        if condition().await? {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Reads the DLQ topic from the start until `expected` letters arrived, then `quiet` longer to
/// catch any extra one.
async fn read_dlq(
    topic: String,
    expected: usize,
    quiet: Duration,
) -> anyhow::Result<Vec<OwnedMessage>> {
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = client_config()
            .set("group.id", unique("dlq-reader"))
            .set("enable.auto.commit", "false")
            .create()?;
        let mut assignment = TopicPartitionList::new();
        assignment.add_partition_offset(&topic, 0, Offset::Beginning)?;
        consumer.assign(&assignment)?;
        let mut letters = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while letters.len() < expected {
            ensure!(
                std::time::Instant::now() < deadline,
                "{} of {expected} dead letters in {topic} within 60 s",
                letters.len()
            );
            if let Some(message) = consumer.poll(Duration::from_millis(200)) {
                letters.push(message?.detach());
            }
        }
        let quiet_until = std::time::Instant::now() + quiet;
        while std::time::Instant::now() < quiet_until {
            if let Some(message) = consumer.poll(Duration::from_millis(200)) {
                letters.push(message?.detach());
            }
        }
        Ok(letters)
    })
    .await?
}

/// The headers of a dead letter, by key.
fn header_map(message: &OwnedMessage) -> HashMap<String, String> {
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
fn source_offset(message: &OwnedMessage) -> anyhow::Result<i64> {
    header_map(message)
        .get(headers::OFFSET)
        .context("no offset header")?
        .parse()
        .context("the offset header is a number")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_records_land_in_the_dlq_exactly_once_with_their_provenance() -> anyhow::Result<()> {
    const RECORDS: i64 = 10_000;
    let poison = |n: i64| n % 1000 == 7;
    let setup = Setup::new(
        (0..RECORDS).map(|i| i.to_string()).collect(),
        Duration::from_secs(5),
        true,
    )
    .await?;
    let ledger = Arc::new(Ledger::default());
    let accepted = Arc::new(Mutex::new(BTreeSet::new()));
    let seen = accepted.clone();
    let worker = Worker::builder(setup.source(&ledger).await?)
        .route(
            setup.topic.as_str(),
            service_fn(move |job: Job| {
                let offset = job.id().offset;
                let outcome = if poison(offset) {
                    Outcome::retry(format!("record {offset} is poison"))
                } else {
                    seen.lock().expect("ledger").insert(offset);
                    Outcome::Accept
                };
                async move { Ok::<_, Infallible>(outcome) }
            }),
        )
        .concurrency(256)
        .backoff(Backoff::exponential(
            Duration::from_millis(20),
            Duration::from_millis(200),
        ))
        .dlq(setup.sink(Duration::from_secs(10))?)
        .build()?;
    let shutdown = worker.shutdown_handle();
    let running = tokio::spawn(worker.run());
    wait_for("the lag to reach 0", Duration::from_secs(120), async || {
        Ok(setup.lag().await? == 0)
    })
    .await?;
    shutdown.shutdown();
    let summary = running.await??;

    let letters = read_dlq(format!("{}.dlq", setup.topic), 10, Duration::from_secs(2)).await?;
    let offsets: Vec<i64> = letters
        .iter()
        .map(source_offset)
        .collect::<anyhow::Result<_>>()?;
    let expected: Vec<i64> = (0..RECORDS).filter(|n| poison(*n)).collect();
    let mut sorted = offsets.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, expected, "each poison record exactly once");
    for letter in &letters {
        let h = header_map(letter);
        let offset = source_offset(letter)?;
        assert_eq!(h[headers::TOPIC], setup.topic);
        assert_eq!(h[headers::PARTITION], "0");
        assert_eq!(h[headers::GROUP], setup.group);
        assert_eq!(h[headers::DELIVERY_COUNT], "4", "attempts 1-4 of limit 5");
        assert_eq!(h[headers::REASON], "handler_error");
        assert_eq!(h[headers::ERROR], format!("record {offset} is poison"));
        humantime::parse_rfc3339(&h[headers::FAILED_AT]).context("failed.at is RFC 3339")?;
        assert_eq!(h[headers::WORKER], WORKER);
        assert_eq!(h[headers::HANDLER], setup.topic);
        assert_eq!(letter.payload(), Some(offset.to_string().as_bytes()));
        assert_eq!(letter.key(), Some(offset.to_string().as_bytes()));
        assert_eq!(ledger.acks_of(offset).last(), Some(&AckKind::Reject));
    }
    let accepted = accepted.lock().expect("ledger");
    assert_eq!(
        accepted.len() as i64,
        RECORDS - 10,
        "every other record accepted"
    );
    assert!(accepted.iter().all(|o| !poison(*o)));
    assert_eq!(summary.dead_letters.handler_error, 10, "{summary:?}");
    assert_eq!(summary.dlq_written, 10, "{summary:?}");
    assert_eq!(summary.accepted, (RECORDS - 10) as u64, "{summary:?}");
    assert_eq!(
        summary.retries_scheduled, 30,
        "three held retries per poison record: {summary:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_failures_succeed_on_attempt_two_after_the_backoff() -> anyhow::Result<()> {
    const RECORDS: i64 = 2_000;
    let flaky = |n: i64| n % 100 == 3;
    let backoff = Backoff::exponential(Duration::from_millis(500), Duration::from_millis(500));
    let setup = Setup::new(
        (0..RECORDS).map(|i| i.to_string()).collect(),
        Duration::from_secs(5),
        true,
    )
    .await?;
    let ledger = Arc::new(Ledger::default());
    let attempts: Arc<Mutex<Attempts>> = Arc::default();
    let seen = attempts.clone();
    let worker = Worker::builder(setup.source(&ledger).await?)
        .route(
            setup.topic.as_str(),
            service_fn(move |job: Job| {
                let offset = job.id().offset;
                seen.lock()
                    .expect("ledger")
                    .entry(offset)
                    .or_default()
                    .push((job.attempt(), Instant::now()));
                let outcome = if flaky(offset) && job.attempt() == 1 {
                    Outcome::retry("the SMS gateway said 503")
                } else {
                    Outcome::Accept
                };
                async move { Ok::<_, Infallible>(outcome) }
            }),
        )
        .concurrency(128)
        .backoff(backoff)
        .dlq(setup.sink(Duration::from_secs(10))?)
        .build()?;
    let shutdown = worker.shutdown_handle();
    let running = tokio::spawn(worker.run());
    wait_for("the lag to reach 0", Duration::from_secs(120), async || {
        Ok(setup.lag().await? == 0)
    })
    .await?;
    shutdown.shutdown();
    let summary = running.await??;

    let (low, high) = backoff.window(1);
    // A released record comes back with the next fetch: allow for the fetches' round trips.
    let slack = Duration::from_millis(500);
    let attempts = attempts.lock().expect("ledger");
    assert_eq!(attempts.len() as i64, RECORDS);
    let mut gaps = Vec::new();
    for (offset, tries) in attempts.iter() {
        let counts: Vec<u16> = tries.iter().map(|t| t.0).collect();
        if flaky(*offset) {
            assert_eq!(counts, [1, 2], "record {offset}");
            let gap = tries[1].1 - tries[0].1;
            assert!(
                gap >= low && gap < high + slack,
                "record {offset}: {gap:?} outside [{low:?}, {high:?}) + {slack:?}"
            );
            gaps.push(gap);
        } else {
            assert_eq!(counts, [1], "record {offset}");
        }
        assert_eq!(ledger.acks_of(*offset).last(), Some(&AckKind::Accept));
    }
    assert_eq!(gaps.len(), 20);
    eprintln!(
        "retry gaps: min {:?}, max {:?} (window [{low:?}, {high:?}))",
        gaps.iter().min(),
        gaps.iter().max()
    );
    assert_eq!(summary.accepted, RECORDS as u64, "{summary:?}");
    assert_eq!(summary.retries_scheduled, 20, "{summary:?}");
    assert_eq!(summary.dead_letters.total(), 0, "{summary:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panics_are_retried_and_the_worker_lives_on() -> anyhow::Result<()> {
    const RECORDS: i64 = 2_000;
    let explodes = |n: i64| n % 100 == 5;
    let setup = Setup::new(
        (0..RECORDS).map(|i| i.to_string()).collect(),
        Duration::from_secs(5),
        true,
    )
    .await?;
    let ledger = Arc::new(Ledger::default());
    let worker = Worker::builder(setup.source(&ledger).await?)
        .route(
            setup.topic.as_str(),
            service_fn(move |job: Job| async move {
                if explodes(job.id().offset) && job.attempt() == 1 {
                    panic!("a handler bug on record {}", job.id().offset);
                }
                Ok::<_, Infallible>(Outcome::Accept)
            }),
        )
        .concurrency(128)
        .backoff(Backoff::exponential(
            Duration::from_millis(50),
            Duration::from_millis(200),
        ))
        .dlq(setup.sink(Duration::from_secs(10))?)
        .build()?;
    let shutdown = worker.shutdown_handle();
    let running = tokio::spawn(worker.run());
    wait_for("the lag to reach 0", Duration::from_secs(120), async || {
        Ok(setup.lag().await? == 0)
    })
    .await?;
    shutdown.shutdown();
    let summary = running.await??;
    assert_eq!(summary.panicked, 20, "{summary:?}");
    assert_eq!(summary.accepted, RECORDS as u64, "{summary:?}");
    assert_eq!(summary.dead_letters.total(), 0, "{summary:?}");
    for offset in (0..RECORDS).filter(|n| explodes(*n)) {
        assert_eq!(
            ledger.acks_of(offset),
            [AckKind::Release, AckKind::Accept],
            "record {offset}"
        );
    }
    Ok(())
}

/// Decodes the payload as JSON before the "handler" runs, as the `Json<T>` extractor will.
fn json_route(
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

fn json_values(records: i64, broken: impl Fn(i64) -> bool) -> Vec<String> {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undecodable_json_goes_to_the_dlq_without_calling_the_handler() -> anyhow::Result<()> {
    const RECORDS: i64 = 500;
    let broken = |n: i64| n % 100 == 42;
    let setup = Setup::new(json_values(RECORDS, broken), Duration::from_secs(5), true).await?;
    let ledger = Arc::new(Ledger::default());
    let handled = Arc::new(Mutex::new(BTreeSet::new()));
    let worker = Worker::builder(setup.source(&ledger).await?)
        .route(setup.topic.as_str(), json_route(handled.clone()))
        .concurrency(64)
        .dlq(setup.sink(Duration::from_secs(10))?)
        .build()?;
    let shutdown = worker.shutdown_handle();
    let running = tokio::spawn(worker.run());
    wait_for("the lag to reach 0", Duration::from_secs(60), async || {
        Ok(setup.lag().await? == 0)
    })
    .await?;
    shutdown.shutdown();
    let summary = running.await??;

    let letters = read_dlq(format!("{}.dlq", setup.topic), 5, Duration::from_secs(2)).await?;
    let mut offsets: Vec<i64> = letters
        .iter()
        .map(source_offset)
        .collect::<anyhow::Result<_>>()?;
    offsets.sort_unstable();
    assert_eq!(offsets, [42, 142, 242, 342, 442]);
    for letter in &letters {
        let h = header_map(letter);
        assert_eq!(h[headers::REASON], "decode");
        assert_eq!(h[headers::DELIVERY_COUNT], "1", "never retried");
        assert!(h[headers::ERROR].starts_with("invalid JSON"), "{h:?}");
    }
    let handled = handled.lock().expect("ledger");
    assert_eq!(handled.len() as i64, RECORDS - 5);
    assert!(
        offsets.iter().all(|o| !handled.contains(o)),
        "the handler never saw them"
    );
    assert_eq!(summary.dead_letters.decode, 5, "{summary:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_dlq_topic_missing_nothing_is_lost_and_it_lands_once_created() -> anyhow::Result<()>
{
    const RECORDS: i64 = 200;
    let broken = |n: i64| n % 40 == 13;
    let poison: Vec<i64> = (0..RECORDS).filter(|n| broken(*n)).collect();
    // Locks of 3 s: the records waiting for the DLQ must be renewed to survive.
    let setup = Setup::new(json_values(RECORDS, broken), Duration::from_secs(3), false).await?;
    let ledger = Arc::new(Ledger::default());
    let handled = Arc::new(Mutex::new(BTreeSet::new()));
    let worker = Worker::builder(setup.source(&ledger).await?)
        .route(setup.topic.as_str(), json_route(handled.clone()))
        .concurrency(256)
        .dlq(setup.sink(Duration::from_secs(2))?)
        .dlq_backoff(Backoff::exponential(
            Duration::from_millis(500),
            Duration::from_secs(2),
        ))
        .build()?;
    let shutdown = worker.shutdown_handle();
    let running = tokio::spawn(worker.run());

    wait_for("the good records", Duration::from_secs(60), async || {
        Ok(handled.lock().expect("ledger").len() as i64 == RECORDS - poison.len() as i64)
    })
    .await?;
    // The first writes fail after the sink's 2 s delivery timeout; let them.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let fetched = ledger.fetched();
    let more: Vec<String> = (RECORDS..RECORDS + 50)
        .map(|i| format!("{{\"n\": {i}}}"))
        .collect();
    produce(&producer(&[])?, &setup.topic, Some(0), more).await?;
    // Ten seconds down: more than three lock durations.
    tokio::time::sleep(Duration::from_secs(10)).await;
    for offset in &poison {
        assert_eq!(
            ledger.acks_of(*offset),
            [],
            "record {offset} settled while the DLQ is down"
        );
    }
    assert_eq!(
        ledger.fetched(),
        fetched,
        "fetching is paused while the DLQ is down"
    );
    assert!(setup.lag().await? >= poison.len() as i64 + 50);

    setup
        .admin
        .create_topic(&format!("{}.dlq", setup.topic), 1, 1)
        .await?;
    wait_for("the lag to reach 0", Duration::from_secs(90), async || {
        Ok(setup.lag().await? == 0)
    })
    .await?;
    shutdown.shutdown();
    let summary = running.await??;

    let letters = read_dlq(
        format!("{}.dlq", setup.topic),
        poison.len(),
        Duration::from_secs(2),
    )
    .await?;
    let mut offsets: Vec<i64> = letters
        .iter()
        .map(source_offset)
        .collect::<anyhow::Result<_>>()?;
    offsets.sort_unstable();
    assert_eq!(offsets, poison, "each exactly once");
    for offset in &poison {
        assert_eq!(
            ledger.acks_of(*offset),
            [AckKind::Reject],
            "record {offset}"
        );
        let h = letters
            .iter()
            .map(header_map)
            .find(|h| h[headers::OFFSET] == offset.to_string())
            .context("its letter")?;
        assert_eq!(
            h[headers::DELIVERY_COUNT],
            "1",
            "its lock was kept: no redelivery"
        );
    }
    assert_eq!(
        handled.lock().expect("ledger").len() as i64,
        RECORDS + 50 - poison.len() as i64
    );
    assert!(summary.dlq_failures >= poison.len() as u64, "{summary:?}");
    assert!(summary.dlq_pauses >= 1, "{summary:?}");
    assert_eq!(summary.dlq_written, poison.len() as u64, "{summary:?}");
    assert!(summary.renewals > 0, "{summary:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_at_the_delivery_limit_goes_to_the_dlq_without_the_handler() -> anyhow::Result<()>
{
    let setup = Setup::new(vec!["stuck".to_owned()], Duration::from_secs(1), true).await?;
    let ledger = Arc::new(Ledger::default());
    let source = setup.source(&ledger).await?;
    assert_eq!(source.limit, 5, "the broker's default delivery-count limit");
    // Four deliveries that never finish (as if the worker died each time): the locks run out.
    for expected in 1..=4u16 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(delivery) = source.fetch(1).await?.first() {
                assert_eq!(delivery.delivery_count, expected);
                break;
            }
            ensure!(Instant::now() < deadline, "delivery {expected} within 30 s");
        }
    }
    let calls = Arc::new(Mutex::new(0usize));
    let counted = calls.clone();
    let worker = Worker::builder(source)
        .route(
            setup.topic.as_str(),
            service_fn(move |_job: Job| {
                *counted.lock().expect("ledger") += 1;
                async { Ok::<_, Infallible>(Outcome::Accept) }
            }),
        )
        .dlq(setup.sink(Duration::from_secs(10))?)
        .build()?;
    let shutdown = worker.shutdown_handle();
    let running = tokio::spawn(worker.run());
    wait_for("the lag to reach 0", Duration::from_secs(60), async || {
        Ok(setup.lag().await? == 0)
    })
    .await?;
    shutdown.shutdown();
    let summary = running.await??;

    let letters = read_dlq(format!("{}.dlq", setup.topic), 1, Duration::from_secs(2)).await?;
    assert_eq!(letters.len(), 1);
    let h = header_map(&letters[0]);
    assert_eq!(h[headers::REASON], "delivery_limit");
    assert_eq!(h[headers::DELIVERY_COUNT], "5");
    assert_eq!(h[headers::OFFSET], "0");
    assert_eq!(letters[0].payload(), Some(&b"stuck"[..]));
    assert_eq!(
        *calls.lock().expect("ledger"),
        0,
        "the handler was not called"
    );
    assert_eq!(ledger.acks_of(0), [AckKind::Reject]);
    assert_eq!(summary.dead_letters.delivery_limit, 1, "{summary:?}");
    Ok(())
}
