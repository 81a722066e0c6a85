//! Proves the test harness: the broker from `scripts/kafka.sh` answers, takes records and offers
//! the share-group RPCs this project needs.

use std::collections::BTreeSet;
use std::time::Duration;

use rdkafka::Message;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use tests::{client_config, create_topic, produce, producer, unique};

#[tokio::test]
async fn records_produced_with_rdkafka_can_be_read_back() -> anyhow::Result<()> {
    let topic = unique("harness");
    create_topic(&topic, 1).await?;
    let values: Vec<String> = (0..100).map(|i| format!("record-{i}")).collect();
    produce(&producer(&[])?, &topic, None, &values).await?;

    let consumer: BaseConsumer = client_config()
        .set("group.id", unique("harness-reader"))
        .set("enable.auto.commit", "false")
        .create()?;
    let mut assignment = TopicPartitionList::new();
    assignment.add_partition_offset(&topic, 0, Offset::Beginning)?;
    consumer.assign(&assignment)?;

    let expected: BTreeSet<String> = values.into_iter().collect();
    let mut seen = BTreeSet::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while seen.len() < expected.len() {
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "read {} of {} records within 30 s",
            seen.len(),
            expected.len()
        );
        if let Some(message) = consumer.poll(Duration::from_millis(200)) {
            let message = message?;
            let payload = message.payload().unwrap_or_default();
            seen.insert(String::from_utf8(payload.to_vec())?);
        }
    }
    assert_eq!(seen, expected);
    Ok(())
}

#[tokio::test]
async fn the_broker_offers_the_v2_share_rpcs() -> anyhow::Result<()> {
    const SHARE_FETCH: i16 = 78;
    const SHARE_ACKNOWLEDGE: i16 = 79;
    let admin = worker_core::kafka::Admin::connect(tests::bootstrap()).await?;
    for (name, key) in [
        ("ShareFetch", SHARE_FETCH),
        ("ShareAcknowledge", SHARE_ACKNOWLEDGE),
    ] {
        let (min, max) = admin
            .offered_versions(key)
            .await?
            .ok_or_else(|| anyhow::anyhow!("the broker does not offer {name} ({key})"))?;
        assert!(
            min <= 2 && max >= 2,
            "{name} v{min}-{max} does not include v2"
        );
    }
    admin.require_share_groups().await?;
    Ok(())
}
