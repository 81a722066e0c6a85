//! The Kafka dead-letter sink against the real broker: what a dead letter looks like, that a write
//! is only confirmed when the broker has it, that a letter too large is written truncated, and
//! which failures stop the worker (an invalid topic name, a topic missing past the grace period).
//!
//! Authorization failures are classified by code in the sink's unit tests (this broker has no
//! authorizer); a refused authentication is tested against the broker in `dlq_security.rs`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Headers;
use rdkafka::{Message, Offset, Timestamp, TopicPartitionList};
use tests::{
    client_config, create_topic, create_topic_with_config, read_records, unique, wait_for,
};
use worker_core::ErrorKind;
use worker_core::dlq::{
    DeadLetter, DlqErrorKind, DlqReason, DlqSink, DlqTopic, KafkaDlqSink, headers,
};
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
        failed_at: now_to_the_millisecond(),
    }
}

/// Now, in whole milliseconds (the precision of a record's timestamp). A letter is written at its
/// `failed_at`: a fixed time in the past would fall outside the topic's 7-day retention, and the
/// broker's next retention check would delete it before the test reads it.
fn now_to_the_millisecond() -> SystemTime {
    let since_epoch = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("after the epoch");
    SystemTime::UNIX_EPOCH + Duration::from_millis(since_epoch.as_millis() as u64)
}

