//! The Kafka dead-letter sink over the broker's secured listeners (`scripts/kafka.sh env`:
//! `KAFKA_SASL_SSL_BOOTSTRAP`, `KAFKA_MTLS_BOOTSTRAP`, `KAFKA_TLS_*`, `KAFKA_SASL_*`): both of its
//! producers secured by the same [`Security`] as the share client, letters written over SASL_SSL
//! (PLAIN) and mutual TLS, and a wrong password a permanent error in the broker's words, at once.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use bytes::Bytes;
use rdkafka::Message;
use tests::{create_topic, read_all, unique};
use worker_core::ErrorKind;
use worker_core::dlq::{DeadLetter, DlqErrorKind, DlqReason, DlqSink, DlqTopic, KafkaDlqSink};
use worker_core::security::{SaslConfig, Secret, Security, TlsConfig};
use worker_core::source::{Delivery, DeliveryId, Lease};

/// A variable of `scripts/kafka.sh env`; its absence fails the test saying how to set it.
fn env(name: &str) -> anyhow::Result<String> {
    std::env::var(name).with_context(|| {
        format!("{name} is not set: eval \"$(bash scripts/kafka.sh env)\" (scripts/test.sh does)")
    })
}

fn sasl_ssl(password: &str) -> anyhow::Result<Security> {
    Ok(Security::sasl_ssl(
        SaslConfig::plain(env("KAFKA_SASL_USERNAME")?, Secret::new(password)),
        TlsConfig::ca_file(env("KAFKA_TLS_CA_FILE")?),
    ))
}

fn letter(topic: &str, value: &'static [u8]) -> DeadLetter {
    DeadLetter {
        delivery: Delivery {
            id: DeliveryId {
                topic: Arc::from(topic),
                partition: 0,
                offset: 7,
                lease: Lease::new(1, 0),
            },
            key: None,
            value: Some(Bytes::from_static(value)),
            headers: Vec::new(),
            timestamp: 1_700_000_000_000,
            delivery_count: 1,
            lock_duration: Duration::from_secs(30),
            acquired_at: tokio::time::Instant::now(),
            undecodable: None,
        },
        reason: DlqReason::Rejected,
        error: "rejected".to_owned(),
        handler: Arc::from("send"),
        failed_at: SystemTime::now(),
    }
}

#[tokio::test]
async fn letters_are_written_over_sasl_ssl_and_mutual_tls() -> anyhow::Result<()> {
    let mtls = Security::ssl(
        TlsConfig::ca_file(env("KAFKA_TLS_CA_FILE")?)
            .client_cert(env("KAFKA_TLS_CERT_FILE")?, env("KAFKA_TLS_KEY_FILE")?),
    );
    for (bootstrap, security, value) in [
        (
            env("KAFKA_SASL_SSL_BOOTSTRAP")?,
            sasl_ssl(&env("KAFKA_SASL_PASSWORD")?)?,
            &b"over SASL_SSL"[..],
        ),
        (env("KAFKA_MTLS_BOOTSTRAP")?, mtls, &b"over mutual TLS"[..]),
    ] {
        let topic = unique("dlq-secured");
        create_topic(&format!("{topic}.dlq"), 1).await?;
        let sink = KafkaDlqSink::builder(bootstrap.as_str(), unique("dlq-secured-group"))
            .topic(DlqTopic::default())
            .security(security)
            .build()?;
        tokio::time::timeout(Duration::from_secs(30), sink.send(&letter(&topic, value)))
            .await
            .with_context(|| format!("writing to {bootstrap} took over 30 s"))??;
        let written = read_all(format!("{topic}.dlq")).await?;
        assert_eq!(written.len(), 1, "{bootstrap}");
        assert_eq!(written[0].payload(), Some(value), "{bootstrap}");
    }
    Ok(())
}

#[tokio::test]
async fn a_wrong_password_is_a_permanent_error_in_the_brokers_words() -> anyhow::Result<()> {
    let topic = unique("dlq-refused");
    let bootstrap = env("KAFKA_SASL_SSL_BOOTSTRAP")?;
    let sink = KafkaDlqSink::builder(bootstrap.as_str(), unique("dlq-refused-group"))
        .security(sasl_ssl("not-the-password")?)
        // Far beyond the test's bound: the refusal, not a timeout, must end the write.
        .delivery_timeout(Duration::from_secs(120))
        .build()?;
    let started = Instant::now();
    let err = tokio::time::timeout(
        Duration::from_secs(60),
        sink.send(&letter(&topic, b"refused")),
    )
    .await
    .context("the write neither succeeded nor failed within 60 s")?
    .expect_err("the broker refuses a wrong password");
    let took = started.elapsed();
    let text = err.to_string();
    assert_eq!(err.kind(), DlqErrorKind::Permanent, "{text}");
    assert_eq!(err.error().kind(), ErrorKind::Authentication, "{text}");
    assert!(
        text.contains(&format!("{topic}.dlq")),
        "names the topic: {text}"
    );
    assert!(
        text.contains("Invalid username or password"),
        "the broker's words: {text}"
    );
    assert!(text.contains(&bootstrap), "names the broker: {text}");
    assert!(!text.contains("not-the-password"), "{text}");
    assert!(took < Duration::from_secs(15), "took {took:?}: {text}");
    Ok(())
}
