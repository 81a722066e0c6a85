//! What job-queue users expect, against the real broker: typed enqueue (payload, key, headers,
//! trace context), delayed jobs that run on time through the delay topic, durable retries that
//! survive a SIGKILL of the worker during their wait, per-key rate limits that never starve the
//! other keys, and per-key concurrency.

mod ledger_support;

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use anyhow::{Context, ensure};
use examples::sms::{Sms, send_sms};
use rdkafka::Message;
use rdkafka::message::{Headers, OwnedMessage};
use tests::{read_all, read_records, unique, wait_for};
use tokio::process::{Child, Command};
use tower::service_fn;
use worker_core::delay::{DelayTopic, headers, parse_not_before};
use worker_core::dlq::KafkaDlqSink;
use worker_core::kafka::{Admin, DelayTopics, KafkaSource};
use worker_core::produce::{EnqueueOptions, JobProducer};
use worker_core::{Job, Outcome, RateLimit, Route, Summary, Worker};

/// A topic with its delay and dead-letter topics, and a group reading from the start with 5 s
/// locks (renewed while records wait).
async fn prepared(name: &str, partitions: i32) -> anyhow::Result<(Admin, String, String)> {
    let admin = Admin::connect(tests::bootstrap())
        .await
        .context("connecting to the broker")?;
    let topic = unique(name);
    let group = unique(&format!("{name}-group"));
    admin.create_topic(&topic, partitions, 1).await?;
    for delay in DelayTopic::default().tiers(&topic, &group) {
        admin.create_topic(&delay, 1, 1).await?;
    }
    admin.create_topic(&format!("{topic}.dlq"), 1, 1).await?;
    admin
        .set_group_config(&group, "share.auto.offset.reset", "earliest")
        .await?;
    admin
        .set_group_config(&group, "share.record.lock.duration.ms", "5000")
        .await?;
    Ok((admin, topic, group))
}

fn producer() -> anyhow::Result<JobProducer> {
    Ok(JobProducer::builder(tests::bootstrap())
        .option("linger.ms", "5")
        .build()?)
}

/// A source on `topic` and its delay topic.
async fn source(topic: &str, group: &str) -> anyhow::Result<KafkaSource> {
    Ok(KafkaSource::builder(tests::bootstrap(), group)
        .topic(topic)
        .delay_topics(DelayTopic::default())
        .build()
        .await?)
}

fn header<'m>(message: &'m OwnedMessage, key: &str) -> Option<&'m [u8]> {
    message
        .headers()
        .and_then(|h| h.iter().filter(|h| h.key == key).last())
        .and_then(|h| h.value)
}

fn millis(at: SystemTime) -> i128 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as i128)
        .unwrap_or(0)
}

/// `JobProducer` writes the payload as JSON with its key and headers, and the span it is called
/// in as `traceparent`; the `#[handler]` job's typed enqueue writes the job's payload type; a
/// delayed enqueue carries `share.not-before`.
#[tokio::test(flavor = "current_thread")]
async fn typed_enqueue_writes_payload_key_headers_and_the_trace_context() -> anyhow::Result<()> {
    use opentelemetry::trace::{TraceContextExt as _, TracerProvider as _};
    use tracing::Instrument;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt;

    let (_admin, topic, _group) = prepared("enqueue", 1).await?;
    let producer = producer()?;
    // A global subscriber that keeps this thread's spans: a thread-local one (`set_default`)
    // can miss spans while the other tests of this binary register callsites on their threads.
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
    let this_thread = std::thread::current().id();
    let layer = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("test"))
        .with_filter(tracing_subscriber::filter::filter_fn(move |_| {
            std::thread::current().id() == this_thread
        }));
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))?;

    let sms = Sms {
        to: "+4915112345678".into(),
        text: "your code is 1234".into(),
    };
    let span = tracing::info_span!("signup");
    let trace_id = span.context().span().span_context().trace_id();
    let options = EnqueueOptions::new()
        .key(sms.to.clone())
        .header("source", "signup")
        .topic(topic.clone());
    let landed = send_sms::enqueue_with(&producer, &sms, options)
        .instrument(span)
        .await?;
    assert_eq!((landed.topic.as_str(), landed.offset), (topic.as_str(), 0));
    let before = SystemTime::now();
    producer
        .enqueue_in(&topic, &sms, Duration::from_secs(60))
        .await?;

    let records = read_records(topic.clone(), 2, Duration::ZERO).await?;
    let first = &records[0];
    let sent: Sms = serde_json::from_slice(first.payload().context("a payload")?)?;
    assert_eq!(sent, sms);
    assert_eq!(first.key(), Some(sms.to.as_bytes()));
    assert_eq!(header(first, "source"), Some(&b"signup"[..]));
    let parent = header(first, "traceparent").context("a traceparent")?;
    let parent = worker_core::telemetry::parse_traceparent(parent).context("a valid one")?;
    assert_eq!(
        parent.trace_id(),
        trace_id,
        "the job continues the enqueuing trace"
    );
    assert_eq!(header(first, headers::NOT_BEFORE), None);
    let second = &records[1];
    let at = parse_not_before(header(second, headers::NOT_BEFORE).context("a not-before")?)
        .map_err(anyhow::Error::msg)?;
    let ahead = millis(at) - millis(before);
    ensure!(
        (59_000..=61_000).contains(&ahead),
        "not before {ahead} ms from now"
    );
    Ok(())
}

