//! Integration tests of the native share-group client against a real broker
//! (`scripts/kafka.sh start`; `KAFKA_BOOTSTRAP`, default 127.0.0.1:9092).
//!
//! Every test uses its own topic and group, so they can run in parallel. A missing broker fails the
//! tests; nothing is skipped.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use rdkafka::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use tokio::time::Instant;
use worker_core::kafka::{Admin, KafkaSource};
use worker_core::source::{AckError, AckKind, Delivery, ShareSource};

fn bootstrap() -> String {
    std::env::var("KAFKA_BOOTSTRAP").unwrap_or_else(|_| "127.0.0.1:9092".to_string())
}

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

/// A fresh topic and a share group reading it from the earliest offset.
async fn setup(partitions: i32, lock_ms: Option<u32>) -> Result<(Admin, String, String)> {
    let admin = Admin::connect(bootstrap())
        .await
        .context("broker not reachable")?;
    let topic = unique("t");
    let group = unique("g");
    admin.create_topic(&topic, partitions, 1).await?;
    admin
        .set_group_config(&group, "share.auto.offset.reset", "earliest")
        .await?;
    if let Some(ms) = lock_ms {
        admin
            .set_group_config(&group, "share.record.lock.duration.ms", &ms.to_string())
            .await?;
    }
    Ok((admin, topic, group))
}

fn producer(extra: &[(&str, &str)]) -> Result<FutureProducer> {
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", bootstrap())
        .set("linger.ms", "5");
    for (k, v) in extra {
        cfg.set(*k, *v);
    }
    Ok(cfg.create()?)
}

async fn produce_with(p: &FutureProducer, topic: &str, range: std::ops::Range<u32>) -> Result<()> {
    let sends = range.map(|i| {
        let payload = format!("v-{i}");
        let key = format!("k-{i}");
        async move {
            p.send(
                FutureRecord::to(topic)
                    .payload(&payload)
                    .key(&key)
                    .partition(0),
                Duration::from_secs(10),
            )
            .await
            .map_err(|(e, _)| e)
        }
    });
    for r in futures::future::join_all(sends).await {
        r?;
    }
    Ok(())
}

async fn produce(topic: &str, n: u32) -> Result<()> {
    let p = producer(&[])?;
    produce_with(&p, topic, 0..n).await?;
    p.flush(Duration::from_secs(10))?;
    Ok(())
}

async fn source(group: &str, topic: &str) -> Result<KafkaSource> {
    Ok(KafkaSource::builder(bootstrap(), group)
        .topic(topic)
        .max_wait(Duration::from_millis(200))
        .build()
        .await?)
}

/// Fetches until `want` records arrived or the deadline passes; checks the record_limit bound.
async fn fetch_n(
    src: &KafkaSource,
    want: usize,
    max: u32,
    within: Duration,
) -> Result<Vec<Delivery>> {
    let deadline = Instant::now() + within;
    let mut out = Vec::new();
    while out.len() < want {
        ensure!(
            Instant::now() < deadline,
            "got {} of {want} records before the deadline",
            out.len()
        );
        let ask = max.min((want - out.len()) as u32);
        let got = src.fetch(ask).await?;
        ensure!(
            got.len() <= ask as usize,
            "asked for {ask}, got {}",
            got.len()
        );
        out.extend(got);
    }
    Ok(out)
}

async fn wait_lag_zero(admin: &Admin, group: &str, topic: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let lag = admin.share_group_lag(group, topic).await?;
        if lag == 0 {
            return Ok(());
        }
        ensure!(Instant::now() < deadline, "lag still {lag} after 30s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn ack_all(src: &KafkaSource, records: &[Delivery], kind: AckKind) -> Result<()> {
    let receipts: Vec<_> = records
        .iter()
        .map(|d| src.acknowledge(&d.id, kind))
        .collect();
    for (d, r) in records
        .iter()
        .zip(futures::future::join_all(receipts).await)
    {
        r.with_context(|| format!("ack of {}", d.id))?;
    }
    Ok(())
}

/// Done-when 1: join, fetch 1,000 in record_limit mode, never more than asked, each once, all
/// accepted, lag 0.
#[tokio::test]
async fn fetches_a_thousand_records_within_the_limit_and_reaches_lag_zero() -> Result<()> {
    let (admin, topic, group) = setup(1, None).await?;
    produce(&topic, 1000).await?;
    let src = source(&group, &topic).await?;
    let records = fetch_n(&src, 1000, 37, Duration::from_secs(60)).await?;
    let before = admin.share_group_lag(&group, &topic).await?;
    ensure!(before > 0, "lag before acknowledging is {before}");
    let offsets: HashSet<i64> = records.iter().map(|d| d.id.offset).collect();
    ensure!(
        offsets.len() == 1000,
        "duplicates: {} unique of {}",
        offsets.len(),
        records.len()
    );
    ensure!(records.iter().all(|d| d.delivery_count == 1));
    let d = &records[0];
    ensure!(d.value.as_deref() == Some(format!("v-{}", d.id.offset).as_bytes()));
    ensure!(d.key.as_deref() == Some(format!("k-{}", d.id.offset).as_bytes()));
    ensure!(d.lock_duration > Duration::ZERO);
    ack_all(&src, &records, AckKind::Accept).await?;
    wait_lag_zero(&admin, &group, &topic).await?;
    ensure!(src.fetch(10).await?.is_empty());
    src.close().await?;
    Ok(())
}
