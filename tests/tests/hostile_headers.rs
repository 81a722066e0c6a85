//! Producers who abuse the worker's own headers, against the real broker: records due in year
//! 9999 ahead of ordinary ones, forged provenance in a delay topic, and a flood of far records in
//! front of a real delayed job. The records behind them keep flowing, every refused record lands in
//! the route's own dead-letter topic, and the worker keeps running.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use anyhow::{Context, ensure};
use rdkafka::Message;
use rdkafka::message::{Header, OwnedHeaders, OwnedMessage};
use rdkafka::producer::{FutureProducer, FutureRecord};
use tests::{header, read_records, unique, wait_for};
use tower::service_fn;
use worker_core::delay::{DelayTopic, format_not_before, headers};
use worker_core::dlq::{KafkaDlqSink, headers as dlq};
use worker_core::kafka::{Admin, DelayTopics, KafkaSource};
use worker_core::produce::JobProducer;
use worker_core::{Job, Outcome, Worker};

/// A topic with its delay topics (every tier) and dead-letter topic, and a group reading from the
/// start.
async fn prepared(name: &str) -> anyhow::Result<(Admin, String, String)> {
    let admin = Admin::connect(tests::bootstrap())
        .await
        .context("connecting to the broker")?;
    let topic = unique(name);
    let group = unique(&format!("{name}-group"));
    let delay = DelayTopic::default().tiers(&topic, &group);
    for t in [topic.clone(), format!("{topic}.dlq")]
        .into_iter()
        .chain(delay)
    {
        admin.create_topic(&t, 1, 1).await?;
    }
    admin
        .set_group_config(&group, "share.auto.offset.reset", "earliest")
        .await?;
    admin
        .set_group_config(&group, "share.record.lock.duration.ms", "5000")
        .await?;
    Ok((admin, topic, group))
}

/// Writes one record with `headers` to `topic` and waits for the broker's confirmation.
async fn send(
    producer: &FutureProducer,
    topic: &str,
    value: &str,
    pairs: &[(&str, &str)],
) -> anyhow::Result<()> {
    let mut record_headers = OwnedHeaders::new();
    for (key, value) in pairs {
        record_headers = record_headers.insert(Header {
            key,
            value: Some(value.as_bytes()),
        });
    }
    producer
        .send(
            FutureRecord::<(), _>::to(topic)
                .payload(value)
                .headers(record_headers),
            Duration::from_secs(30),
        )
        .await
        .map_err(|(err, _)| anyhow::anyhow!("producing to {topic}: {err}"))?;
    Ok(())
}

fn value(message: &OwnedMessage) -> String {
    String::from_utf8_lossy(message.payload().unwrap_or_default()).into_owned()
}

/// What the handler saw: each record's value, when it ran.
type Ran = Arc<Mutex<Vec<(String, SystemTime)>>>;

fn recording(
    ran: Ran,
) -> impl tower::Service<Job, Response = Outcome, Error = Infallible, Future: Send> + Clone + Send {
    service_fn(move |job: Job| {
        let value =
            String::from_utf8_lossy(job.payload().map(|p| &p[..]).unwrap_or_default()).into_owned();
        ran.lock().expect("ledger").push((value, SystemTime::now()));
        async { Ok::<_, Infallible>(Outcome::Accept) }
    })
}

