//! The Kafka dead-letter sink against the real broker: what a dead letter looks like, and that a
//! write is only confirmed when the broker has it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Headers;
use rdkafka::{Message, Offset, Timestamp, TopicPartitionList};
use tests::{client_config, create_topic, unique};
use worker_core::ErrorKind;
use worker_core::dlq::{DeadLetter, DlqReason, DlqSink, DlqTopic, KafkaDlqSink, headers};
use worker_core::source::{Delivery, DeliveryId, Header, Lease};

fn letter(topic: &str, error: String) -> DeadLetter {
    DeadLetter {
        delivery: Delivery {
            id: DeliveryId {
                topic: Arc::from(topic),
                partition: 3,
                offset: 4242,
                lease: Lease::new(1, 0),
            },
            key: Some(Bytes::from_static(b"customer-7")),
            value: Some(Bytes::from_static(b"{\"to\":\"+15550100\"}")),
            headers: vec![
                Header {
                    key: Arc::from("traceparent"),
                    value: Some(Bytes::from_static(b"00-abc-def-01")),
                },
                Header {
                    key: Arc::from("share.dlq.reason"),
                    value: Some(Bytes::from_static(b"stale")),
                },
                Header {
                    key: Arc::from("empty"),
                    value: None,
                },
            ],
            timestamp: 1_700_000_000_123,
            delivery_count: 4,
            lock_duration: Duration::from_secs(30),
            acquired_at: tokio::time::Instant::now(),
            undecodable: None,
        },
        reason: DlqReason::HandlerError,
        error,
        handler: Arc::from("send_sms"),
        failed_at: SystemTime::UNIX_EPOCH + Duration::from_millis(1_764_500_000_007),
    }
}

fn read_one(topic: &str) -> anyhow::Result<rdkafka::message::OwnedMessage> {
    let consumer: BaseConsumer = client_config()
        .set("group.id", unique("dlq-reader"))
        .set("enable.auto.commit", "false")
        .create()?;
    let mut assignment = TopicPartitionList::new();
    assignment.add_partition_offset(topic, 0, Offset::Beginning)?;
    consumer.assign(&assignment)?;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "no dead letter in {topic} within 30 s"
        );
        if let Some(message) = consumer.poll(Duration::from_millis(200)) {
            return Ok(message?.detach());
        }
    }
}

#[tokio::test]
async fn a_dead_letter_keeps_the_record_and_names_its_origin() -> anyhow::Result<()> {
    let group = unique("dlq-group");
    let source_topic = unique("sms");
    let dlq_topic = format!("{source_topic}.{group}.dead");
    create_topic(&dlq_topic, 1).await?;
    let sink = KafkaDlqSink::builder(tests::bootstrap(), &group)
        .topic(DlqTopic::new("{topic}.{group}.dead")?)
        .worker("worker-1")
        .build()?;

    let long_error = "é".repeat(2000);
    sink.send(&letter(&source_topic, long_error)).await?;

    let message = read_one(&dlq_topic)?;
    assert_eq!(message.key(), Some(&b"customer-7"[..]));
    assert_eq!(message.payload(), Some(&b"{\"to\":\"+15550100\"}"[..]));
    assert_eq!(
        message.timestamp(),
        Timestamp::CreateTime(1_700_000_000_123)
    );

    let found: Vec<(String, Option<Vec<u8>>)> = message
        .headers()
        .map(|h| {
            h.iter()
                .map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec)))
                .collect()
        })
        .unwrap_or_default();
    let as_map: HashMap<&str, Option<&[u8]>> = found
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_deref()))
        .collect();
    assert_eq!(
        found.len(),
        12,
        "two original headers plus ten provenance headers: {found:?}"
    );
    assert_eq!(
        found[0].0, "traceparent",
        "original headers come first, in order"
    );
    assert_eq!(as_map["traceparent"], Some(&b"00-abc-def-01"[..]));
    assert_eq!(as_map["empty"], None);
    let text = |key: &str| {
        std::str::from_utf8(as_map[key].unwrap_or_default())
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(text(headers::TOPIC), source_topic);
    assert_eq!(text(headers::PARTITION), "3");
    assert_eq!(text(headers::OFFSET), "4242");
    assert_eq!(text(headers::GROUP), group);
    assert_eq!(text(headers::DELIVERY_COUNT), "4");
    assert_eq!(
        text(headers::REASON),
        "handler_error",
        "a stale provenance header is replaced"
    );
    assert_eq!(text(headers::ERROR).len(), headers::MAX_ERROR_LEN);
    assert_eq!(text(headers::FAILED_AT), "2025-11-30T10:53:20.007Z");
    assert_eq!(text(headers::WORKER), "worker-1");
    assert_eq!(text(headers::HANDLER), "send_sms");
    Ok(())
}

#[tokio::test]
async fn a_missing_dead_letter_topic_is_an_error_not_a_silent_drop() -> anyhow::Result<()> {
    let group = unique("dlq-missing");
    let sink = KafkaDlqSink::builder(tests::bootstrap(), &group)
        .delivery_timeout(Duration::from_secs(3))
        .build()?;
    let source_topic = unique("never-created");
    let started = std::time::Instant::now();
    let err = sink
        .send(&letter(&source_topic, "boom".into()))
        .await
        .expect_err("writing to a topic that does not exist must fail");
    assert_eq!(err.error().kind(), ErrorKind::Dlq);
    assert!(
        err.to_string().contains(&format!("{source_topic}.dlq")),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
    Ok(())
}
