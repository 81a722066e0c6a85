//! Which topics exist, from the cluster's metadata (through librdkafka).

use std::collections::HashMap;
use std::time::Duration;

use anyhow::Context;
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};

/// The topics of the cluster at `bootstrap` with their partition counts.
pub(crate) async fn existing(bootstrap: &str) -> anyhow::Result<HashMap<String, usize>> {
    let bootstrap = bootstrap.to_owned();
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .create()
            .context("creating a metadata client")?;
        let metadata = consumer
            .fetch_metadata(None, Duration::from_secs(15))
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
