//! Integration tests of the admin calls against a real broker (`scripts/kafka.sh start`;
//! `KAFKA_BOOTSTRAP`, default 127.0.0.1:9092): every response goes through the hand-written
//! decoders, and the delivery-count limit is read, never guessed.
//!
//! Every test uses its own topic and group names.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use tests::{bootstrap, produce, producer, unique, wait_for};
use worker_core::kafka::{Admin, DeliveryLimit, DeliveryLimitSource, KafkaSource};
use worker_core::source::AckKind;
use worker_kafka::ErrorKind;

/// The local broker's `group.share.delivery.count.limit` (its default).
const BROKER_LIMIT: u32 = 5;

/// A group-level override is used where the broker has `share.delivery.count.limit` (Kafka 4.3+);
/// a 4.2 broker refuses that group config (INVALID_CONFIG), and its own limit is used instead. The
/// limit is the same for a group that exists only as configs and for one with no trace at all.
#[tokio::test]
async fn the_delivery_limit_is_the_groups_where_supported_else_the_brokers() -> Result<()> {
    let admin = Admin::connect(bootstrap())
        .await
        .context("broker not reachable")?;

    // A group the broker has never heard of.
    let unknown = unique("g-never-seen");
    let limit = admin.delivery_limit(&unknown).await?;
    ensure!(limit.value == BROKER_LIMIT, "limit {limit:?}");
    ensure!(admin.delivery_count_limit(&unknown).await? == BROKER_LIMIT);

    // A group with an override attempt.
    let group = unique("g-limit");
    admin
        .set_group_config(&group, "share.auto.offset.reset", "earliest")
        .await?;
    match admin
        .set_group_config(&group, "share.delivery.count.limit", "3")
        .await
    {
        Ok(()) => {
            // Kafka 4.3+: the group's own limit wins, once the broker has the new config (the
            // controller commits it; the broker answering DescribeConfigs learns it a moment
            // later).
            let own = DeliveryLimit {
                value: 3,
                source: DeliveryLimitSource::Group,
            };
            let mut seen = None;
            let waited = wait_for(
                "the group's limit of 3",
                Duration::from_secs(15),
                async || {
                    let limit = admin.delivery_limit(&group).await?;
                    seen = Some(limit);
                    Ok(limit == own)
                },
            )
            .await;
            waited.with_context(|| format!("last seen: {seen:?}"))?;
            ensure!(admin.delivery_count_limit(&group).await? == 3);
        }
        Err(err) => {
            // Kafka 4.2: no such group config; the broker-wide limit applies.
            ensure!(
                err.kind() == ErrorKind::Broker && err.message().contains("40 (INVALID_CONFIG)"),
                "unexpected error setting the group limit: {err}"
            );
            let limit = admin.delivery_limit(&group).await?;
            ensure!(
                matches!(
                    limit,
                    DeliveryLimit {
                        value: BROKER_LIMIT,
                        source: DeliveryLimitSource::Broker { .. }
                    }
                ),
                "limit {limit:?}"
            );
            ensure!(admin.delivery_count_limit(&group).await? == BROKER_LIMIT);
        }
    }
    Ok(())
}

/// Create a topic (twice: the second finds it), describe a group before and while a member is in,
/// read its offsets and lag: every answer decodes and says what the broker knows.
#[tokio::test]
async fn topics_groups_and_offsets_decode_from_the_real_broker() -> Result<()> {
    let admin = Admin::connect(bootstrap())
        .await
        .context("broker not reachable")?;
    let topic = unique("t-admin");
    let group = unique("g-admin");
    admin.create_topic(&topic, 2, 1).await?;
    admin.create_topic(&topic, 2, 1).await?;
    admin
        .set_group_config(&group, "share.auto.offset.reset", "earliest")
        .await?;

    let before = admin.describe_share_group(&group).await?;
    ensure!(
        before.state == "Dead" && before.members.is_empty(),
        "{before:?}"
    );
    ensure!(admin.share_group_members(&group).await?.is_empty());

    let sent = produce(&producer(&[])?, &topic, Some(0), ["a", "b", "c"]).await?;
    let source = KafkaSource::builder(bootstrap(), &group)
        .topic(&topic)
        .max_wait(Duration::from_millis(200))
        .build()
        .await?;
    let mut got = Vec::new();
    wait_for("all records", Duration::from_secs(30), async || {
        got.extend(source.fetch(10).await?);
        Ok(got.len() >= sent)
    })
    .await?;

    let during = admin.describe_share_group(&group).await?;
    ensure!(during.epoch > 0, "{during:?}");
    ensure!(during.members.len() == 1, "{during:?}");
    let member = &during.members[0];
    ensure!(
        member.assignment == vec![(topic.clone(), 0), (topic.clone(), 1)],
        "{member:?}"
    );
    ensure!(admin.share_group_members(&group).await? == vec![member.member_id.clone()]);

    ensure!(admin.share_group_lag(&group, &topic).await? > 0);
    let receipts = got
        .iter()
        .map(|d| source.acknowledge(&d.id, AckKind::Accept));
    for receipt in futures::future::join_all(receipts).await {
        receipt?;
    }
    wait_for("lag 0", Duration::from_secs(30), async || {
        Ok(admin.share_group_lag(&group, &topic).await? == 0)
    })
    .await?;
    let offsets = admin.share_group_offsets(&group, &[topic.as_str()]).await?;
    let partitions: Vec<i32> = offsets.iter().map(|p| p.partition).collect();
    ensure!(partitions == vec![0, 1], "{offsets:?}");
    ensure!(
        offsets.iter().all(|p| p.topic == topic && p.lag <= 0),
        "{offsets:?}"
    );
    // Partition 0 has share state now (its start offset advances lazily; the broker's lag is 0).
    ensure!(
        offsets[0].start_offset >= 0 && offsets[0].lag == 0,
        "{offsets:?}"
    );
    source.close().await?;
    Ok(())
}
