//! Priority lanes against the real broker: several topics feed one handler, a lane of a higher
//! priority takes the slots first (the lower lane keeps only its floor, so it keeps draining), and
//! weighted lanes split the slots by weight while both have records.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use anyhow::Context;
use tests::{produce, producer, unique, wait_for};
use tokio::time::Instant;
use tower::service_fn;
use worker_core::kafka::{Admin, KafkaSource};
use worker_core::runtime::Route;
use worker_core::{Job, Outcome, Summary, Worker};

/// One handler call: its topic, when it started and ended, and when its record was produced.
#[derive(Clone, Debug)]
struct Call {
    topic: String,
    started: Instant,
    ended: Instant,
    /// From the record's timestamp to the end of the call.
    since_produced: Duration,
}

/// The handler every lane shares: takes `took`, and writes down each call.
#[derive(Clone, Default)]
struct Calls(Arc<Mutex<Vec<Call>>>);

impl Calls {
    fn service(
        &self,
        took: Duration,
    ) -> impl tower::Service<
        Job,
        Response = Outcome,
        Error = Infallible,
        Future = impl Future<Output = Result<Outcome, Infallible>> + Send + 'static,
    > + Clone
    + Send
    + 'static {
        let calls = self.0.clone();
        service_fn(move |job: Job| {
            let calls = calls.clone();
            async move {
                let started = Instant::now();
                tokio::time::sleep(took).await;
                let produced = SystemTime::UNIX_EPOCH
                    + Duration::from_millis(u64::try_from(job.delivery().timestamp).unwrap_or(0));
                let since_produced = SystemTime::now()
                    .duration_since(produced)
                    .unwrap_or_default();
                calls.lock().unwrap().push(Call {
                    topic: job.topic().to_string(),
                    started,
                    ended: Instant::now(),
                    since_produced,
                });
                Ok(Outcome::Accept)
            }
        })
    }

    fn of(&self, topic: &str) -> Vec<Call> {
        let calls = self.0.lock().unwrap();
        calls.iter().filter(|c| c.topic == topic).cloned().collect()
    }
}

/// Two topics of `records` records each (one partition each) and a group that reads them from
/// the start.
async fn prepared(records: [usize; 2]) -> anyhow::Result<(Admin, [String; 2], String)> {
    let admin = Admin::connect(tests::bootstrap())
        .await
        .context("connecting to the broker")?;
    let topics = [unique("lane-a"), unique("lane-b")];
    let group = unique("lanes");
    for (topic, records) in topics.iter().zip(records) {
        admin.create_topic(topic, 1, 1).await?;
        let values = (0..records).map(|i| format!("{topic}-{i}"));
        produce(&producer(&[("linger.ms", "5")])?, topic, Some(0), values).await?;
    }
    admin
        .set_group_config(&group, "share.auto.offset.reset", "earliest")
        .await?;
    Ok((admin, topics, group))
}

async fn source(topics: &[String; 2], group: &str) -> anyhow::Result<KafkaSource> {
    Ok(KafkaSource::builder(tests::bootstrap(), group)
        .topic(&topics[0])
        .topic(&topics[1])
        .build()
        .await?)
}

/// How many calls of `calls` ran at `at`.
fn running_at(calls: &[Call], at: Instant) -> usize {
    calls
        .iter()
        .filter(|c| c.started <= at && at < c.ended)
        .count()
}

