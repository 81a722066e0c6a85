//! `share-worker setup`: the route, dead-letter and delay topics, and the group's configs; in
//! broker dead-letter mode, the dead-letter topic the group names.
//!
//! A dead-letter topic is created with `message.timestamp.type = LogAppendTime`: its records carry
//! the broker's time, so the dashboard's and replay's time filters never see what the writer of
//! a letter claimed. An existing one is left as it is (its configs are the operator's; librdkafka
//! can only replace a topic's whole config set), and `setup` says when it keeps the producer's
//! time, with the command that changes it.

use crate::config::{Config, DlqMode};
use anyhow::Context;
use worker_core::kafka::Admin;
use worker_core::security::Security;

use crate::topics;

/// The topic config that has a topic's records carry the broker's time.
const TIMESTAMP_TYPE: &str = "message.timestamp.type";
/// Its value for the broker's time.
const LOG_APPEND_TIME: &str = "LogAppendTime";

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
    let dlq_topics = config.dlq_topics();
    let wanted: Vec<String> = config
        .topics()
        .map(str::to_owned)
        .chain(dlq_topics.iter().cloned())
        .chain(config.delay_topics())
        .collect();
    for topic in &wanted {
        let is_dlq = dlq_topics.contains(topic);
        if let Some(n) = existing.get(topic) {
            println!("topic {topic}: exists ({n} partitions)");
            if is_dlq {
                say_if_producer_time(bootstrap, &security, topic).await;
            }
            continue;
        }
        let broker_time = [(TIMESTAMP_TYPE, LOG_APPEND_TIME)];
        let configs: &[(&str, &str)] = if is_dlq { &broker_time } else { &[] };
        admin
            .create_topic_with_configs(topic, partitions, replication, configs)
            .await
            .with_context(|| format!("creating topic {topic}"))?;
        let more = if is_dlq {
            format!(", {TIMESTAMP_TYPE}={LOG_APPEND_TIME}")
        } else {
            String::new()
        };
        println!(
            "topic {topic}: created ({partitions} partitions, replication {replication}{more})"
        );
    }
    if config.control.is_some() {
        // Every worker reads every command, in order; the last command of each key is the state.
        let topic = config.control_topic_name();
        one_compacted_partition(&admin, &existing, &topic, replication, "control topic", &[])
            .await?;
    }
    let group = &config.worker.group;
    if !config.crons.is_empty() {
        // Its one assignee fires; the last firing of each schedule is all the next firer needs.
        let topic = worker_core::cron::CronScheduler::topic_of(group);
        // Its records carry the broker's time, against which a mark from the future is told.
        let broker_time = [("message.timestamp.type", "LogAppendTime")];
        one_compacted_partition(
            &admin,
            &existing,
            &topic,
            replication,
            "cron topic",
            &broker_time,
        )
        .await?;
        // A firing aborted halfway leaves its job record in the log: the workers read committed.
        admin
            .set_group_config(group, "share.isolation.level", "read_committed")
            .await
            .with_context(|| format!("setting share.isolation.level on group {group}"))?;
        println!("group {group}: share.isolation.level = read_committed");
    }
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
    if config.dlq_mode() == Some(DlqMode::Broker) {
        let read: Vec<String> = config
            .topics()
            .map(str::to_owned)
            .chain(config.delay_topics())
            .collect();
        broker_dlq_topic(&admin, group, &read, partitions, replication).await?;
    }
    Ok(())
}

/// Says when the existing dead-letter topic `topic` keeps its producers' times: the dashboard's
/// and replay's time filters then trust whoever writes a letter. A config that cannot be read is
/// said too; neither stops `setup`.
async fn say_if_producer_time(bootstrap: &str, security: &Security, topic: &str) {
    match topics::config(bootstrap, security, topic, TIMESTAMP_TYPE).await {
        Ok(Some(value)) if value == LOG_APPEND_TIME => {}
        Ok(value) => println!(
            "# warning: topic {topic}: {TIMESTAMP_TYPE} is {}, not {LOG_APPEND_TIME}: a letter's time is what its writer claims, and the dashboard's and replay's time filters trust it; setup leaves an existing topic's configs alone: kafka-configs.sh --alter --entity-type topics --entity-name {topic} --add-config {TIMESTAMP_TYPE}={LOG_APPEND_TIME}",
            value.as_deref().unwrap_or("not given")
        ),
        Err(err) => println!(
            "# warning: topic {topic}: cannot tell whether its letters carry the broker's time ({TIMESTAMP_TYPE}): {err:#}"
        ),
    }
}

/// Creates `topic` (`what` it is, for the output) with one partition, compacted, unless it
/// exists. Its segments roll hourly: compaction never touches the segment being written, and at
/// the default week a cron topic would keep a mark per tick (60,000 a week for a 10 s schedule)
/// for every start and status page to read.
async fn one_compacted_partition(
    admin: &Admin,
    existing: &std::collections::HashMap<String, usize>,
    topic: &str,
    replication: i16,
    what: &str,
    more: &[(&str, &str)],
) -> anyhow::Result<()> {
    if let Some(n) = existing.get(topic) {
        println!("topic {topic}: exists ({n} partitions)");
        return Ok(());
    }
    let mut configs = vec![("cleanup.policy", "compact"), ("segment.ms", "3600000")];
    configs.extend_from_slice(more);
    admin
        .create_topic_with_configs(topic, 1, replication, &configs)
        .await
        .with_context(|| format!("creating {what} {topic}"))?;
    println!(
        "topic {topic}: created ({what}: 1 partition, compacted, hourly segments, replication {replication})"
    );
    Ok(())
}

/// In broker mode the broker writes the dead letters to the topic the group's
/// `errors.deadletterqueue.topic.name` names: created here when missing, with the topic config the
/// broker needs. Whatever else keeps the broker from writing is said, not fixed: `run` refuses to
/// start until it is (the group config is the operator's choice of topic). A topic the worker
/// reads (`read`: the routes' and delay topics) is refused: every REJECT would come back as work.
async fn broker_dlq_topic(
    admin: &Admin,
    group: &str,
    read: &[String],
    partitions: i32,
    replication: i16,
) -> anyhow::Result<()> {
    let dlq = match admin.broker_dlq(group).await {
        Ok(dlq) => dlq,
        Err(err) => {
            println!(
                "# warning: cannot read the broker's dead-letter queue (KIP-1191) of share group {group}: {err}"
            );
            return Ok(());
        }
    };
    if let Some(topic) = dlq.topic.as_ref().filter(|t| read.contains(t)) {
        anyhow::bail!(
            "share group {group}: the broker's dead-letter topic (errors.deadletterqueue.topic.name) is {topic}, which the worker reads (a route's or a delay topic): every REJECTed record would come back as new work; name a topic of its own"
        );
    }
    let created = admin
        .create_broker_dlq_topic(&dlq, partitions, replication)
        .await
        .with_context(|| {
            format!("creating the broker's dead-letter topic of share group {group}")
        })?;
    let dlq = match created {
        Some(topic) => {
            println!(
                "topic {topic}: created ({partitions} partitions, replication {replication}, errors.deadletterqueue.group.enable=true): the broker's dead-letter topic of group {group}"
            );
            admin.broker_dlq(group).await.with_context(|| {
                format!("reading the broker's dead-letter queue of share group {group} again")
            })?
        }
        None => dlq,
    };
    match dlq.gap() {
        None => println!("# broker dead-letter queue (KIP-1191): {dlq}"),
        Some(gap) => println!("# warning: dlq.mode = \"broker\" cannot run yet: {gap}"),
    }
    Ok(())
}