/// `at` in milliseconds since the epoch.
fn epoch_millis(at: SystemTime) -> i64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .expect("after the epoch")
        .as_millis() as i64
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
    let sent = letter(&source_topic, long_error);
    sink.send(&sent).await?;

    let message = read_one(&dlq_topic)?;
    assert_eq!(message.key(), Some(&b"customer-7"[..]));
    assert_eq!(message.payload(), Some(&b"{\"to\":\"+15550100\"}"[..]));
    // Written at the time the worker gave up on the record; the record's own time in a header.
    assert_eq!(
        message.timestamp(),
        Timestamp::CreateTime(epoch_millis(sent.failed_at))
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
        13,
        "two original headers plus eleven provenance headers: {found:?}"
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
    assert_eq!(
        text(headers::FAILED_AT),
        humantime::format_rfc3339_millis(sent.failed_at).to_string()
    );
    assert_eq!(text(headers::WORKER), "worker-1");
    assert_eq!(text(headers::HANDLER), "send_sms");
    assert_eq!(text(headers::RECORD_TIMESTAMP), "1700000000123");
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

/// The value of header `key` of `message` as text, if it has one.
fn header(message: &rdkafka::message::OwnedMessage, key: &str) -> Option<String> {
    message.headers().and_then(|headers| {
        headers
            .iter()
            .find(|h| h.key == key)
            .and_then(|h| h.value)
            .map(|v| String::from_utf8_lossy(v).into_owned())
    })
}

/// A value of `len` bytes that is not all the same byte, so a prefix can be told from a copy.
fn big_value(len: usize) -> Bytes {
    (0..len)
        .map(|i| (i % 251) as u8)
        .collect::<Vec<u8>>()
        .into()
}

#[tokio::test]
async fn a_letter_too_large_for_its_topic_is_written_once_truncated() -> anyhow::Result<()> {
    let group = unique("dlq-small");
    let source_topic = unique("sms");
    let dlq_topic = format!("{source_topic}.dlq");
    create_topic_with_config(&dlq_topic, 1, &[("max.message.bytes", "10240")]).await?;
    let sink = KafkaDlqSink::builder(tests::bootstrap(), &group).build()?;

    let value = big_value(50 * 1024);
    let mut big = letter(&source_topic, "too big".into());
    big.delivery.value = Some(value.clone());
    sink.send(&big).await?;

    let letters = read_records(dlq_topic, 1, Duration::from_secs(2)).await?;
    assert_eq!(letters.len(), 1, "one letter per record");
    let message = &letters[0];
    let written = message.payload().unwrap_or_default();
    assert!(
        !written.is_empty() && written.len() < 10240,
        "cut to fit: {} bytes",
        written.len()
    );
    assert!(
        value.starts_with(written),
        "a prefix of the value ({} bytes)",
        written.len()
    );
    assert_eq!(header(message, headers::TRUNCATED).as_deref(), Some("true"));
    assert_eq!(
        header(message, headers::ORIGINAL_SIZE).as_deref(),
        Some("51200")
    );
    assert_eq!(message.key(), Some(&b"customer-7"[..]), "the key is kept");
    assert_eq!(
        header(message, "traceparent").as_deref(),
        Some("00-abc-def-01"),
        "the record's headers are kept"
    );
    assert_eq!(header(message, headers::OFFSET).as_deref(), Some("4242"));
    assert_eq!(
        header(message, headers::REASON).as_deref(),
        Some("handler_error")
    );
    Ok(())
}

#[tokio::test]
async fn a_letter_too_large_for_the_producer_is_written_truncated() -> anyhow::Result<()> {
    let group = unique("dlq-huge");
    let source_topic = unique("sms");
    let dlq_topic = format!("{source_topic}.dlq");
    create_topic(&dlq_topic, 1).await?;
    let sink = KafkaDlqSink::builder(tests::bootstrap(), &group).build()?;

    let value = big_value(2 * 1024 * 1024);
    let mut huge = letter(&source_topic, "too big".into());
    huge.delivery.value = Some(value.clone());
    sink.send(&huge).await?;

    let letters = read_records(dlq_topic, 1, Duration::from_secs(2)).await?;
    assert_eq!(letters.len(), 1, "one letter per record");
    let message = &letters[0];
    let written = message.payload().unwrap_or_default();
    assert!(
        written.len() > 900_000 && written.len() < 1_000_000,
        "cut to the producer's message.max.bytes: {} bytes",
        written.len()
    );
    assert!(
        value.starts_with(written),
        "a prefix of the value ({} bytes)",
        written.len()
    );
    assert_eq!(header(message, headers::TRUNCATED).as_deref(), Some("true"));
    assert_eq!(
        header(message, headers::ORIGINAL_SIZE).as_deref(),
        Some("2097152")
    );
    Ok(())
}

#[tokio::test]
async fn an_invalid_dead_letter_topic_name_fails_for_good_at_once() -> anyhow::Result<()> {
    // The template is valid; what it renders to is not: a group name with '/' ...
    let group = format!("team/{}", unique("dlq-invalid"));
    let sink = KafkaDlqSink::builder(tests::bootstrap(), &group)
        .topic(DlqTopic::new("{group}.dead")?)
        .build()?;
    let started = std::time::Instant::now();
    let err = sink
        .send(&letter(&unique("sms"), "boom".into()))
        .await
        .expect_err("a topic name with '/' cannot be written");
    assert_eq!(err.kind(), DlqErrorKind::Permanent, "{err}");
    assert!(err.to_string().contains(&format!("{group}.dead")), "{err}");
    assert!(err.to_string().contains("'/'"), "{err}");
    assert!(err.to_string().contains("sms-"), "names the record: {err}");
    assert!(started.elapsed() < Duration::from_secs(1), "at once");

    // ... and a name longer than Kafka allows.
    let sink = KafkaDlqSink::builder(tests::bootstrap(), unique("dlq-long")).build()?;
    let long_topic = "x".repeat(300);
    let err = sink
        .send(&letter(&long_topic, "boom".into()))
        .await
        .expect_err("a 304-character topic name cannot be written");
    assert_eq!(err.kind(), DlqErrorKind::Permanent, "{err}");
    assert!(
        err.to_string().contains(&format!("{long_topic}.dlq")),
        "{err}"
    );
    assert!(err.to_string().contains("at most 249"), "{err}");
    Ok(())
}

#[tokio::test]
async fn a_missing_topic_is_unavailable_within_the_grace_period_then_permanent()
-> anyhow::Result<()> {
    let group = unique("dlq-grace");
    let grace = Duration::from_secs(3);
    let sink = KafkaDlqSink::builder(tests::bootstrap(), &group)
        .delivery_timeout(Duration::from_secs(1))
        .missing_topic_grace(grace)
        .build()?;
    let source_topic = unique("never-created");
    let dlq_topic = format!("{source_topic}.dlq");
    let started = std::time::Instant::now();
    let first = sink
        .send(&letter(&source_topic, "boom".into()))
        .await
        .expect_err("the topic does not exist");
    assert_eq!(first.kind(), DlqErrorKind::Unavailable, "{first}");
    assert!(first.to_string().contains("does not exist"), "{first}");
    assert!(first.to_string().contains(&dlq_topic), "{first}");

    let deadline = started + Duration::from_secs(30);
    let last = loop {
        let err = sink
            .send(&letter(&source_topic, "boom".into()))
            .await
            .expect_err("the topic still does not exist");
        if err.kind() == DlqErrorKind::Permanent {
            break err;
        }
        assert!(
            started.elapsed() < grace + Duration::from_secs(1),
            "unavailable only within the grace period: {err}"
        );
        assert!(
            std::time::Instant::now() < deadline,
            "still not permanent after 30 s: {err}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(started.elapsed() >= grace, "{:?}", started.elapsed());
    let text = last.to_string();
    assert!(
        text.contains(&format!(
            "dead-letter topic {dlq_topic} does not exist (auto-create off?) for"
        )),
        "{text}"
    );
    assert!(text.contains("/3@4242"), "names the record: {text}");
    Ok(())
}

#[tokio::test]
async fn a_topic_created_within_the_grace_period_is_written_to() -> anyhow::Result<()> {
    let group = unique("dlq-late");
    let sink = KafkaDlqSink::builder(tests::bootstrap(), &group)
        .delivery_timeout(Duration::from_secs(1))
        .missing_topic_grace(Duration::from_secs(60))
        .build()?;
    let source_topic = unique("late");
    let dlq_topic = format!("{source_topic}.dlq");
    let err = sink
        .send(&letter(&source_topic, "boom".into()))
        .await
        .expect_err("the topic does not exist yet");
    assert_eq!(err.kind(), DlqErrorKind::Unavailable, "{err}");

    create_topic(&dlq_topic, 1).await?;
    wait_for(
        "the letter to be written",
        Duration::from_secs(30),
        async || match sink.send(&letter(&source_topic, "boom".into())).await {
            Ok(()) => Ok(true),
            Err(err) if err.kind() == DlqErrorKind::Unavailable => Ok(false),
            Err(err) => Err(err.into()),
        },
    )
    .await?;
    let letters = read_records(dlq_topic, 1, Duration::from_secs(1)).await?;
    assert_eq!(letters.len(), 1);
    assert_eq!(header(&letters[0], headers::TRUNCATED), None);
    Ok(())
}

#[tokio::test]
async fn letters_that_fit_alone_are_not_cut_for_sharing_a_batch() -> anyhow::Result<()> {
    let group = unique("dlq-batch");
    let source_topic = unique("sms");
    let dlq_topic = format!("{source_topic}.dlq");
    create_topic_with_config(&dlq_topic, 1, &[("max.message.bytes", "10240")]).await?;
    // A long linger puts both letters in one batch of about 12 KB, which the topic refuses.
    let sink = KafkaDlqSink::builder(tests::bootstrap(), &group)
        .option("linger.ms", "200")
        .build()?;
    let value = big_value(6 * 1024);
    let mut first = letter(&source_topic, "one".into());
    first.delivery.value = Some(value.clone());
    let mut second = first.clone();
    second.delivery.id.offset = 4243;
    let (a, b) = tokio::join!(sink.send(&first), sink.send(&second));
    a?;
    b?;

    let letters = read_records(dlq_topic, 2, Duration::from_secs(2)).await?;
    assert_eq!(letters.len(), 2, "one letter per record");
    for message in &letters {
        let written = message.payload().unwrap_or_default();
        assert!(
            written == &value[..],
            "written whole: {} of {} bytes",
            written.len(),
            value.len()
        );
        assert_eq!(header(message, headers::TRUNCATED), None);
    }
    Ok(())
}