/// 20,000 marketing records are queued and draining when 200 one-time passwords arrive: each is
/// handled within 1 s of being produced, because the marketing lane yields every slot but its
/// floor (32 slots over 2 routes: 4) while the password lane has records; the marketing lane
/// keeps running on its floor meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_time_passwords_overtake_a_marketing_blast() -> anyhow::Result<()> {
    const FLOOR: usize = 4;
    let (admin, [marketing, otp], group) = prepared([20_000, 0]).await?;
    // Connected and past its idempotence handshake before the burst, so that a record's
    // timestamp (taken when it is sent) is not half a second older than its first try.
    let burst = producer(&[("linger.ms", "0")])?;
    produce(&burst, &marketing, Some(0), ["warm-up"]).await?;
    let calls = Calls::default();
    let sms = calls.service(Duration::from_millis(20));
    let worker = Worker::builder(source(&[marketing.clone(), otp.clone()], &group).await?)
        .add_route(Route::new(marketing.as_str(), sms.clone()).priority(1))
        .add_route(Route::new(otp.as_str(), sms).priority(0))
        .concurrency(32)
        .build()?;
    let shutdown = worker.shutdown_handle();
    let running = tokio::spawn(worker.run());
    wait_for(
        "the marketing lane to be draining at full speed",
        Duration::from_secs(30),
        async || Ok(calls.of(&marketing).len() >= 1_000),
    )
    .await?;
    produce(&burst, &otp, Some(0), (0..200).map(|i| format!("otp-{i}"))).await?;
    wait_for(
        "every one-time password to be handled",
        Duration::from_secs(30),
        async || Ok(calls.of(&otp).len() >= 200),
    )
    .await?;
    shutdown.shutdown();
    let summary: Summary = running.await??;
    let passwords = calls.of(&otp);
    let slowest = passwords.iter().map(|c| c.since_produced).max();
    assert!(
        slowest < Some(Duration::from_secs(1)),
        "a one-time password was handled {slowest:?} after it was produced; {summary:?}"
    );
    // While passwords wait in the worker, the marketing records that ran before the burst have
    // ended (20 ms each) and marketing runs on its floor: never more, and it keeps going.
    let marketing_calls = calls.of(&marketing);
    let first = passwords
        .iter()
        .map(|c| c.started)
        .min()
        .context("no call")?;
    let last = passwords
        .iter()
        .map(|c| c.started)
        .max()
        .context("no call")?;
    let settled = first + Duration::from_millis(100);
    let mut at = settled;
    let mut most = 0;
    while at < last {
        if running_at(&passwords, at) > 0 {
            most = most.max(running_at(&marketing_calls, at));
        }
        at += Duration::from_millis(5);
    }
    assert!(
        most <= FLOOR,
        "marketing ran {most} handlers at once while passwords waited (its floor is {FLOOR})"
    );
    let drained_meanwhile = marketing_calls
        .iter()
        .filter(|c| c.started >= first && c.started <= last)
        .count();
    assert!(
        drained_meanwhile > 0,
        "marketing stopped while the passwords ran: its floor was not kept"
    );
    assert_eq!(admin.share_group_lag(&group, &otp).await?, 0);
    Ok(())
}

/// Two weighted lanes, 3 and 1, both with more records than 20 s of handling: over 20 s the
/// handled records split 3:1, within 10 %.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weighted_lanes_split_the_handlers_by_weight() -> anyhow::Result<()> {
    const WINDOW: Duration = Duration::from_secs(20);
    let (_admin, [heavy, light], group) = prepared([20_000, 8_000]).await?;
    let calls = Calls::default();
    let handler = calls.service(Duration::from_millis(100));
    let worker = Worker::builder(source(&[heavy.clone(), light.clone()], &group).await?)
        .add_route(Route::new(heavy.as_str(), handler.clone()).weight(3))
        .add_route(Route::new(light.as_str(), handler).weight(1))
        .concurrency(16)
        .build()?;
    let shutdown = worker.shutdown_handle();
    let running = tokio::spawn(worker.run());
    wait_for(
        "both lanes to be running",
        Duration::from_secs(30),
        async || Ok(calls.of(&heavy).len() >= 100 && calls.of(&light).len() >= 30),
    )
    .await?;
    let from = Instant::now();
    let to = from + WINDOW;
    // A measuring window, not a wait for a condition: the split is counted over it.
    tokio::time::sleep_until(to).await;
    shutdown.shutdown();
    let summary: Summary = running.await??;
    let within = |topic: &str| {
        calls
            .of(topic)
            .iter()
            .filter(|c| c.ended >= from && c.ended < to)
            .count()
    };
    let (heavy_handled, light_handled) = (within(&heavy), within(&light));
    assert!(
        heavy_handled < 20_000 - 100 && light_handled < 8_000 - 30,
        "a lane ran out of records within the window: {heavy_handled} / {light_handled}"
    );
    let split = heavy_handled as f64 / light_handled.max(1) as f64;
    assert!(
        (2.7..=3.3).contains(&split),
        "handled {heavy_handled} of the weight-3 lane and {light_handled} of the weight-1 lane \
         in {WINDOW:?}: {split:.2}:1; {summary:?}"
    );
    Ok(())
}
