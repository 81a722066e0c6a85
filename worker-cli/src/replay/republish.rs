//! Putting a letter back: republish it, and once that is confirmed, mark it replayed.
//!
//! Both writes go through one idempotent `acks=all` producer. The marker is written only after the
//! republish is confirmed, so a crash in between leaves a letter without marker: it is replayed
//! again by the next run (at least once, never lost).
//!
//! What is republished is the record as the letter holds it. A broker's letter without the record
//! (KIP-1191 without `errors.deadletterqueue.copy.record.enable`) is replaced by its original,
//! read from its source topic by offset ([`original`](super::original)), only when the run
//! follows such pointers ([`BrokerOffsets::Followed`]); a broker's letter with the record has its
//! key and value but none of its headers (the broker never copies them).

use std::time::Duration;

use anyhow::Context;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use worker_core::dlq::headers::{self, MarkerKind};
use worker_core::security::{KafkaContext, Security};

use super::original::OriginalReader;
use super::provenance::{self, Content};
use super::scan::{Letter, LetterHeader};
use super::select::BrokerOffsets;
use crate::librdkafka;

/// The header counting how often a record was replayed.
pub(crate) const REPLAY_COUNT: &str = "share.replay.count";
/// How long one write may take before it counts as failed (a missing topic fails after this).
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a replay did not complete.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReplayError {
    /// Nothing is known to be written: the letter stays as it was.
    #[error("{0:#}")]
    Republish(anyhow::Error),
    /// The record is republished, but its marker is not: the next run replays it again.
    #[error("republished, but {0:#}; the next run will replay it again")]
    Marker(anyhow::Error),
}

/// Writes replays and markers for one dead-letter topic. Clones share one producer.
#[derive(Clone)]
pub(crate) struct Replayer {
    producer: FutureProducer<KafkaContext>,
    context: KafkaContext,
    dlq: String,
    /// Reads the originals of broker letters that do not hold their record.
    originals: OriginalReader,
    /// Whether it may: the selection refuses those letters otherwise, and so does the replayer.
    broker_offsets: BrokerOffsets,
}

impl std::fmt::Debug for Replayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replayer")
            .field("dlq", &self.dlq)
            .finish_non_exhaustive()
    }
}

impl Replayer {
    /// A replayer for the letters of `dlq`, connecting as `security` says; `broker_offsets`: whether
    /// a broker's letter without the record is replaced by the record its headers point at.
    pub(crate) fn new(
        bootstrap: &str,
        security: &Security,
        client_id: &str,
        dlq: &str,
        broker_offsets: BrokerOffsets,
    ) -> anyhow::Result<Self> {
        let timeout = WRITE_TIMEOUT.as_millis().to_string();
        let (producer, context) = librdkafka::producer(
            security,
            bootstrap,
            &[
                ("client.id", client_id),
                ("acks", "all"),
                ("enable.idempotence", "true"),
                ("message.timeout.ms", &timeout),
            ],
            "the replay producer",
        )?;
        Ok(Self {
            producer,
            context,
            dlq: dlq.to_owned(),
            originals: OriginalReader::new(bootstrap, security, client_id)?,
            broker_offsets,
        })
    }

    /// Republishes `letter` to `target` (same key, value and headers, without the provenance
    /// headers, `share.replay.count` raised by one; a broker letter without the record: its
    /// original from the source topic) and then marks it replayed. Returns once both writes are
    /// confirmed.
    pub(crate) async fn replay(&self, letter: &Letter, target: &str) -> Result<(), ReplayError> {
        let at = format!("{}/{}@{}", self.dlq, letter.partition, letter.offset);
        let provenance = letter.provenance();
        let original;
        let (key, value, record_headers) = if provenance.content == Content::HeadersOnly {
            if self.broker_offsets == BrokerOffsets::Refused {
                return Err(ReplayError::Republish(anyhow::anyhow!(
                    "{at}: a broker's letter without the record, and this run does not follow the offsets such letters name"
                )));
            }
            let Some((topic, partition, offset)) = provenance.source() else {
                return Err(ReplayError::Republish(anyhow::anyhow!(
                    "{at}: a broker's letter without the record names no source to read it from"
                )));
            };
            original = self
                .originals
                .read(topic, partition, offset)
                .await
                .with_context(|| {
                    format!(
                        "{at}: the broker's letter holds no record (errors.deadletterqueue.copy.record.enable was off), and its original {topic}/{partition}@{offset} cannot be read"
                    )
                })
                .map_err(ReplayError::Republish)?;
            (&original.key, &original.value, &original.headers)
        } else {
            (&letter.key, &letter.value, &letter.headers)
        };
        let Ok(letter_headers) = record_headers else {
            return Err(ReplayError::Republish(anyhow::anyhow!(
                "{at}: a header name is not UTF-8"
            )));
        };
        let count = replay_count(letter_headers).to_string();
        let mut out = OwnedHeaders::new_with_capacity(letter_headers.len() + 1);
        for header in kept(letter_headers) {
            out = out.insert(Header {
                key: &header.key,
                value: header.value.as_deref(),
            });
        }
        out = out.insert(Header {
            key: REPLAY_COUNT,
            value: Some(count.as_bytes()),
        });
        let mut record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(target).headers(out);
        if let Some(key) = key {
            record = record.key(key);
        }
        if let Some(value) = value {
            record = record.payload(value);
        }
        self.write(record)
            .await
            .with_context(|| format!("republishing {at} to {target}"))
            .map_err(ReplayError::Republish)?;
        self.mark(letter.partition, letter.offset, MarkerKind::Replayed)
            .await
            .map_err(ReplayError::Marker)
    }

