//! A broker older than Kafka 4.2 (share groups without the v2 RPCs and RENEW) is refused at start
//! with an error that names the broker and the version needed, by the source and by the admin
//! client alike.
//!
//! It needs a Kafka 4.1 broker (`KAFKA_OLD_BROKER_BOOTSTRAP`), which `scripts/test.sh` starts next
//! to the others; without it the test fails saying so.

use std::time::Duration;

use anyhow::{Context, ensure};
use worker_core::kafka::{Admin, KafkaSource};
use worker_kafka::ErrorKind;

fn old_broker() -> String {
    std::env::var("KAFKA_OLD_BROKER_BOOTSTRAP").unwrap_or_else(|_| {
        panic!(
            "KAFKA_OLD_BROKER_BOOTSTRAP is not set: start a Kafka 4.1 broker with \
             `KAFKA_VERSION=4.1.2 KAFKA_PORT=9692 scripts/kafka.sh start` (scripts/test.sh does)"
        )
    })
}

#[tokio::test]
async fn a_broker_older_than_4_2_is_refused_at_start() -> anyhow::Result<()> {
    let bootstrap = old_broker();
    let started = tokio::time::Instant::now();
    let err = KafkaSource::builder(bootstrap.as_str(), "old-broker-group")
        .topic("anything")
        .build()
        .await
        .err()
        .context("a source connected to a Kafka 4.1 broker")?;
    ensure!(err.kind() == ErrorKind::Unsupported, "{err:?}");
    let text = err.to_string();
    ensure!(
        text.contains(&bootstrap) && text.contains("Kafka 4.2+"),
        "the error names neither the broker nor the version needed: {text}"
    );
    ensure!(
        started.elapsed() < Duration::from_secs(15),
        "refusing took {:?}",
        started.elapsed()
    );

    let admin = Admin::connect(bootstrap.as_str()).await?;
    let err = admin
        .require_share_groups()
        .await
        .err()
        .context("the admin client's check passed on Kafka 4.1")?;
    ensure!(err.kind() == ErrorKind::Unsupported, "{err:?}");
    Ok(())
}
