//! A broker letter's original record, read from its source topic by offset.
//!
//! A Kafka 4.4 broker writes letters without the record when the group does not copy records
//! (`errors.deadletterqueue.copy.record.enable = false`, the default): only the `__dlq.errors.*`
//! headers say where it was. The record is still there, at that offset, until retention or
//! DeleteRecords removes it; then the replay of that letter fails, naming the letter and the
//! offset, and the letter stays as it was.
//!
//! A plain consumer (no group, no commits, as in [`scan`](super::scan)) reads one record at a
//! time: assigned to the offset, it takes the first record it is handed.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use worker_core::security::{KafkaContext, Security};

use super::scan::{LetterHeader, UnreadableHeaders, owned_headers};
use crate::librdkafka;

/// How long one metadata, watermark or record read may take.
const REQUEST: Duration = Duration::from_secs(15);
/// The consumer's group id: required by librdkafka for `assign`, never joined or committed to.
const READER_GROUP: &str = "share-worker-dlq-original-reader";

/// A record as its source topic holds it.
#[derive(Debug)]
pub(crate) struct Original {
    pub(crate) key: Option<Vec<u8>>,
    pub(crate) value: Option<Vec<u8>>,
    pub(crate) headers: Result<Vec<LetterHeader>, UnreadableHeaders>,
}

/// Reads records of any topic by offset. Clones share one consumer; reads take turns.
#[derive(Clone)]
pub(crate) struct OriginalReader {
    inner: Arc<Mutex<(BaseConsumer<KafkaContext>, KafkaContext)>>,
}

impl std::fmt::Debug for OriginalReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OriginalReader").finish_non_exhaustive()
    }
}

impl OriginalReader {
    /// A reader connecting to `bootstrap` as `security` says.
    pub(crate) fn new(
        bootstrap: &str,
        security: &Security,
        client_id: &str,
    ) -> anyhow::Result<Self> {
        let (consumer, context) = librdkafka::consumer(
            security,
            bootstrap,
            &[
                ("client.id", client_id),
                ("group.id", READER_GROUP),
                ("enable.auto.commit", "false"),
                ("enable.auto.offset.store", "false"),
                ("enable.partition.eof", "true"),
                // An offset gone between the watermark read and the fetch is an error, never a
                // silent jump to another record.
                ("auto.offset.reset", "error"),
            ],
            "the source-record reader",
        )?;
        Ok(Self {
            inner: Arc::new(Mutex::new((consumer, context))),
        })
    }

    /// The record at `topic`/`partition`@`offset`, on a blocking thread.
    pub(crate) async fn read(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> anyhow::Result<Original> {
        let reader = self.clone();
        let topic = topic.to_owned();
        tokio::task::spawn_blocking(move || reader.read_blocking(&topic, partition, offset))
            .await
            .context("the source-record reader failed")?
    }

    fn read_blocking(&self, topic: &str, partition: i32, offset: i64) -> anyhow::Result<Original> {
        let guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (consumer, context) = &*guard;
        let at = format!("{topic}/{partition}@{offset}");
        let metadata = librdkafka::metadata(consumer, context, Some(topic), REQUEST)
            .with_context(|| format!("reading the metadata of {topic}"))?;
        let known = metadata
            .topics()
            .iter()
            .find(|t| t.name() == topic)
            .is_some_and(|t| {
                t.error().is_none() && t.partitions().iter().any(|p| p.id() == partition)
            });
        anyhow::ensure!(
            known,
            "{topic}/{partition} does not exist, so {at} cannot be read"
        );
        let gone = |low: i64| {
            anyhow::anyhow!(
                "{at} is gone: {topic}/{partition} now starts at offset {low} (retention or DeleteRecords removed it)"
            )
        };
        let (low, high) = consumer
            .fetch_watermarks(topic, partition, REQUEST)
            .with_context(|| format!("reading the offsets of {topic}/{partition}"))?;
        if offset < low {
            return Err(gone(low));
        }
        anyhow::ensure!(
            offset < high,
            "{at} is not there: {topic}/{partition} ends before it (next offset {high}); was the topic deleted and created again?"
        );
        let mut assignment = TopicPartitionList::new();
        assignment
            .add_partition_offset(topic, partition, Offset::Offset(offset))
            .with_context(|| format!("assigning {topic}/{partition}"))?;
        consumer
            .assign(&assignment)
            .with_context(|| format!("assigning {topic}/{partition}"))?;
        let read = (|| {
            let deadline = Instant::now() + REQUEST;
            let mut last_error = None;
            loop {
                if Instant::now() >= deadline {
                    let error = last_error
                        .map_or_else(String::new, |e: KafkaError| format!(" (last error: {e})"));
                    anyhow::bail!("{at}: nothing arrived within {}s{error}", REQUEST.as_secs());
                }
                match consumer.poll(Duration::from_millis(200)) {
                    None => {}
                    Some(Ok(message)) if message.offset() == offset => {
                        return Ok(Original {
                            key: message.key().map(<[u8]>::to_vec),
                            value: message.payload().map(<[u8]>::to_vec),
                            headers: owned_headers(&message),
                        });
                    }
                    Some(Ok(message)) if message.offset() > offset => anyhow::bail!(
                        "{at} holds no record: the next one is at offset {} (compacted away, or an aborted transaction)",
                        message.offset()
                    ),
                    Some(Ok(_)) => {}
                    Some(Err(KafkaError::PartitionEOF(_))) => {
                        anyhow::bail!("{at} holds no record: the partition ends there")
                    }
                    Some(Err(err)) => {
                        // The offset deleted since the watermark read (`auto.offset.reset` is
                        // `error`), or a broker error librdkafka retries on its own.
                        if let Ok((low, _)) = consumer.fetch_watermarks(topic, partition, REQUEST)
                            && offset < low
                        {
                            return Err(gone(low));
                        }
                        tracing::debug!(error = %err, "reading {at}");
                        last_error = Some(err);
                    }
                }
            }
        })();
        let _ = consumer.unassign();
        read
    }
}
