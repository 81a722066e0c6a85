//! `share-worker check`: the file is valid, the cluster speaks share groups with RENEW, the route
//! topics exist; then the effective configuration.

use anyhow::Context;
use worker_core::ErrorKind;
use worker_core::config::Config;
use worker_core::source::ShareSource;

use crate::topics;

pub(crate) async fn check(config: &Config) -> anyhow::Result<()> {
    println!("# configuration: valid");
    let bootstrap = &config.kafka.bootstrap;
    let existing = topics::existing(bootstrap).await?;
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
    let source = match config.source_builder().build().await {
        Ok(source) => source,
        Err(err) if err.kind() == ErrorKind::Unsupported => {
            anyhow::bail!(
                "{bootstrap} does not support share groups with RENEW (ShareFetch/ShareAcknowledge v2, Kafka 4.2+ with share groups enabled): {err}"
            )
        }
        Err(err) => {
            return Err(err).with_context(|| {
                format!("joining share group {} at {bootstrap}", config.worker.group)
            });
        }
    };
    source.close().await.context("leaving the group")?;
    println!("# share groups with RENEW: supported");
    println!("{}", config.to_toml());
    Ok(())
}
