//! Which topics exist, from the cluster's metadata, and what a topic's configs are (through
//! librdkafka).

use std::collections::HashMap;
use std::time::Duration;

use anyhow::Context;
use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use worker_core::security::{KafkaContext, RdkafkaSecurity, Security};

use crate::librdkafka;

/// The topics of the cluster at `bootstrap` with their partition counts.
pub(crate) async fn existing(
    bootstrap: &str,
    security: &Security,
) -> anyhow::Result<HashMap<String, usize>> {
    let bootstrap = bootstrap.to_owned();
    let security = security.clone();
    tokio::task::spawn_blocking(move || {
        let (consumer, context) =
            librdkafka::consumer(&security, &bootstrap, &[], "a metadata client")?;
        let metadata = librdkafka::metadata(&consumer, &context, None, Duration::from_secs(15))
            .with_context(|| format!("reading the topics of {bootstrap}"))?;
        Ok(metadata
            .topics()
            .iter()
            .filter(|t| t.error().is_none())
            .map(|t| (t.name().to_owned(), t.partitions().len()))
            .collect())
    })
    .await
    .context("the metadata task failed")?
}

/// How long a DescribeConfigs request may take.
const DESCRIBE: Duration = Duration::from_secs(15);

/// The value of topic config `key` of `topic` (its default when the topic does not set it; `None`
/// when the broker does not say).
pub(crate) async fn config(
    bootstrap: &str,
    security: &Security,
    topic: &str,
    key: &str,
) -> anyhow::Result<Option<String>> {
    let admin: AdminClient<KafkaContext> = security
        .rdkafka_client_config(bootstrap)?
        .create_with_context(security.rdkafka_context())
        .context("creating an admin client")?;
    let described = admin
        .describe_configs(
            [&ResourceSpecifier::Topic(topic)],
            &AdminOptions::new().request_timeout(Some(DESCRIBE)),
        )
        .await
        .with_context(|| format!("describing the configs of topic {topic} on {bootstrap}"))?;
    let resource = described
        .into_iter()
        .next()
        .with_context(|| format!("describing the configs of topic {topic}: no answer for it"))?
        .map_err(|code| anyhow::anyhow!("describing the configs of topic {topic}: {code}"))?;
    Ok(resource.get(key).and_then(|entry| entry.value.clone()))
}
