//! Which topics exist, from the cluster's metadata (through librdkafka).

use std::collections::HashMap;
use std::time::Duration;

use anyhow::Context;
use worker_core::security::Security;

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
