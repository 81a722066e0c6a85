//! The local three-broker cluster `scripts/test.sh` starts next to the single broker
//! (`KAFKA_BROKERS=3 scripts/kafka.sh start`): its address, killing and restarting one of its
//! brokers, topics replicated on it, and who leads what.
//!
//! Tests that kill brokers hold [`exclusive`] for their whole run, so they never overlap.

use std::time::Duration;

use anyhow::{Context, bail, ensure};
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::FutureProducer;
use tokio::process::Command;
use tokio::sync::{Mutex, MutexGuard};

/// Brokers in the test cluster.
pub const BROKERS: i32 = 3;

/// The cluster's bootstrap list: `KAFKA_CLUSTER_BOOTSTRAP`, which `scripts/test.sh` sets.
pub fn bootstrap() -> String {
    std::env::var("KAFKA_CLUSTER_BOOTSTRAP").unwrap_or_else(|_| {
        panic!(
            "KAFKA_CLUSTER_BOOTSTRAP is not set: start the cluster with \
             `KAFKA_BROKERS=3 scripts/kafka.sh start` and export its KAFKA_BOOTSTRAP under that \
             name (scripts/test.sh does)"
        )
    })
}

/// The base port the cluster's script runs on (`KAFKA_CLUSTER_PORT`, default 9192).
fn port() -> String {
    std::env::var("KAFKA_CLUSTER_PORT").unwrap_or_else(|_| "9192".to_owned())
}

/// `scripts/kafka.sh ARGS` on the cluster.
fn kafka_sh(args: &[&str]) -> Command {
    let mut command = crate::kafka_sh(args);
    command
        .env("KAFKA_BROKERS", BROKERS.to_string())
        .env("KAFKA_PORT", port());
    Command::from(command)
}

/// Runs `scripts/kafka.sh ARGS` on the cluster, failing if it fails.
async fn script(args: &[&str]) -> anyhow::Result<()> {
    let status = kafka_sh(args)
        .status()
        .await
        .with_context(|| format!("running scripts/kafka.sh {args:?}"))?;
    ensure!(
        status.success(),
        "scripts/kafka.sh {args:?} failed: {status}"
    );
    Ok(())
}

/// SIGKILLs broker `node` (1..=3); its data stays for [`resume_broker`].
pub async fn kill_broker(node: i32) -> anyhow::Result<()> {
    script(&["kill-broker", &node.to_string()]).await
}

/// Starts broker `node` again on its data and waits until it answers.
pub async fn resume_broker(node: i32) -> anyhow::Result<()> {
    script(&["resume-broker", &node.to_string()]).await
}

/// Moves the replicas of `topic`'s partitions to `replicas` (partition, its new replica list)
/// with Kafka's `kafka-reassign-partitions` tool, and waits until the tool reports it done.
pub async fn reassign(topic: &str, replicas: &[(i32, Vec<i32>)]) -> anyhow::Result<()> {
    let partitions: Vec<String> = replicas
        .iter()
        .map(|(p, r)| {
            let r: Vec<String> = r.iter().map(i32::to_string).collect();
            format!(
                r#"{{"topic":"{topic}","partition":{p},"replicas":[{}]}}"#,
                r.join(",")
            )
        })
        .collect();
    let plan = format!(r#"{{"version":1,"partitions":[{}]}}"#, partitions.join(","));
    let file = std::env::temp_dir().join(format!("{}.json", crate::unique("reassign")));
    std::fs::write(&file, plan)?;
    let file_arg = file.to_string_lossy().into_owned();
    let bootstrap = bootstrap();
    let tool = [
        "tool",
        "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
        "--bootstrap-server",
        &bootstrap,
        "--reassignment-json-file",
        &file_arg,
    ];
    let result = async {
        script(&[&tool[..], &["--execute"]].concat()).await?;
        crate::wait_for("the reassignment", Duration::from_secs(60), async || {
            let output = tool_output(&[&tool[..], &["--verify"]].concat()).await?;
            Ok(!output.contains("still in progress"))
        })
        .await
    }
    .await;
    let _ = std::fs::remove_file(&file);
    result
}

/// What `scripts/kafka.sh ARGS` prints on the cluster (stdout and stderr), failing if it fails.
async fn tool_output(args: &[&str]) -> anyhow::Result<String> {
    let output = kafka_sh(args)
        .output()
        .await
        .with_context(|| format!("running scripts/kafka.sh {args:?}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    ensure!(
        output.status.success(),
        "scripts/kafka.sh {args:?} failed: {text}"
    );
    Ok(text)
}

static EXCLUSIVE: Mutex<()> = Mutex::const_new(());

/// The cluster for one test alone, every broker up (one a failed test left down is restarted).
pub async fn exclusive() -> anyhow::Result<MutexGuard<'static, ()>> {
    let guard = EXCLUSIVE.lock().await;
    script(&["resume"]).await?;
    Ok(guard)
}

/// An rdkafka configuration pointed at the cluster.
pub fn client_config() -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", bootstrap());
    config
}

/// An idempotent `acks=all` producer for the cluster.
pub fn producer() -> anyhow::Result<FutureProducer> {
    client_config()
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .set("message.timeout.ms", "60000")
        .create()
        .context("creating an rdkafka producer for the cluster")
}

/// Creates `topic` with the given replica lists, one per partition, the first replica of each
/// its preferred leader.
pub async fn create_topic(topic: &str, replicas: &[&[i32]]) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = client_config()
        .create()
        .context("creating an rdkafka admin client")?;
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let partitions = i32::try_from(replicas.len())?;
    let new_topic = NewTopic::new(topic, partitions, TopicReplication::Variable(replicas));
    for result in admin.create_topics(&[new_topic], &options).await? {
        if let Err((name, code)) = result {
            bail!("creating topic {name} on the cluster failed: {code}");
        }
    }
    Ok(())
}

/// Every partition of `topic` and its leader (-1 while it has none), as the cluster says now.
pub async fn leaders(topic: &str) -> anyhow::Result<Vec<(i32, i32)>> {
    let topic = topic.to_owned();
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = client_config()
            .create()
            .context("creating a metadata client")?;
        let metadata = consumer
            .fetch_metadata(Some(&topic), Duration::from_secs(10))
            .with_context(|| format!("metadata of {topic}"))?;
        let Some(t) = metadata.topics().first() else {
            bail!("no metadata for {topic}");
        };
        Ok(t.partitions()
            .iter()
            .map(|p| (p.id(), p.leader()))
            .collect())
    })
    .await?
}

/// The leader of `partition` of `topic`.
pub async fn leader(topic: &str, partition: i32) -> anyhow::Result<i32> {
    leaders(topic)
        .await?
        .into_iter()
        .find(|(p, _)| *p == partition)
        .map(|(_, leader)| leader)
        .with_context(|| format!("no partition {partition} in {topic}"))
}
