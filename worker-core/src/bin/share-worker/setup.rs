//! `share-worker setup`: the route, dead-letter and delay topics, and the group's configs.

use anyhow::Context;
use worker_core::config::Config;
use worker_core::kafka::Admin;

use crate::topics;

pub(crate) async fn setup(
    config: &Config,
    partitions: i32,
    replication: i16,
) -> anyhow::Result<()> {
    anyhow::ensure!(partitions >= 1, "--partitions: expected at least 1");
    anyhow::ensure!(
        replication >= 1,
        "--replication-factor: expected at least 1"
    );
    let bootstrap = &config.kafka.bootstrap;
    let security = config.security()?;
    let admin = Admin::connect_with(bootstrap.as_str(), &security)
        .await
        .with_context(|| format!("connecting to {bootstrap}"))?;
    let existing = topics::existing(bootstrap, &security).await?;
    let wanted: Vec<String> = config
        .topics()
        .map(str::to_owned)
        .chain(config.dlq_topics())
        .chain(config.delay_topics())
        .collect();
    for topic in &wanted {
        if let Some(n) = existing.get(topic) {
            println!("topic {topic}: exists ({n} partitions)");
            continue;
        }
        admin
            .create_topic(topic, partitions, replication)
            .await
            .with_context(|| format!("creating topic {topic}"))?;
        println!("topic {topic}: created ({partitions} partitions, replication {replication})");
    }
    let group = &config.worker.group;
    let reset = config.worker.auto_offset_reset.as_str();
    admin
        .set_group_config(group, "share.auto.offset.reset", reset)
        .await
        .with_context(|| format!("setting share.auto.offset.reset on group {group}"))?;
    println!("group {group}: share.auto.offset.reset = {reset}");
    if let Some(lock) = config.worker.lock_duration {
        let ms = lock.as_millis().to_string();
        admin
            .set_group_config(group, "share.record.lock.duration.ms", &ms)
            .await
            .with_context(|| format!("setting share.record.lock.duration.ms on group {group}"))?;
        println!("group {group}: share.record.lock.duration.ms = {ms}");
    }
    Ok(())
}
