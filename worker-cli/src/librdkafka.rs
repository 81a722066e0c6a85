//! The binary's librdkafka clients (metadata reads, `produce`, `dlq replay`), all made the same
//! way from the one [`Security`], and waits on them that end as soon as a broker refuses the
//! client, in the broker's words, instead of at a timeout.

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::Context;
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::metadata::Metadata;
use rdkafka::producer::FutureProducer;
use worker_core::security::{KafkaContext, RdkafkaSecurity, Security};

/// How long one metadata request may take before the broker's refusals are looked at again.
const METADATA_SLICE: Duration = Duration::from_millis(500);

/// A client config for `bootstrap` secured by `security`, with `settings` over it.
fn client_config(
    security: &Security,
    bootstrap: &str,
    settings: &[(&str, &str)],
) -> anyhow::Result<ClientConfig> {
    let mut config = security.rdkafka_client_config(bootstrap)?;
    for (key, value) in settings {
        config.set(*key, *value);
    }
    Ok(config)
}

/// A consumer (for metadata, or reading by offset) and its context.
pub(crate) fn consumer(
    security: &Security,
    bootstrap: &str,
    settings: &[(&str, &str)],
    what: &str,
) -> anyhow::Result<(BaseConsumer<KafkaContext>, KafkaContext)> {
    let context = security.rdkafka_context();
    let consumer = client_config(security, bootstrap, settings)?
        .create_with_context(context.clone())
        .with_context(|| format!("creating {what}"))?;
    Ok((consumer, context))
}

/// A producer and its context.
pub(crate) fn producer(
    security: &Security,
    bootstrap: &str,
    settings: &[(&str, &str)],
    what: &str,
) -> anyhow::Result<(FutureProducer<KafkaContext>, KafkaContext)> {
    let context = security.rdkafka_context();
    let producer = client_config(security, bootstrap, settings)?
        .create_with_context(context.clone())
        .with_context(|| format!("creating {what}"))?;
    Ok((producer, context))
}

/// The cluster's metadata (of `topic` only, if given) within `timeout`; fails at once, in the
/// broker's words, when a broker refuses the client. Call it before the consumer is assigned
/// partitions: it polls the consumer to serve librdkafka's events (the OAUTHBEARER token it waits
/// for before connecting, errors), which would drop a record.
pub(crate) fn metadata(
    consumer: &BaseConsumer<KafkaContext>,
    context: &KafkaContext,
    topic: Option<&str>,
    timeout: Duration,
) -> anyhow::Result<Metadata> {
    let deadline = Instant::now() + timeout;
    loop {
        let _ = consumer.poll(Duration::ZERO);
        let left = deadline.saturating_duration_since(Instant::now());
        match consumer.fetch_metadata(topic, left.min(METADATA_SLICE)) {
            Ok(metadata) => {
                context.accepted();
                return Ok(metadata);
            }
            Err(err) => {
                if let Some(said) = context.refusal() {
                    anyhow::bail!("the broker refused the connection: {said}");
                }
                if Instant::now() >= deadline {
                    return Err(err.into());
                }
            }
        }
    }
}

/// `future` (a delivery), unless a broker refuses the client first: then what it said.
pub(crate) async fn unless_refused<T>(
    future: impl Future<Output = T>,
    context: &KafkaContext,
) -> Result<T, String> {
    tokio::select! {
        done = future => Ok(done),
        said = context.refused() => Err(format!("the broker refused the producer: {said}")),
    }
}
