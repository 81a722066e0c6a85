//! The broker's own dead-letter queue (Kafka 4.4's KIP-1191), on a real Kafka 4.4 broker
//! (`KAFKA_DLQ_BOOTSTRAP`, started by `scripts/test.sh`): what the admin client reads of it, what
//! the broker writes for the records a worker in broker mode REJECTs, the double write of a worker
//! sink next to it, the letter of a record archived at the delivery-count limit, and the refusals
//! of broker mode. The refusal on a broker older than 4.4 runs against `KAFKA_BOOTSTRAP`, whose
//! release `KAFKA_VERSION` names (default 4.2.2, as `scripts/kafka.sh` starts it).

use std::convert::Infallible;
use std::time::Duration;

use anyhow::{Context, ensure};
use rdkafka::message::{Message, OwnedMessage};
use tests::{
    create_topic_with_config_at, dlq_broker, header, produce, producer_at, read_all_at, unique,
    wait_for,
};
use tower::service_fn;
use worker_core::dlq::{KafkaDlqSink, headers};
use worker_core::kafka::{Admin, BrokerDlq, DlqTopicState, KafkaSource, OffsetReset};
use worker_core::source::AckKind;
use worker_core::telemetry::names;
use worker_core::{ErrorKind, Job, Outcome, Worker};

const TOPIC_KEY: &str = "errors.deadletterqueue.topic.name";
const COPY_KEY: &str = "errors.deadletterqueue.copy.record.enable";
const GROUP_ENABLE: (&str, &str) = ("errors.deadletterqueue.group.enable", "true");

/// The broker's letters in `dlq` once there are `count` of them (they are written after the
/// REJECT is answered, so they may come a moment later).
async fn letters(bootstrap: &str, dlq: &str, count: usize) -> anyhow::Result<Vec<OwnedMessage>> {
    let mut found = Vec::new();
    wait_for(
        &format!("{count} letters in {dlq}"),
        Duration::from_secs(30),
        async || {
            found = read_all_at(bootstrap, dlq.to_owned()).await?;
            Ok(found.len() >= count)
        },
    )
    .await?;
    ensure!(
        found.len() == count,
        "{} letters in {dlq}: {found:?}",
        found.len()
    );
    Ok(found)
}

/// A source topic and a dead-letter topic the broker takes letters in (the cluster's default
/// prefix `dlq.`), and a group writing to it, reading from the start; `copy` sets whether letters
/// carry the record.
async fn broker_dlq_group(
    admin: &Admin,
    name: &str,
    copy: bool,
) -> anyhow::Result<(String, String, String)> {
    let bootstrap = dlq_broker();
    let (topic, dlq, group) = (unique(name), unique(&format!("dlq.{name}")), unique(name));
    admin.create_topic(&topic, 1, 1).await?;
    create_topic_with_config_at(&bootstrap, &dlq, 1, &[GROUP_ENABLE]).await?;
    admin
        .set_group_config(&group, "share.auto.offset.reset", "earliest")
        .await?;
    admin.set_group_config(&group, TOPIC_KEY, &dlq).await?;
    admin
        .set_group_config(&group, COPY_KEY, if copy { "true" } else { "false" })
        .await?;
    wait_for(
        "the broker DLQ to be on",
        Duration::from_secs(15),
        async || Ok(admin.broker_dlq(&group).await?.is_on()),
    )
    .await?;
    Ok((topic, dlq, group))
}

/// The group's broker DLQ once `ready` holds for it (configs apply through the metadata log).
async fn broker_dlq_when(
    admin: &Admin,
    group: &str,
    mut ready: impl FnMut(&BrokerDlq) -> bool,
) -> anyhow::Result<BrokerDlq> {
    let mut last = None;
    wait_for(
        "the group's broker DLQ",
        Duration::from_secs(15),
        async || {
            let dlq = admin.broker_dlq(group).await?;
            let done = ready(&dlq);
            last = Some(dlq);
            Ok(done)
        },
    )
    .await
    .with_context(|| format!("last read: {last:?}"))?;
    last.context("read")
}