    /// Writes a `kind` marker for the letter at `partition`/`offset` of the dead-letter topic
    /// (into that partition) and waits for it to be confirmed.
    pub(crate) async fn mark(
        &self,
        partition: i32,
        offset: i64,
        kind: MarkerKind,
    ) -> anyhow::Result<()> {
        let letter_offset = offset.to_string();
        let marker = OwnedHeaders::new_with_capacity(2)
            .insert(Header {
                key: headers::MARKER,
                value: Some(kind.as_str()),
            })
            .insert(Header {
                key: headers::MARKER_OFFSET,
                value: Some(&letter_offset),
            });
        let record: FutureRecord<'_, (), ()> = FutureRecord::to(&self.dlq)
            .partition(partition)
            .headers(marker);
        self.write(record).await.with_context(|| {
            format!(
                "writing the {kind} marker of {}/{partition}@{offset}",
                self.dlq
            )
        })
    }

    async fn write<K, P>(&self, record: FutureRecord<'_, K, P>) -> anyhow::Result<()>
    where
        K: rdkafka::message::ToBytes + ?Sized,
        P: rdkafka::message::ToBytes + ?Sized,
    {
        let queued = self
            .producer
            .send_result(record)
            .map_err(|(err, _)| anyhow::anyhow!("queueing the write: {err}"))?;
        match librdkafka::unless_refused(queued, &self.context)
            .await
            .map_err(|said| anyhow::anyhow!(said))?
        {
            Ok(Ok(_)) => {
                self.context.accepted();
                Ok(())
            }
            Ok(Err((err, _))) => Err(anyhow::anyhow!(err)),
            Err(_) => Err(anyhow::anyhow!("the producer dropped the write")),
        }
    }
}

/// The headers a replay keeps: all but the provenance ones (`share.dlq.*`, `__dlq.errors.*`) and
/// the old replay count.
fn kept(headers: &[LetterHeader]) -> impl Iterator<Item = &LetterHeader> {
    headers
        .iter()
        .filter(|h| !provenance::is_provenance(&h.key) && h.key != REPLAY_COUNT)
}

/// The replay count of the republished record: one more than the letter says (0 if it says
/// nothing readable).
fn replay_count(headers: &[LetterHeader]) -> u64 {
    headers
        .iter()
        .rfind(|h| h.key == REPLAY_COUNT)
        .and_then(|h| std::str::from_utf8(h.value.as_deref()?).ok())
        .and_then(|c| c.parse::<u64>().ok())
        .unwrap_or(0)
        .saturating_add(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(key: &str, value: &[u8]) -> LetterHeader {
        LetterHeader {
            key: key.to_owned(),
            value: Some(value.to_vec()),
        }
    }

    #[test]
    fn keeps_the_record_headers_and_counts_replays() {
        let letter = [
            header("traceparent", b"00-abc-def-01"),
            header(REPLAY_COUNT, b"2"),
            header(headers::TOPIC, b"sms"),
            header(headers::REASON, b"rejected"),
            header(headers::BROKER_MESSAGE, headers::BROKER_REJECTED.as_bytes()),
            LetterHeader {
                key: "empty".into(),
                value: None,
            },
        ];
        let keys: Vec<_> = kept(&letter).map(|h| h.key.as_str()).collect();
        assert_eq!(keys, ["traceparent", "empty"]);
        assert_eq!(replay_count(&letter), 3);
        assert_eq!(replay_count(&[]), 1);
        assert_eq!(replay_count(&[header(REPLAY_COUNT, &[0xff])]), 1);
        assert_eq!(
            replay_count(&[header(REPLAY_COUNT, u64::MAX.to_string().as_bytes())]),
            u64::MAX
        );
    }
}