/// A job enqueued 30 s ahead runs no earlier, and within 2 s after, its wait spent in the delay
/// topic (`max_hold` 10 s: moved, held, written back until it is due).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_enqueued_30s_ahead_runs_no_earlier_and_within_2s_after() -> anyhow::Result<()> {
    let (admin, topic, group) = prepared("delayed", 1).await?;
    let producer = producer()?;
    let ran: Arc<Mutex<Vec<(SystemTime, u16)>>> = Arc::default();
    let seen = ran.clone();
    let worker = Worker::builder(source(&topic, &group).await?)
        .route(
            topic.as_str(),
            service_fn(move |job: Job| {
                seen.lock()
                    .expect("ledger")
                    .push((SystemTime::now(), job.attempt()));
                async { Ok::<_, Infallible>(Outcome::Accept) }
            }),
        )
        .delay(producer.clone())
        .max_hold(Duration::from_secs(10))
        .dlq(KafkaDlqSink::builder(tests::bootstrap(), &group).build()?)
        .build()?;
    let shutdown = worker.shutdown_handle();
    let running = tokio::spawn(worker.run());
    let enqueued = SystemTime::now();
    producer
        .enqueue_in(&topic, &"remind me", Duration::from_secs(30))
        .await?;
    wait_for(
        "the delayed job to run",
        Duration::from_secs(60),
        async || Ok(!ran.lock().expect("ledger").is_empty()),
    )
    .await?;
    shutdown.shutdown();
    let summary: Summary = running.await??;
    let (at, attempt) = ran.lock().expect("ledger")[0];
    let late = millis(at) - millis(enqueued) - 30_000;
    ensure!(late >= 0, "ran {} ms early", -late);
    ensure!(late <= 2_000, "ran {late} ms late");
    ensure!(attempt == 1, "waiting used no attempt: attempt {attempt}");
    ensure!(
        summary.moved >= 2,
        "the wait went through the delay topic: {summary:?}"
    );
    ensure!(ran.lock().expect("ledger").len() == 1, "ran once");
    ensure!(admin.share_group_lag(&group, &topic).await? == 0);
    Ok(())
}