#[tokio::test]
async fn the_admin_client_reads_what_decides_whether_the_broker_writes() -> anyhow::Result<()> {
    let bootstrap = dlq_broker();
    let admin = Admin::connect(bootstrap.as_str()).await?;
    let group = unique("bdlq-states");

    let off = admin.broker_dlq(&group).await?;
    ensure!(off.supported && off.topic.is_none(), "{off:?}");
    ensure!(
        off.share_version == Some(2),
        "a 4.4 cluster formatted by kafka.sh: {off:?}"
    );
    ensure!(
        (off.prefix.as_str(), off.auto_create) == ("dlq.", false),
        "{off:?}"
    );
    let gap = off.gap().context("no DLQ configured, yet on")?;
    ensure!(gap.contains(&group) && gap.contains(TOPIC_KEY), "{gap}");

    // Named, but missing, and the cluster does not create it.
    let dlq = unique("dlq.bdlq-states");
    admin.set_group_config(&group, TOPIC_KEY, &dlq).await?;
    let missing = broker_dlq_when(&admin, &group, |d| d.topic.as_deref() == Some(&dlq)).await?;
    ensure!(
        missing.topic_state == Some(DlqTopicState::Missing),
        "{missing:?}"
    );
    let gap = missing.gap().context("a missing topic, yet on")?;
    ensure!(
        gap.contains("errors.deadletterqueue.auto.create.topics.enable"),
        "{gap}"
    );

    // There, but not open to share groups.
    create_topic_with_config_at(&bootstrap, &dlq, 1, &[]).await?;
    let closed = broker_dlq_when(&admin, &group, |d| {
        d.topic_state != Some(DlqTopicState::Missing)
    })
    .await?;
    ensure!(
        closed.topic_state
            == Some(DlqTopicState::Exists {
                group_enable: false
            }),
        "{closed:?}"
    );
    ensure!(
        closed.gap().is_some_and(|g| g.contains(GROUP_ENABLE.0)),
        "{closed:?}"
    );

    // A name without the cluster's prefix is refused by the broker however the topic is set.
    let unprefixed = unique("bdlq-unprefixed");
    create_topic_with_config_at(&bootstrap, &unprefixed, 1, &[GROUP_ENABLE]).await?;
    admin
        .set_group_config(&group, TOPIC_KEY, &unprefixed)
        .await?;
    let wrong =
        broker_dlq_when(&admin, &group, |d| d.topic.as_deref() == Some(&unprefixed)).await?;
    ensure!(
        wrong
            .gap()
            .is_some_and(|g| g.contains("errors.deadletterqueue.topic.name.prefix")),
        "{wrong:?}"
    );

    // Open to share groups, with the records copied.
    let open = unique("dlq.bdlq-states-open");
    create_topic_with_config_at(&bootstrap, &open, 1, &[GROUP_ENABLE]).await?;
    admin.set_group_config(&group, TOPIC_KEY, &open).await?;
    admin.set_group_config(&group, COPY_KEY, "true").await?;
    let on = broker_dlq_when(&admin, &group, |d| d.is_on() && d.copy_record).await?;
    ensure!(on.topic.as_deref() == Some(open.as_str()), "{on:?}");
    ensure!(on.to_string().contains("with their key and value"), "{on}");
    Ok(())
}