/// Eight records due in year 9999 ahead of fifty ordinary ones, concurrency 4, no delay topic:
/// the fifty are handled within 10 s and the eight are in the DLQ (reason `not_before`, the
/// header's value in the error), none of them held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_due_in_year_9999_are_dead_lettered_and_the_records_behind_them_flow()
-> anyhow::Result<()> {
    let (admin, topic, group) = prepared("year-9999").await?;
    let producer = tests::producer(&[])?;
    for i in 0..8 {
        send(
            &producer,
            &topic,
            &format!("far-{i}"),
            &[(headers::NOT_BEFORE, "9999-12-31T00:00:00Z")],
        )
        .await?;
    }
    tests::produce(&producer, &topic, None, (0..50).map(|i| format!("now-{i}"))).await?;
    let ran: Ran = Arc::default();
    let source = KafkaSource::builder(tests::bootstrap(), &group)
        .topic(&topic)
        .build()
        .await?;
    let worker = Worker::builder(source)
        .route(topic.as_str(), recording(ran.clone()))
        .concurrency(4)
        .dlq(KafkaDlqSink::builder(tests::bootstrap(), &group).build()?)
        .build()?;
    let shutdown = worker.shutdown_handle();
    let running = tokio::spawn(worker.run());
    let started = std::time::Instant::now();
    wait_for("the fifty", Duration::from_secs(10), async || {
        Ok(ran.lock().expect("ledger").len() == 50)
    })
    .await
    .with_context(|| format!("after {:?}", started.elapsed()))?;
    let letters = read_records(format!("{topic}.dlq"), 8, Duration::from_millis(500)).await?;
    wait_for("the lag to reach 0", Duration::from_secs(30), async || {
        Ok(admin.share_group_lag(&group, &topic).await? == 0)
    })
    .await?;
    shutdown.shutdown();
    let summary = running.await??;
    ensure!(letters.len() == 8, "{} letters", letters.len());
    for letter in &letters {
        ensure!(value(letter).starts_with("far-"), "{}", value(letter));
        ensure!(header(letter, dlq::REASON).as_deref() == Some("not_before"));
        let error = header(letter, dlq::ERROR).unwrap_or_default();
        ensure!(error.contains("9999-12-31T00:00:00Z"), "{error}");
    }
    let ran = ran.lock().expect("ledger");
    ensure!(ran.iter().all(|(v, _)| v.starts_with("now-")), "{ran:?}");
    ensure!(summary.dead_letters.not_before == 8, "{summary:?}");
    Ok(())
}

/// Records in `sms.delay` whose provenance the worker did not write — origin `payments`, origin
/// `x y`, attempt 65535 — are each dead-lettered into the route's own DLQ with
/// `share.dlq.topic` = the route (reason `decode`, the forged headers kept), and the worker goes on
/// handling the route's records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_delay_topic_headers_land_in_the_route_s_dead_letters_and_the_worker_runs_on()
-> anyhow::Result<()> {
    let (admin, topic, group) = prepared("forged").await?;
    let delay_topic = format!("{topic}.delay");
    let producer = tests::producer(&[])?;
    let now = format_not_before(SystemTime::now());
    let forged = [
        ("payments", "payments", "0"),
        ("space", "x y", "0"),
        ("attempts", topic.as_str(), "65535"),
    ];
    for (name, origin, attempt) in forged {
        send(
            &producer,
            &delay_topic,
            name,
            &[
                (headers::NOT_BEFORE, now.as_str()),
                (headers::ATTEMPT, attempt),
                (headers::ORIGIN_TOPIC, origin),
                (headers::ORIGIN_PARTITION, "0"),
                (headers::ORIGIN_OFFSET, "0"),
            ],
        )
        .await?;
    }
    let ran: Ran = Arc::default();
    let source = KafkaSource::builder(tests::bootstrap(), &group)
        .topic(&topic)
        .delay_topics(DelayTopic::default())
        .build()
        .await?;
    let delay_sink = JobProducer::builder(tests::bootstrap()).build()?;
    let worker = Worker::builder(source)
        .route(topic.as_str(), recording(ran.clone()))
        .delay(delay_sink)
        .dlq(KafkaDlqSink::builder(tests::bootstrap(), &group).build()?)
        .build()?;
    let shutdown = worker.shutdown_handle();
    let running = tokio::spawn(worker.run());
    let letters = read_records(format!("{topic}.dlq"), 3, Duration::from_millis(500)).await?;
    tests::produce(&producer, &topic, None, ["after"]).await?;
    wait_for("the next record", Duration::from_secs(30), async || {
        Ok(ran
            .lock()
            .expect("ledger")
            .iter()
            .any(|(v, _)| v == "after"))
    })
    .await?;
    wait_for("the lag to reach 0", Duration::from_secs(30), async || {
        Ok(admin.share_group_lag(&group, &delay_topic).await? == 0)
    })
    .await?;
    ensure!(!running.is_finished(), "the worker stopped");
    shutdown.shutdown();
    running.await??;
    ensure!(letters.len() == 3, "{} letters", letters.len());
    for letter in &letters {
        let name = value(letter);
        ensure!(
            header(letter, dlq::TOPIC).as_deref() == Some(topic.as_str()),
            "{name}: share.dlq.topic {:?}",
            header(letter, dlq::TOPIC)
        );
        ensure!(
            header(letter, dlq::REASON).as_deref() == Some("decode"),
            "{name}"
        );
        ensure!(
            header(letter, headers::ORIGIN_TOPIC).is_some(),
            "{name}: the forged headers are kept as provenance"
        );
    }
    let ran = ran.lock().expect("ledger");
    ensure!(
        ran.iter().all(|(v, _)| v == "after"),
        "a forged record ran: {ran:?}"
    );
    Ok(())
}

