//! `share-worker check`: the file is valid, the routes' handlers start (their TLS files read), the
//! cluster speaks share groups with RENEW, the route topics exist; then the effective
//! configuration. It joins no group.

use anyhow::Context;
use worker_core::ErrorKind;
use worker_core::config::Config;
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
    match admin.require_share_groups().await {
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
    println!("{}", config.to_toml());
    Ok(())
}
