//! `share-worker check`: the file is valid, the routes' handlers start (their TLS files read), the
//! cluster speaks share groups with RENEW, the route topics exist, the broker's own dead-letter
//! queue (KIP-1191) fits `dlq.mode`; then the effective configuration. It joins no group.

use crate::config::{Config, DlqMode};
use anyhow::Context;
use worker_core::ErrorKind;
use worker_core::kafka::{Admin, DeliveryLimit};

use crate::{handlers, tls, topics};

pub(crate) async fn check(config: &Config) -> anyhow::Result<()> {
    println!("# configuration: valid");
    for route in &config.routes {
        handlers::handler(route)?;
    }
    if let Some(path) = &config.telemetry.otlp_ca_file {
        tls::ca_certificates("telemetry.otlp-ca-file", path)?;
    }
    println!("# route handlers (and their TLS files): ready");
    let bootstrap = &config.kafka.bootstrap;
    let security = config.security()?;
    let admin = Admin::connect_with(bootstrap.as_str(), &security)
        .await
        .with_context(|| format!("connecting to {bootstrap}"))?;
    match admin
        .require_share_groups()
        .await
        .map_err(worker_core::Error::from)
    {
        Ok(()) => println!("# share groups with RENEW (ShareFetch/ShareAcknowledge v2): supported"),
        Err(err) if err.kind() == ErrorKind::Unsupported => anyhow::bail!(
            "{bootstrap} does not support share groups with RENEW (ShareFetch/ShareAcknowledge v2: Kafka 4.2+ with share groups enabled): {err}"
        ),
        Err(err) => return Err(err).context("checking share-group support"),
    }
    let existing = topics::existing(bootstrap, &security).await?;
    let missing: Vec<&str> = config
        .topics()
        .filter(|t| !existing.contains_key(*t))
        .collect();
    anyhow::ensure!(
        missing.is_empty(),
        "route topics missing on {bootstrap}: {} (create them with `share-worker setup`)",
        missing.join(", ")
    );
    println!("# route topics: all exist");
    for dlq in config.dlq_topics() {
        if !existing.contains_key(&dlq) {
            println!(
                "# warning: dead-letter topic {dlq} does not exist (`share-worker setup` creates it)"
            );
        }
    }
    let missing_delays: Vec<String> = config
        .delay_topics()
        .into_iter()
        .filter(|topic| !existing.contains_key(topic))
        .collect();
    anyhow::ensure!(
        missing_delays.is_empty(),
        "delay topics missing on {bootstrap}: {} (create them with `share-worker setup`)",
        missing_delays.join(", ")
    );
    match admin.delivery_limit(&config.worker.group).await {
        Ok(DeliveryLimit {
            value: limit,
            source,
        }) => println!(
            "# delivery-count limit of group {}: {limit}, from {source} (handlers get at most {} attempts)",
            config.worker.group,
            config
                .retry
                .max_attempts
                .map_or(limit.saturating_sub(1), |max| u32::from(max)
                    .min(limit.saturating_sub(1)))
        ),
        Err(err) => println!("# warning: cannot read the delivery-count limit: {err}"),
    }
    broker_dlq(config, &admin).await?;
    println!("{}", config.to_toml());
    Ok(())
}

/// Reports the group's broker-side dead-letter queue (Kafka 4.4+, KIP-1191) against `dlq.mode`:
/// broker mode fails without one (as `run` would); the worker's sink with one is written twice.
async fn broker_dlq(config: &Config, admin: &Admin) -> anyhow::Result<()> {
    let group = &config.worker.group;
    let mode = config.dlq_mode();
    let dlq = match admin.broker_dlq(group).await {
        Ok(dlq) => dlq,
        Err(err) if mode == Some(DlqMode::Broker) => {
            return Err(err).with_context(|| {
                format!("dlq.mode = \"broker\": reading the broker's dead-letter queue of share group {group}")
            });
        }
        Err(err) => {
            println!(
                "# warning: cannot read the broker's dead-letter queue (KIP-1191) of share group {group}: {err}"
            );
            return Ok(());
        }
    };
    println!("# broker dead-letter queue (KIP-1191): {dlq}");
    match (mode, dlq.gap(), &dlq.topic) {
        (Some(DlqMode::Broker), Some(gap), _) => anyhow::bail!(
            "dlq.mode = \"broker\" needs the broker's dead-letter queue (Kafka 4.4+, KIP-1191), but {gap}"
        ),
        (Some(DlqMode::Worker), None, Some(topic)) => println!(
            "# warning: the worker's dead-letter sink (dlq.mode = \"worker\": {}) and the broker's ({topic}) are both on: every dead letter is written twice, by the worker and then by the broker for the REJECT that follows; set dlq.mode = \"broker\", or unset the group's errors.deadletterqueue.topic.name",
            config.dlq_topics().join(", ")
        ),
        (None, None, Some(topic)) => println!(
            "# note: no [dlq] table, but the broker writes the records this worker REJECTs to {topic}; dlq.mode = \"broker\" logs the reason of each"
        ),
        _ => {}
    }
    Ok(())
}