#[tokio::test]
async fn a_broker_older_than_4_4_has_no_broker_dlq_and_refuses_broker_mode() -> anyhow::Result<()> {
    let version = std::env::var("KAFKA_VERSION").unwrap_or_else(|_| "4.2.2".to_owned());
    let older = version.starts_with("4.2.") || version.starts_with("4.3.");
    let admin = Admin::connect(tests::bootstrap()).await?;
    let topic = unique("bdlq-old");
    let group = unique("bdlq-old-group");
    admin.create_topic(&topic, 1, 1).await?;
    let dlq = admin.broker_dlq(&group).await?;
    ensure!(dlq.supported != older, "Kafka {version}: {dlq:?}");
    ensure!(!dlq.is_on(), "{dlq:?}");

    let source = KafkaSource::builder(tests::bootstrap(), group.as_str())
        .topic(topic.as_str())
        .build()
        .await?;
    let worker = Worker::builder(source)
        .route(
            topic.as_str(),
            service_fn(|_job: Job| async { Ok::<_, Infallible>(Outcome::Accept) }),
        )
        .broker_dlq()
        .build()?;
    let err = tokio::time::timeout(Duration::from_secs(30), worker.run())
        .await
        .context("broker mode did not end")?
        .err()
        .context("broker mode ran without a broker DLQ")?;
    ensure!(err.kind() == ErrorKind::Config, "{err:?}");
    let text = err.to_string();
    ensure!(text.contains(&group) && text.contains(TOPIC_KEY), "{text}");
    let says = if older {
        "older than Kafka 4.4"
    } else {
        "is not set"
    };
    ensure!(text.contains(says), "Kafka {version}: {text}");
    Ok(())
}

#[tokio::test]
async fn broker_mode_is_refused_when_the_broker_would_not_write() -> anyhow::Result<()> {
    let bootstrap = dlq_broker();
    let admin = Admin::connect(bootstrap.as_str()).await?;
    let topic = unique("bdlq-refused");
    admin.create_topic(&topic, 1, 1).await?;
    let closed = unique("dlq.bdlq-refused");
    create_topic_with_config_at(&bootstrap, &closed, 1, &[]).await?;
    let unset = unique("bdlq-refused-unset");
    let shut = unique("bdlq-refused-closed");
    admin.set_group_config(&shut, TOPIC_KEY, &closed).await?;
    broker_dlq_when(&admin, &shut, |d| d.topic_state.is_some()).await?;
    for (group, says) in [(&unset, TOPIC_KEY), (&shut, GROUP_ENABLE.0)] {
        let source = KafkaSource::builder(bootstrap.as_str(), group.as_str())
            .topic(topic.as_str())
            .build()
            .await?;
        let worker = Worker::builder(source)
            .route(
                topic.as_str(),
                service_fn(|_job: Job| async { Ok::<_, Infallible>(Outcome::Accept) }),
            )
            .broker_dlq()
            .build()?;
        let err = tokio::time::timeout(Duration::from_secs(30), worker.run())
            .await
            .context("broker mode did not end")?
            .err()
            .with_context(|| format!("broker mode ran for group {group}"))?;
        let text = err.to_string();
        ensure!(err.kind() == ErrorKind::Config, "{err:?}");
        ensure!(
            text.contains(group.as_str()) && text.contains(says),
            "{text}"
        );
    }
    Ok(())
}