/// Five hundred records due in ten days written straight to the nearest delay topic do not make a
/// real job, delayed 20 s through the same topic, late: the worker moves each to the farthest tier
/// the first time it reads it, so the real job is read through a short topic and held from
/// `max_hold` before it is due (2 s late at most).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_far_records_in_the_delay_topic_does_not_make_a_real_job_late()
-> anyhow::Result<()> {
    let (admin, topic, group) = prepared("flood").await?;
    let delay_topic = format!("{topic}.delay");
    let producer = tests::producer(&[("linger.ms", "5")])?;
    let far = format_not_before(SystemTime::now() + Duration::from_secs(10 * 24 * 3_600));
    let provenance = [
        (headers::NOT_BEFORE, far.as_str()),
        (headers::ATTEMPT, "0"),
        (headers::ORIGIN_TOPIC, topic.as_str()),
        (headers::ORIGIN_PARTITION, "0"),
        (headers::ORIGIN_OFFSET, "0"),
    ];
    let sends = (0..500).map(|i| {
        send(
            &producer,
            &delay_topic,
            if i % 2 == 0 { "far-even" } else { "far-odd" },
            &provenance,
        )
    });
    futures::future::try_join_all(sends).await?;
    let ran: Ran = Arc::default();
    let source = KafkaSource::builder(tests::bootstrap(), &group)
        .topic(&topic)
        .delay_topics(DelayTopic::default())
        .build()
        .await?;
    let jobs = JobProducer::builder(tests::bootstrap())
        .option("linger.ms", "5")
        .build()?;
    let worker = Worker::builder(source)
        .route(topic.as_str(), recording(ran.clone()))
        .delay(jobs.clone())
        .max_hold(Duration::from_secs(10))
        .dlq(KafkaDlqSink::builder(tests::bootstrap(), &group).build()?)
        .build()?;
    let shutdown = worker.shutdown_handle();
    let running = tokio::spawn(worker.run());
    let enqueued = SystemTime::now();
    jobs.enqueue_in(&topic, &"real", Duration::from_secs(20))
        .await?;
    wait_for("the real job", Duration::from_secs(60), async || {
        Ok(!ran.lock().expect("ledger").is_empty())
    })
    .await?;
    shutdown.shutdown();
    let summary = running.await??;
    let (name, at) = ran.lock().expect("ledger")[0].clone();
    ensure!(name == "\"real\"", "{name} ran");
    let late = at
        .duration_since(enqueued + Duration::from_secs(20))
        .map_err(|early| anyhow::anyhow!("ran {:?} early", early.duration()))?;
    ensure!(late <= Duration::from_secs(2), "ran {late:?} late");
    ensure!(
        summary.moved >= 1,
        "the real job waited in the delay topic: {summary:?}"
    );
    let _ = admin;
    Ok(())
}
