//! `share-worker dlq replay`: dead letters back to their original topics.
//!
//! The DLQ topic is read through its own share group (`{group}.replay`, starting at the earliest
//! record). Each dead letter that matches `--reason` is republished to the topic named by its
//! `share.dlq.topic` header, without the provenance headers and with `share.replay.count` raised
//! by one, and only then ACCEPTed. Records that do not match (or all records with `--dry-run`)
//! stay acquired until the end and are then released, which raises their delivery count once.

use std::collections::HashSet;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use rdkafka::ClientConfig;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use tokio::time::Instant;
use worker_core::config::Config;
use worker_core::dlq::headers;
use worker_core::kafka::{Admin, KafkaSource};
use worker_core::source::{AckKind, Delivery, ShareSource};

use crate::progress::Progress;

/// The header counting how often a record was replayed.
const REPLAY_COUNT: &str = "share.replay.count";

/// `dlq replay` options.
#[derive(Debug, Args)]
pub(crate) struct ReplayArgs {
    /// The TOML configuration file (for the brokers and the group).
    #[arg(long, short)]
    config: std::path::PathBuf,
    /// The dead-letter topic to replay.
    #[arg(long)]
    topic: String,
    /// Replay only dead letters with this reason (e.g. `handler_error`, `rejected`).
    #[arg(long)]
    reason: Option<String>,
    /// Replay at most this many.
    #[arg(long)]
    limit: Option<u64>,
    /// Print what would be replayed; replay nothing.
    #[arg(long)]
    dry_run: bool,
    /// Stop once no new dead letter arrived for this long.
    #[arg(long, default_value = "5s", value_parser = crate::parse_duration)]
    idle: Duration,
}

impl ReplayArgs {
    pub(crate) fn config(&self) -> &std::path::Path {
        &self.config
    }
}

pub(crate) async fn replay(config: &Config, args: &ReplayArgs) -> anyhow::Result<()> {
    let bootstrap = &config.kafka.bootstrap;
    let group = format!("{}.replay", config.worker.group);
    let admin = Admin::connect(bootstrap.as_str()).await?;
    admin
        .set_group_config(&group, "share.auto.offset.reset", "earliest")
        .await
        .with_context(|| format!("setting share.auto.offset.reset on {group}"))?;
    let source = KafkaSource::builder(bootstrap.clone(), group.clone())
        .topic(args.topic.clone())
        .client_id(format!("{}-replay", config.kafka.client_id))
        .build()
        .await
        .with_context(|| format!("reading {} through share group {group}", args.topic))?;
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .create()
        .context("creating the producer")?;
    let mut seen = HashSet::new();
    let (mut replayed, mut skipped, mut failed) = (0u64, 0u64, 0u64);
    let mut last_new = Instant::now();
    let limit = args.limit.unwrap_or(u64::MAX);
    let mut progress = Progress::new("dead letters replayed", args.limit);
    while replayed < limit && last_new.elapsed() < args.idle {
        let batch = source.fetch(100).await.context("fetching dead letters")?;
        for delivery in batch {
            let id = (delivery.id.partition, delivery.id.offset);
            if !seen.insert(id) {
                continue; // came back after its lock ran out: already counted
            }
            last_new = Instant::now();
            let reason = header(&delivery, headers::REASON);
            let origin = header(&delivery, headers::TOPIC);
            let matches = args
                .reason
                .as_deref()
                .is_none_or(|r| reason.as_deref() == Some(r));
            let Some(origin) = origin.filter(|_| matches && replayed < limit) else {
                skipped += 1;
                continue;
            };
            if args.dry_run {
                println!(
                    "would replay {}/{}@{} to {origin} (reason {})",
                    args.topic,
                    delivery.id.partition,
                    delivery.id.offset,
                    reason.as_deref().unwrap_or("?")
                );
                replayed += 1;
                continue;
            }
            match republish(&producer, &delivery, &origin).await {
                Ok(()) => {
                    replayed += 1;
                    progress.update(replayed);
                    if let Err(err) = source.acknowledge(&delivery.id, AckKind::Accept).await {
                        tracing::warn!(error = %err, "replayed, but the ACCEPT failed: it may be replayed again");
                    }
                }
                Err(err) => {
                    failed += 1;
                    progress.update(replayed);
                    tracing::error!(error = %format!("{err:#}"), "cannot replay {}", delivery.id);
                }
            }
        }
    }
    progress.finish();
    source.close().await.context("leaving the replay group")?;
    let verb = if args.dry_run {
        "would replay"
    } else {
        "replayed"
    };
    println!(
        "{verb} {replayed}, skipped {skipped}, failed {failed} from {}",
        args.topic
    );
    anyhow::ensure!(failed == 0, "{failed} dead letters could not be replayed");
    Ok(())
}

fn header(delivery: &Delivery, key: &str) -> Option<String> {
    delivery
        .headers
        .iter()
        .find(|h| &*h.key == key)
        .and_then(|h| h.value.as_ref())
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

async fn republish(
    producer: &FutureProducer,
    delivery: &Delivery,
    topic: &str,
) -> anyhow::Result<()> {
    let count = header(delivery, REPLAY_COUNT)
        .and_then(|c| c.parse::<u64>().ok())
        .unwrap_or(0)
        + 1;
    let count = count.to_string();
    let mut out = OwnedHeaders::new();
    for h in delivery
        .headers
        .iter()
        .filter(|h| !headers::is_provenance(&h.key) && &*h.key != REPLAY_COUNT)
    {
        out = out.insert(Header {
            key: &h.key,
            value: h.value.as_deref(),
        });
    }
    out = out.insert(Header {
        key: REPLAY_COUNT,
        value: Some(count.as_bytes()),
    });
    let mut record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(topic).headers(out);
    if let Some(key) = &delivery.key {
        record = record.key(key);
    }
    if let Some(value) = &delivery.value {
        record = record.payload(value);
    }
    producer
        .send(record, Duration::from_secs(30))
        .await
        .map_err(|(err, _)| anyhow::anyhow!("producing to {topic}: {err}"))?;
    Ok(())
}