/// A group whose broker dead-letter topic is the worker's own route topic would hand every
/// REJECTed record back as new work: the worker refuses to start, in broker and in worker mode.
#[tokio::test]
async fn a_broker_dlq_that_is_a_route_topic_is_refused_at_start() -> anyhow::Result<()> {
    let bootstrap = dlq_broker();
    let admin = Admin::connect(bootstrap.as_str()).await?;
    let topic = unique("dlq.bdlq-loop");
    create_topic_with_config_at(&bootstrap, &topic, 1, &[GROUP_ENABLE]).await?;
    let group = unique("bdlq-loop");
    admin.set_group_config(&group, TOPIC_KEY, &topic).await?;
    broker_dlq_when(&admin, &group, BrokerDlq::is_on).await?;
    for broker_mode in [true, false] {
        let source = KafkaSource::builder(bootstrap.as_str(), group.as_str())
            .topic(topic.as_str())
            .build()
            .await?;
        let mut builder = Worker::builder(source).route(
            topic.as_str(),
            service_fn(|_job: Job| async { Ok::<_, Infallible>(Outcome::Accept) }),
        );
        if broker_mode {
            builder = builder.broker_dlq();
        }
        let err = tokio::time::timeout(Duration::from_secs(30), builder.build()?.run())
            .await
            .context("the worker did not end")?
            .err()
            .with_context(|| format!("the worker ran (broker mode: {broker_mode})"))?;
        let text = err.to_string();
        ensure!(err.kind() == ErrorKind::Config, "{err:?}");
        ensure!(
            text.contains(&topic) && text.contains("a route's topic"),
            "{text}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_broker_mode_the_broker_writes_the_letters_of_what_the_worker_rejects()
-> anyhow::Result<()> {
    let bootstrap = dlq_broker();
    let admin = Admin::connect(bootstrap.as_str()).await?;
    let (topic, dlq, group) = broker_dlq_group(&admin, "bdlq-handoff", true).await?;
    produce(
        &producer_at(&bootstrap, &[])?,
        &topic,
        Some(0),
        ["0", "1", "2", "3"],
    )
    .await?;
    let source = KafkaSource::builder(bootstrap.as_str(), group.as_str())
        .topic(topic.as_str())
        .offset_reset(OffsetReset::Earliest)
        .build()
        .await?;
    let metrics = tests::metrics::InMemory::new();
    let handler = service_fn(|job: Job| async move {
        let odd = job
            .payload()
            .and_then(|p| p.last())
            .is_some_and(|b| b.wrapping_sub(b'0') % 2 == 1);
        Ok::<_, Infallible>(if odd {
            Outcome::reject(format!("odd job at offset {}", job.id().offset))
        } else {
            Outcome::Accept
        })
    });
    let worker = Worker::builder(source)
        .route(topic.as_str(), handler)
        .broker_dlq()
        .meter(metrics.meter())
        .build()?;
    let summary =
        tests::run_until_drained(worker, &admin, &group, &topic, Duration::from_secs(60)).await?;
    ensure!(
        (
            summary.accepted,
            summary.rejected,
            summary.dlq_broker_handoffs,
            summary.dlq_written
        ) == (2, 2, 2, 0),
        "{summary:?}"
    );
    ensure!(metrics.sum(names::DLQ_BROKER_HANDOFFS) == 2.0);

    let mut found = letters(&bootstrap, &dlq, 2).await?;
    found.sort_by_key(|l| header(l, headers::BROKER_OFFSET));
    for (letter, offset) in found.iter().zip(["1", "3"]) {
        ensure!(header(letter, headers::BROKER_TOPIC).as_deref() == Some(topic.as_str()));
        ensure!(header(letter, headers::BROKER_PARTITION).as_deref() == Some("0"));
        ensure!(header(letter, headers::BROKER_OFFSET).as_deref() == Some(offset));
        ensure!(header(letter, headers::BROKER_GROUP).as_deref() == Some(group.as_str()));
        ensure!(header(letter, headers::BROKER_DELIVERY_COUNT).as_deref() == Some("1"));
        ensure!(
            header(letter, headers::BROKER_MESSAGE).as_deref() == Some(headers::BROKER_REJECTED)
        );
        ensure!(
            letter.payload() == Some(offset.as_bytes()),
            "copied: {letter:?}"
        );
        ensure!(
            letter.key() == Some(offset.as_bytes()),
            "copied: {letter:?}"
        );
        ensure!(
            header(letter, headers::REASON).is_none(),
            "the broker's letter has none of the worker's headers: {letter:?}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_sink_next_to_the_broker_dlq_writes_every_letter_twice() -> anyhow::Result<()> {
    let bootstrap = dlq_broker();
    let admin = Admin::connect(bootstrap.as_str()).await?;
    let (topic, broker_dlq, group) = broker_dlq_group(&admin, "bdlq-twice", true).await?;
    let sink_topic = format!("{topic}.dlq");
    admin.create_topic(&sink_topic, 1, 1).await?;
    produce(&producer_at(&bootstrap, &[])?, &topic, Some(0), ["poison"]).await?;
    let source = KafkaSource::builder(bootstrap.as_str(), group.as_str())
        .topic(topic.as_str())
        .offset_reset(OffsetReset::Earliest)
        .build()
        .await?;
    let sink = KafkaDlqSink::builder(bootstrap.as_str(), group.as_str()).build()?;
    let worker = Worker::builder(source)
        .route(
            topic.as_str(),
            service_fn(|_job: Job| async { Ok::<_, Infallible>(Outcome::reject("poison")) }),
        )
        .dlq(sink)
        .build()?;
    let summary =
        tests::run_until_drained(worker, &admin, &group, &topic, Duration::from_secs(60)).await?;
    ensure!(summary.dlq_written == 1, "{summary:?}");
    let ours = letters(&bootstrap, &sink_topic, 1).await?;
    ensure!(header(&ours[0], headers::REASON).as_deref() == Some("rejected"));
    let theirs = letters(&bootstrap, &broker_dlq, 1).await?;
    ensure!(header(&theirs[0], headers::BROKER_OFFSET).as_deref() == Some("0"));
    ensure!(theirs[0].payload() == Some(&b"poison"[..]));
    Ok(())
}

#[tokio::test]
async fn the_broker_dead_letters_a_record_whose_deliveries_reach_the_limit() -> anyhow::Result<()> {
    let bootstrap = dlq_broker();
    let admin = Admin::connect(bootstrap.as_str()).await?;
    let (topic, dlq, group) = broker_dlq_group(&admin, "bdlq-limit", false).await?;
    admin
        .set_group_config(&group, "share.delivery.count.limit", "2")
        .await?;
    wait_for("the limit of 2", Duration::from_secs(15), async || {
        Ok(admin.delivery_count_limit(&group).await? == 2)
    })
    .await?;
    produce(&producer_at(&bootstrap, &[])?, &topic, Some(0), ["job"]).await?;
    let source = KafkaSource::builder(bootstrap.as_str(), group.as_str())
        .topic(topic.as_str())
        .offset_reset(OffsetReset::Earliest)
        .build()
        .await?;
    // Two deliveries that end without an outcome (as a crashed worker's would, with a RELEASE
    // here to be quick): the second reaches the limit and the broker archives the record.
    for delivery in 1..=2 {
        let mut got = Vec::new();
        wait_for(
            &format!("delivery {delivery}"),
            Duration::from_secs(30),
            async || {
                got = source.fetch(1).await?;
                Ok(!got.is_empty())
            },
        )
        .await?;
        ensure!(got[0].delivery_count == delivery, "{:?}", got[0]);
        source.acknowledge(&got[0].id, AckKind::Release).await?;
    }
    source.close().await?;
    let found = letters(&bootstrap, &dlq, 1).await?;
    let letter = &found[0];
    ensure!(
        header(letter, headers::BROKER_MESSAGE).as_deref() == Some(headers::BROKER_DELIVERY_LIMIT),
        "{letter:?}"
    );
    ensure!(header(letter, headers::BROKER_DELIVERY_COUNT).as_deref() == Some("2"));
    ensure!(header(letter, headers::BROKER_OFFSET).as_deref() == Some("0"));
    ensure!(
        letter.payload().is_none() && letter.key().is_none(),
        "without {COPY_KEY} a letter holds no record: {letter:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_sink_the_groups_broker_dlq_takes_the_rejects_and_they_count_as_handoffs()
-> anyhow::Result<()> {
    let bootstrap = dlq_broker();
    let admin = Admin::connect(bootstrap.as_str()).await?;
    let (topic, dlq, group) = broker_dlq_group(&admin, "bdlq-nosink", false).await?;
    produce(&producer_at(&bootstrap, &[])?, &topic, Some(0), ["poison"]).await?;
    let source = KafkaSource::builder(bootstrap.as_str(), group.as_str())
        .topic(topic.as_str())
        .offset_reset(OffsetReset::Earliest)
        .build()
        .await?;
    let worker = Worker::builder(source)
        .route(
            topic.as_str(),
            service_fn(|_job: Job| async { Ok::<_, Infallible>(Outcome::reject("poison")) }),
        )
        .build()?;
    let summary =
        tests::run_until_drained(worker, &admin, &group, &topic, Duration::from_secs(60)).await?;
    ensure!(
        (summary.dlq_broker_handoffs, summary.rejected_without_dlq) == (1, 0),
        "{summary:?}"
    );
    let found = letters(&bootstrap, &dlq, 1).await?;
    ensure!(header(&found[0], headers::BROKER_OFFSET).as_deref() == Some("0"));
    Ok(())
}
