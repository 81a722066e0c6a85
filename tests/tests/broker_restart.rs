//! A broker that dies under a running worker (SIGKILL at about 30 % and 60 % of the work) and comes
//! back on the same data: the worker reconnects by itself and nothing is lost.
//!
//! This test runs its own broker on another port (`scripts/kafka.sh` with `KAFKA_PORT`), so killing
//! it disturbs no other test.

use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, ensure};
use rdkafka::ClientConfig;
use tests::{produce, unique, wait_for};
use tokio::process::Command;
use tokio::time::Instant;
use tower::service_fn;
use worker_core::kafka::{Admin, KafkaSource};
use worker_core::{Job, Outcome, Worker};

/// A broker of this test's own, stopped when dropped.
struct PrivateBroker {
    port: u16,
}

impl PrivateBroker {
    /// `scripts/kafka.sh ACTION` on this broker.
    fn kafka_sh(&self, action: &str) -> std::process::Command {
        let mut command = tests::kafka_sh(&[action]);
        command.env("KAFKA_PORT", self.port.to_string());
        command
    }

    async fn harness(&self, action: &str) -> anyhow::Result<()> {
        let status = Command::from(self.kafka_sh(action))
            .status()
            .await
            .with_context(|| format!("running scripts/kafka.sh {action}"))?;
        ensure!(
            status.success(),
            "scripts/kafka.sh {action} failed: {status}"
        );
        Ok(())
    }

    async fn start(port: u16) -> anyhow::Result<Self> {
        let broker = Self { port };
        broker.harness("start").await?;
        Ok(broker)
    }

    fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for PrivateBroker {
    fn drop(&mut self) {
        let _ = self.kafka_sh("stop").status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_survives_broker_kills_without_losing_a_record() -> anyhow::Result<()> {
    const RECORDS: usize = 3_000;
    let port = std::env::var("KAFKA_RESTART_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(9492);
    let broker = PrivateBroker::start(port).await?;
    let bootstrap = broker.bootstrap();

    let admin = Admin::connect(&bootstrap).await?;
    let topic = unique("restart");
    let group = unique("restart-workers");
    admin.create_topic(&topic, 2, 1).await?;
    admin
        .set_group_config(&group, "share.auto.offset.reset", "earliest")
        .await?;
    admin
        .set_group_config(&group, "share.record.lock.duration.ms", "5000")
        .await?;
    let producer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .create()?;
    produce(
        &producer,
        &topic,
        None,
        (0..RECORDS).map(|i| format!("job-{i}")),
    )
    .await?;

    let ledger: Arc<Mutex<HashSet<(i32, i64)>>> = Arc::default();
    let handled = ledger.clone();
    let source = KafkaSource::builder(&bootstrap, &group)
        .topic(&topic)
        .build()
        .await?;
    let worker = Worker::builder(source)
        .route(
            topic.as_str(),
            service_fn(move |job: Job| {
                let handled = handled.clone();
                async move {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    handled
                        .lock()
                        .expect("ledger")
                        .insert((job.id().partition, job.id().offset));
                    Ok::<_, Infallible>(Outcome::Accept)
                }
            }),
        )
        .concurrency(20)
        .build()?;
    let shutdown = worker.shutdown_handle();
    let running = tokio::spawn(worker.run());
    let done = || ledger.lock().expect("ledger").len();

    for share in [30, 60] {
        wait_for(
            &format!("{share} % of the records"),
            Duration::from_secs(120),
            async || Ok(done() * 100 >= RECORDS * share),
        )
        .await?;
        broker.harness("kill").await?;
        let before = done();
        broker.harness("resume").await?;
        let back = Instant::now();
        wait_for(
            "the worker to make progress after the restart",
            Duration::from_secs(30),
            async || Ok(done() > before),
        )
        .await?;
        eprintln!(
            "progress again {:?} after the broker answered",
            back.elapsed()
        );
    }

    wait_for("every record", Duration::from_secs(180), async || {
        Ok(done() == RECORDS)
    })
    .await?;
    let admin = Admin::connect(&bootstrap).await?;
    wait_for(
        "the group's lag to reach 0",
        Duration::from_secs(60),
        async || Ok(admin.share_group_lag(&group, &topic).await? == 0),
    )
    .await?;
    shutdown.shutdown();
    let summary = running.await?.context("the worker")?;
    eprintln!("{summary:?}");
    assert!(summary.accepted >= RECORDS as u64, "{summary:?}");
    Ok(())
}