/// A record failing with a 2-minute backoff under `max_hold = 10s` waits in the delay topic; the
/// worker is SIGKILLed during the wait and started again; the record runs after its backoff, once,
/// and never reaches the dead-letter topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_minute_retry_survives_a_sigkill_during_its_wait() -> anyhow::Result<()> {
    const BACKOFF_MS: u64 = 120_000;
    let (admin, topic, group) = prepared("durable-retry", 1).await?;
    admin
        .set_group_config(&group, "share.record.lock.duration.ms", "2000")
        .await?;
    producer()?.enqueue(&topic, &"charge order 42").await?;
    let scratch = ledger_support::Scratch::new()?;
    let path = scratch.0.join("ledger");
    let spawn = || -> anyhow::Result<Child> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path.with_extension("log"))?;
        Command::new(env!("CARGO_BIN_EXE_delay_worker"))
            .args([tests::bootstrap().as_str(), &group, &topic])
            .arg(&path)
            .args(["10000", &BACKOFF_MS.to_string()])
            .env("RUST_LOG", "warn")
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .context("starting delay_worker")
    };
    let lines = || -> Vec<(String, u16, u128)> {
        std::fs::read_to_string(&path)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| {
                let mut fields = line.split(' ');
                let kind = fields.next()?.to_owned();
                let _origin = fields.next()?;
                Some((
                    kind,
                    fields.next()?.parse().ok()?,
                    fields.next()?.parse().ok()?,
                ))
            })
            .collect()
    };
    let delay_topic = format!("{topic}.delay");
    let worker = spawn()?;
    wait_for(
        "the first attempt to fail",
        Duration::from_secs(60),
        async || Ok(!lines().is_empty()),
    )
    .await?;
    // Moved, held 10 s and written back once: the worker is in the middle of the wait.
    wait_for(
        "the wait in the delay topic",
        Duration::from_secs(60),
        async || Ok(read_all(delay_topic.clone()).await?.len() >= 2),
    )
    .await?;
    ledger_support::kill(worker).await?;
    let killed_at = ledger_support::now_ms();
    let worker = spawn()?;
    wait_for("the retry to run", Duration::from_secs(180), async || {
        Ok(lines().iter().any(|(kind, _, _)| kind == "ok"))
    })
    .await?;
    wait_for("the lag to reach 0", Duration::from_secs(30), async || {
        Ok(admin.share_group_lag(&group, &topic).await? == 0
            && admin.share_group_lag(&group, &delay_topic).await? == 0)
    })
    .await?;
    ledger_support::terminate(worker, &path.with_extension("log")).await?;

    let lines = lines();
    let (failed_at, ran_at) = (
        lines[0].2,
        lines.iter().find(|l| l.0 == "ok").map(|l| l.2).unwrap_or(0),
    );
    ensure!(
        u128::from(killed_at) < failed_at + u128::from(BACKOFF_MS),
        "killed during the wait"
    );
    ensure!(
        ran_at >= failed_at + u128::from(BACKOFF_MS),
        "ran {} ms before its backoff ended",
        failed_at + u128::from(BACKOFF_MS) - ran_at
    );
    ensure!(
        ran_at <= failed_at + u128::from(BACKOFF_MS) + 12_000,
        "ran {} ms after its backoff ended",
        ran_at - failed_at - u128::from(BACKOFF_MS)
    );
    ensure!(
        lines.iter().filter(|l| l.0 == "ok").count() == 1,
        "ran once after the retry: {lines:?}"
    );
    // Attempt 1 failed; the kill cost the copy it held one delivery (counted, as any crash is).
    let attempt = lines.iter().find(|l| l.0 == "ok").map(|l| l.1).unwrap_or(0);
    ensure!(
        (2..=3).contains(&attempt),
        "attempts counted across the moves: {attempt}"
    );
    let letters = read_all(format!("{topic}.dlq")).await?;
    ensure!(letters.is_empty(), "{} dead letters", letters.len());
    Ok(())
}

/// One key limited to 10/s with 1,000 records ahead of 500 records of other keys: the others are
/// all handled within 5 s while the hot key proceeds at its rate, and no record is delivered
/// twice (nothing is released for the limit: the hot key's overflow waits in the delay topic).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_key_at_its_rate_limit_never_starves_the_other_keys() -> anyhow::Result<()> {
    const HOT: usize = 1_000;
    const OTHERS: usize = 500;
    const HOT_KEY: &str = "+4915100000000";
    let (_admin, topic, group) = prepared("hot-key", 1).await?;
    let producer = producer()?;
    let mut pending = Vec::new();
    for n in 0..HOT {
        let options = EnqueueOptions::new().key(HOT_KEY);
        pending.push(producer.send(&topic, Some(format!("hot {n}").into()), options));
    }
    futures::future::try_join_all(pending).await?;
    let mut pending = Vec::new();
    for n in 0..OTHERS {
        let options = EnqueueOptions::new().key(format!("+49152{n:08}"));
        pending.push(producer.send(&topic, Some(format!("other {n}").into()), options));
    }
    futures::future::try_join_all(pending).await?;

    type Entry = (tokio::time::Instant, bool, u16, u16, Vec<u8>);
    let log: Arc<Mutex<Vec<Entry>>> = Arc::default();
    let seen = log.clone();
    let worker = Worker::builder(source(&topic, &group).await?)
        .add_route(
            Route::new(
                topic.as_str(),
                service_fn(move |job: Job| {
                    let hot = job.key().map(|k| &k[..]) == Some(HOT_KEY.as_bytes());
                    seen.lock().expect("log").push((
                        tokio::time::Instant::now(),
                        hot,
                        job.delivery().delivery_count,
                        job.attempt(),
                        job.payload().map(|p| p.to_vec()).unwrap_or_default(),
                    ));
                    async { Ok::<_, Infallible>(Outcome::Accept) }
                }),
            )
            .key_rate_limit(RateLimit::per_second(10)),
        )
        .concurrency(64)
        .delay(producer.clone())
        .build()?;
    let shutdown = worker.shutdown_handle();
    let running = tokio::spawn(worker.run());
    wait_for("the other keys", Duration::from_secs(60), async || {
        Ok(log.lock().expect("log").iter().filter(|e| !e.1).count() == OTHERS)
    })
    .await?;
    let first = log.lock().expect("log")[0].0;
    let others_done = log
        .lock()
        .expect("log")
        .iter()
        .filter(|e| !e.1)
        .map(|e| e.0)
        .max()
        .unwrap_or(first);
    // Let the hot key run on for a while, then stop.
    wait_for(
        "ten seconds of the hot key",
        Duration::from_secs(30),
        async || Ok(first.elapsed() >= Duration::from_secs(10)),
    )
    .await?;
    shutdown.shutdown();
    let summary = running.await??;
    let log = log.lock().expect("log").clone();
    let took = others_done - first;
    ensure!(
        took <= Duration::from_secs(5),
        "the other keys took {took:?}"
    );
    let hot: Vec<tokio::time::Instant> = log.iter().filter(|e| e.1).map(|e| e.0).collect();
    let span = hot.last().copied().unwrap_or(first) - first;
    // 10/s with bursts of 10: at most 10 + 10·t in t seconds, and at least its rate less a
    // second for the records coming back from the delay topic.
    let allowed = 10.0 + 10.0 * span.as_secs_f64() + 2.0;
    ensure!(
        (hot.len() as f64) <= allowed,
        "{} hot records in {span:?}",
        hot.len()
    );
    ensure!(
        hot.len() >= 70,
        "the hot key proceeded: {} in {span:?}",
        hot.len()
    );
    for (n, at) in hot.iter().enumerate() {
        let limit = 10.0 + 10.0 * (*at - first).as_secs_f64() + 2.0;
        ensure!((n as f64) < limit, "hot record {n} ran too early");
    }
    ensure!(
        log.iter().all(|e| e.2 == 1 && e.3 == 1),
        "a record was delivered again: {:?}",
        log.iter()
            .find(|e| e.2 != 1 || e.3 != 1)
            .map(|e| (e.2, e.3))
    );
    let payloads: HashSet<&Vec<u8>> = log.iter().map(|e| &e.4).collect();
    ensure!(payloads.len() == log.len(), "a record ran twice");
    ensure!(
        summary.moved > 0,
        "the hot key's overflow moved aside: {summary:?}"
    );
    Ok(())
}

