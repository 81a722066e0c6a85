//! The broker's own dead-letter queue (Kafka 4.4's KIP-1191), read once at start.
//!
//! With it, the broker writes every record the worker REJECTs to the group's dead-letter topic.
//! In broker mode that is the worker's dead-letter path, so the worker refuses to start without
//! it: the broker does not confirm a letter before it archives the record, so a missing or
//! misconfigured one would lose every dead letter silently. With the worker's own sink it means
//! every letter is written twice (by the sink, then by the broker for the REJECT that follows):
//! a warning. Without either, it is where the worker's REJECTs end up.

use super::super::routes::Routes;
use crate::policy::PolicyConfig;
use crate::source::{BrokerDeadLetters, ShareSource};
use crate::{Error, ErrorKind, Result};

/// Checks the broker's dead-letter queue against the worker's dead-letter path: an error in
/// broker mode unless the broker writes this group's letters, and in any mode when it writes them
/// to a topic the worker reads (a route's or a delay topic: each REJECT would come back as new
/// work, for ever); otherwise only logs. `Ok(true)` when the broker writes the letters of what the
/// worker REJECTs without a sink.
pub(crate) async fn check<S: ShareSource, Svc>(
    source: &S,
    policy: &PolicyConfig,
    routes: &Routes<Svc>,
) -> Result<bool> {
    let group = source.group().unwrap_or("(unnamed)");
    let read = source.broker_dlq().await;
    if let Ok(BrokerDeadLetters::On { topic, .. }) = &read
        && let Some(role) = routes.reads(topic)
    {
        return Err(Error::new(
            ErrorKind::Config,
            format!(
                "share group {group}: the broker's dead-letter topic (errors.deadletterqueue.topic.name) is {topic}, {role}: every REJECTed record would come back to the worker as new work; name a topic of its own"
            ),
        ));
    }
    if policy.broker_dlq {
        return match read {
            Ok(BrokerDeadLetters::On { topic, copy_record }) => {
                tracing::info!(
                    group,
                    topic,
                    copy_record,
                    "dead letters: the broker writes them (KIP-1191); the worker REJECTs each and logs its reason"
                );
                Ok(true)
            }
            Ok(BrokerDeadLetters::Off { why }) => Err(Error::new(
                ErrorKind::Config,
                format!(
                    "share group {group}: broker dead letters (`broker_dlq`, TOML dlq.mode = \"broker\") need the broker's dead-letter queue (Kafka 4.4+, KIP-1191), but {why}"
                ),
            )),
            Err(err) => Err(Error::new(
                err.kind(),
                format!(
                    "share group {group}: broker dead letters (`broker_dlq`, TOML dlq.mode = \"broker\") need the broker's dead-letter queue, which cannot be read: {err}"
                ),
            )),
        };
    }
    let writes = matches!(read, Ok(BrokerDeadLetters::On { .. })) && policy.dlq.is_none();
    match read {
        Ok(BrokerDeadLetters::On { topic, .. }) if policy.dlq.is_some() => tracing::warn!(
            group,
            topic,
            "the broker writes this group's dead letters too (KIP-1191): every letter the worker's sink writes is written again by the broker for the REJECT that follows; use broker mode (`broker_dlq`, TOML dlq.mode = \"broker\") or unset the group's errors.deadletterqueue.topic.name"
        ),
        Ok(BrokerDeadLetters::On { topic, .. }) => tracing::info!(
            group,
            topic,
            "the broker writes the dead letters of the records this worker REJECTs (KIP-1191)"
        ),
        Ok(BrokerDeadLetters::Off { why }) => {
            tracing::info!(group, why, "no broker dead-letter queue (KIP-1191)")
        }
        Err(err) => {
            tracing::info!(group, error = %err, "cannot read the broker's dead-letter queue (KIP-1191)")
        }
    }
    Ok(writes)
}