/// `key-concurrency = 1`: a handler that fails when it sees two calls for one key at once never
/// fails, while records of different keys run side by side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_concurrency_one_never_runs_two_records_of_a_key_at_once() -> anyhow::Result<()> {
    const RECORDS: usize = 300;
    let (admin, topic, group) = prepared("key-turns", 2).await?;
    let producer = producer()?;
    let mut pending = Vec::new();
    for n in 0..RECORDS {
        let options = EnqueueOptions::new().key(format!("account-{}", n % 10));
        pending.push(producer.send(&topic, Some(n.to_string().into()), options));
    }
    futures::future::try_join_all(pending).await?;
    let running: Arc<Mutex<HashMap<Vec<u8>, usize>>> = Arc::default();
    let done: Arc<Mutex<HashSet<Vec<u8>>>> = Arc::default();
    let most = Arc::new(AtomicUsize::new(0));
    let (r, d, m) = (running.clone(), done.clone(), most.clone());
    let worker = Worker::builder(source(&topic, &group).await?)
        .add_route(
            Route::new(
                topic.as_str(),
                service_fn(move |job: Job| {
                    let (running, done, most) = (r.clone(), d.clone(), m.clone());
                    async move {
                        let key = job.key().map(|k| k.to_vec()).unwrap_or_default();
                        let clash = {
                            let mut running = running.lock().expect("map");
                            let n = running.entry(key.clone()).or_default();
                            *n += 1;
                            most.fetch_max(running.values().sum(), Ordering::SeqCst);
                            *running.get(&key).unwrap_or(&0) > 1
                        };
                        tokio::time::sleep(Duration::from_millis(30)).await;
                        if let Some(n) = running.lock().expect("map").get_mut(&key) {
                            *n -= 1;
                        }
                        if clash {
                            return Ok::<_, Infallible>(Outcome::reject(
                                "two calls for one key at once",
                            ));
                        }
                        done.lock()
                            .expect("set")
                            .insert(job.payload().map(|p| p.to_vec()).unwrap_or_default());
                        Ok(Outcome::Accept)
                    }
                }),
            )
            .key_concurrency(1),
        )
        .concurrency(32)
        .delay(producer.clone())
        .build()?;
    let shutdown = worker.shutdown_handle();
    let handle = tokio::spawn(worker.run());
    wait_for("every record", Duration::from_secs(90), async || {
        Ok(done.lock().expect("set").len() == RECORDS)
    })
    .await?;
    wait_for("the lag to reach 0", Duration::from_secs(30), async || {
        Ok(admin.share_group_lag(&group, &topic).await? == 0)
    })
    .await?;
    shutdown.shutdown();
    let summary = handle.await??;
    ensure!(
        summary.rejected == 0,
        "two records of one key ran at once: {summary:?}"
    );
    let most = most.load(Ordering::SeqCst);
    ensure!((5..=10).contains(&most), "{most} ran at once over 10 keys");
    ensure!(summary.key_waits > 0, "{summary:?}");
    Ok(())
}
