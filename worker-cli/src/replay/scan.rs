//! Reading a dead-letter topic by offset: its letters, and which of them are done.
//!
//! A plain consumer (no group membership, no commits) is assigned every partition from its low to
//! its high watermark as of [`DlqScan::open`]. Reading acquires and locks nothing, so a letter that
//! is only looked at stays exactly as it was, deliverable to any later run or tool.
//!
//! Whether a letter is done is recorded in the topic itself by marker records (see
//! [`headers::MARKER`]), always written after their letter in the same partition. So a scan reads
//! every partition twice: first for the markers (keeping only offsets), then for the letters, each
//! handed on with its [`LetterStatus`] and dropped; no letter's payload is kept.

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::ops::ControlFlow;
use std::panic::AssertUnwindSafe;
use std::sync::Once;
use std::time::{Duration, Instant};

use anyhow::Context;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Headers, Message};
use rdkafka::metadata::Metadata;
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::mpsc;
use worker_core::dlq::headers::{self, MarkerKind};
use worker_core::security::{KafkaContext, Security};

use super::markers::{self, Markers};
use crate::librdkafka;

/// How long a read may go without any record or end of partition before it gives up.
const STALL: Duration = Duration::from_secs(30);
/// How long one metadata or watermark request may take.
pub(crate) const REQUEST: Duration = Duration::from_secs(15);
/// The consumer's group id. Required by librdkafka for `assign`, but never joined and never
/// committed to, so no group is ever created on the broker.
const READER_GROUP: &str = "share-worker-dlq-reader";
/// The most a reader prefetches per partition, in KiB.
const QUEUED_KBYTES: &str = "16384";

/// The part of one partition a scan reads: `low..high`, fixed when the scan is opened, so records
/// written during the run (our own markers among them) are left for the next one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PartitionRange {
    pub(crate) partition: i32,
    pub(crate) low: i64,
    pub(crate) high: i64,
}

/// What is known to have been done with a letter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LetterStatus {
    /// No marker: nothing was done with it yet.
    Pending,
    /// A marker says it is done with; it is not to be replayed again.
    Done(MarkerKind),
}

/// One header of a letter, as read (the value is untrusted bytes, not necessarily UTF-8).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LetterHeader {
    pub(crate) key: String,
    pub(crate) value: Option<Vec<u8>>,
}

/// A header name that is not UTF-8: rdkafka cannot read such a record's headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct UnreadableHeaders;

/// One dead letter (any record of the topic that is not a marker), owned. What its headers say
/// (source, reason, error, what it holds), for the worker's letters and a broker's alike, is read
/// by [`Letter::provenance`](super::provenance).
#[derive(Clone, Debug)]
pub(crate) struct Letter {
    pub(crate) partition: i32,
    pub(crate) offset: i64,
    pub(crate) key: Option<Vec<u8>>,
    pub(crate) value: Option<Vec<u8>>,
    pub(crate) headers: Result<Vec<LetterHeader>, UnreadableHeaders>,
    pub(crate) status: LetterStatus,
    /// The record's timestamp (ms since the epoch): when it was written to the dead-letter topic.
    pub(crate) timestamp_ms: Option<i64>,
}

impl Letter {
    /// The value of the last header named `key` (a record may repeat a header; the dead-letter
    /// sink appends its provenance after the record's own headers).
    pub(crate) fn header(&self, key: &str) -> Option<&[u8]> {
        let headers = self.headers.as_ref().ok()?;
        headers
            .iter()
            .rfind(|h| h.key == key)
            .map(|h| h.value.as_deref().unwrap_or_default())
    }
}

/// The most characters of an untrusted value put into a message.
pub(crate) const SHOWN_MAX: usize = 200;

/// Untrusted bytes as text for a message: lossy UTF-8, escaped, cut at [`SHOWN_MAX`] characters.
pub(crate) fn shown(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out: String = text
        .chars()
        .take(SHOWN_MAX)
        .flat_map(char::escape_debug)
        .collect();
    if text.chars().nth(SHOWN_MAX).is_some() {
        out.push('…');
    }
    out
}

/// Which pass of a scan is reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ScanPass {
    Markers,
    Letters,
}

/// A dead-letter topic opened for reading, with its partitions' ranges fixed.
pub(crate) struct DlqScan {
    consumer: BaseConsumer<KafkaContext>,
    context: KafkaContext,
    topic: String,
    ranges: Vec<PartitionRange>,
}

impl std::fmt::Debug for DlqScan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DlqScan")
            .field("topic", &self.topic)
            .field("ranges", &self.ranges)
            .finish_non_exhaustive()
    }
}

impl DlqScan {
    /// Connects (as `security` says) and reads every partition's watermarks. Blocking.
    pub(crate) fn open(
        bootstrap: &str,
        security: &Security,
        client_id: &str,
        topic: &str,
    ) -> anyhow::Result<Self> {
        let (consumer, context) = reader(bootstrap, security, client_id, true)?;
        let mut ranges = Vec::new();
        for partition in partitions(&consumer, &context, topic)? {
            let (low, high) = consumer
                .fetch_watermarks(topic, partition, REQUEST)
                .with_context(|| format!("reading the offsets of {topic}/{partition}"))?;
            ranges.push(PartitionRange {
                partition,
                low,
                high,
            });
        }
        Ok(Self {
            consumer,
            context,
            topic: topic.to_owned(),
            ranges,
        })
    }

    /// Whether `topic` exists in the cluster. Blocking.
    pub(crate) fn topic_exists(&self, topic: &str) -> anyhow::Result<bool> {
        match partitions(&self.consumer, &self.context, topic) {
            Ok(_) => Ok(true),
            Err(err) if err.downcast_ref::<NoSuchTopic>().is_some() => Ok(false),
            Err(err) => Err(err),
        }
    }

    /// The partitions' ranges as of the open (narrowed by [`narrow`](Self::narrow)).
    pub(crate) fn ranges(&self) -> &[PartitionRange] {
        &self.ranges
    }

    /// Reads only the partitions named in `from`, each from its offset there on (never below its
    /// low watermark). A letter's markers follow it, so both passes stay correct for the letters
    /// read.
    pub(crate) fn narrow(&mut self, from: &BTreeMap<i32, i64>) {
        self.ranges
            .retain_mut(|range| match from.get(&range.partition) {
                Some(offset) => {
                    range.low = range.low.max(*offset).min(range.high);
                    true
                }
                None => false,
            });
    }

    /// Per partition, the first offset whose record was written at or after `ms` (the high
    /// watermark where none was). Blocking.
    pub(crate) fn offsets_at(&self, ms: i64) -> anyhow::Result<BTreeMap<i32, i64>> {
        let mut asked = TopicPartitionList::new();
        for range in &self.ranges {
            asked
                .add_partition_offset(&self.topic, range.partition, Offset::Offset(ms))
                .with_context(|| format!("asking for {}/{}", self.topic, range.partition))?;
        }
        let found = self
            .consumer
            .offsets_for_times(asked, REQUEST)
            .with_context(|| format!("looking up the offsets of {} by time", self.topic))?;
        let mut out = BTreeMap::new();
        for range in &self.ranges {
            let offset = match found
                .find_partition(&self.topic, range.partition)
                .map(|p| p.offset())
            {
                Some(Offset::Offset(offset)) => offset,
                _ => range.high,
            };
            out.insert(range.partition, offset);
        }
        Ok(out)
    }

    /// The number of records (letters and markers) in the ranges.
    pub(crate) fn records(&self) -> u64 {
        self.ranges
            .iter()
            .map(|r| u64::try_from(r.high - r.low).unwrap_or(0))
            .sum()
    }

    /// Reads every marker (see [`Markers`]). `progress` gets the number of records read so far.
    /// Fails when the topic is too fragmented to tell which letters are done. Blocking.
    pub(crate) fn markers(&self, mut progress: impl FnMut(u64)) -> anyhow::Result<Markers> {
        let mut markers = Markers::default();
        let mut malformed = 0u64;
        let mut read = 0;
        self.read(|message| {
            read += 1;
            progress(read);
            let (partition, offset) = (message.partition(), message.offset());
            match marker(message) {
                Marker::None => markers.letter(partition, offset),
                Marker::Valid {
                    offset: letter,
                    kind,
                } => {
                    // Counted by `markers`; said once below.
                    let _ = markers.marker(partition, offset, letter, kind);
                }
                Marker::UnknownKind(_) | Marker::BadOffset(_) => {
                    malformed += 1;
                    markers.no_letter(partition, offset);
                }
            }
            ControlFlow::Continue(())
        })?;
        anyhow::ensure!(
            !markers.overflowed(),
            "{}: its letters and markers interleave more than {} times, so which letters are done \
             cannot be told in bounded memory; nothing is replayed or skipped",
            self.topic,
            markers::MAX_RUNS
        );
        if markers.ignored() + malformed > 0 {
            tracing::warn!(
                "{}: ignored {} markers that name no letter before them and {malformed} that do not parse ({} and {} headers)",
                self.topic,
                markers.ignored(),
                headers::MARKER,
                headers::MARKER_OFFSET,
            );
        }
        Ok(markers)
    }

    /// Hands every letter, with its status after `markers`, to `visit` in offset order per
    /// partition, until `visit` breaks. `progress` gets the number of records read. Blocking.
    pub(crate) fn letters(
        &self,
        markers: &Markers,
        mut visit: impl FnMut(Letter) -> ControlFlow<()>,
        mut progress: impl FnMut(u64),
    ) -> anyhow::Result<()> {
        let mut read = 0;
        self.read(|message| {
            read += 1;
            progress(read);
            if !matches!(marker(message), Marker::None) {
                return ControlFlow::Continue(());
            }
            let (partition, offset) = (message.partition(), message.offset());
            visit(Letter {
                partition,
                offset,
                key: message.key().map(<[u8]>::to_vec),
                value: message.payload().map(<[u8]>::to_vec),
                headers: owned_headers(message),
                // `markers` refused to be built past its bound: every status is known.
                status: markers
                    .status(partition, offset)
                    .unwrap_or(LetterStatus::Pending),
                timestamp_ms: message.timestamp().to_millis(),
            })
        })
    }

    /// Runs both passes on a blocking thread and hands the letters over a channel of `capacity`
    /// (so at most that many letters wait in memory). The task ends early, without error, once the
    /// receiver is dropped. `progress` sees each pass's count of records read and the total (the
    /// count reaches the total when the pass is complete).
    pub(crate) fn spawn_letters(
        self,
        capacity: usize,
        mut progress: impl FnMut(ScanPass, u64, u64) + Send + 'static,
    ) -> (
        mpsc::Receiver<Letter>,
        tokio::task::JoinHandle<anyhow::Result<()>>,
    ) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let task = tokio::task::spawn_blocking(move || {
            let total = self.records();
            let markers = self.markers(|read| progress(ScanPass::Markers, read, total))?;
            // Each range is covered, even where offsets were missing (compaction, transactions).
            progress(ScanPass::Markers, total, total);
            self.letters(
                &markers,
                |letter| match tx.blocking_send(letter) {
                    Ok(()) => ControlFlow::Continue(()),
                    Err(_) => ControlFlow::Break(()),
                },
                |read| progress(ScanPass::Letters, read, total),
            )?;
            progress(ScanPass::Letters, total, total);
            Ok(())
        });
        (rx, task)
    }

    /// Reads every range from low to high, handing each record to `visit` until it breaks.
    fn read(
        &self,
        mut visit: impl FnMut(&BorrowedMessage<'_>) -> ControlFlow<()>,
    ) -> anyhow::Result<()> {
        // Partition -> (next offset expected, high).
        let mut open: HashMap<i32, (i64, i64)> = HashMap::new();
        let mut assignment = TopicPartitionList::new();
        for range in self.ranges.iter().filter(|r| r.low < r.high) {
            open.insert(range.partition, (range.low, range.high));
            assignment
                .add_partition_offset(&self.topic, range.partition, Offset::Offset(range.low))
                .with_context(|| format!("assigning {}/{}", self.topic, range.partition))?;
        }
        if open.is_empty() {
            return Ok(());
        }
        self.consumer
            .assign(&assignment)
            .with_context(|| format!("assigning the partitions of {}", self.topic))?;
        // A pause outlives the assignment: undo the previous pass's.
        self.consumer
            .resume(&assignment)
            .with_context(|| format!("resuming the partitions of {}", self.topic))?;
        let mut last_seen = Instant::now();
        let mut last_error = None;
        while !open.is_empty() {
            match self.consumer.poll(Duration::from_millis(200)) {
                None => {}
                Some(Err(KafkaError::PartitionEOF(partition))) => {
                    last_seen = Instant::now();
                    self.close(&mut open, partition);
                }
                Some(Err(err)) => {
                    // librdkafka retries on its own; a lasting error ends the read at STALL.
                    tracing::debug!(error = %err, "reading {}", self.topic);
                    last_error = Some(err);
                }
                Some(Ok(message)) => {
                    last_seen = Instant::now();
                    let (partition, offset) = (message.partition(), message.offset());
                    let Some((next, high)) = open.get_mut(&partition) else {
                        continue; // a partition already read to its end
                    };
                    if offset >= *high {
                        self.close(&mut open, partition);
                        continue;
                    }
                    *next = offset + 1;
                    let last = *next >= *high;
                    let flow = visit(&message);
                    if last {
                        self.close(&mut open, partition);
                    }
                    if flow.is_break() {
                        break;
                    }
                }
            }
            if last_seen.elapsed() > STALL {
                let mut at: Vec<_> = open.iter().map(|(p, (next, _))| (*p, *next)).collect();
                at.sort_unstable();
                let at: Vec<_> = at
                    .iter()
                    .map(|(p, next)| format!("{}/{p}@{next}", self.topic))
                    .collect();
                let error = last_error.map_or_else(String::new, |e| format!(" (last error: {e})"));
                anyhow::bail!(
                    "reading stalled: nothing arrived for {}s at {}{error}",
                    STALL.as_secs(),
                    at.join(", ")
                );
            }
        }
        self.consumer
            .unassign()
            .with_context(|| format!("unassigning the partitions of {}", self.topic))?;
        Ok(())
    }

    /// Stops reading `partition`: it is read to the end of its range.
    fn close(&self, open: &mut HashMap<i32, (i64, i64)>, partition: i32) {
        if open.remove(&partition).is_none() {
            return;
        }
        let mut done = TopicPartitionList::new();
        if done
            .add_partition_offset(&self.topic, partition, Offset::Invalid)
            .is_ok()
        {
            // Only saves fetching records this scan ignores anyway.
            let _ = self.consumer.pause(&done);
        }
    }
}

/// A plain consumer for reading a dead-letter topic by offset: never joins its group, never
/// commits, prefetches a bounded amount, and reports the end of each partition if `eof` (a
/// reader that follows the topic has no use for it).
pub(crate) fn reader(
    bootstrap: &str,
    security: &Security,
    client_id: &str,
    eof: bool,
) -> anyhow::Result<(BaseConsumer<KafkaContext>, KafkaContext)> {
    librdkafka::consumer(
        security,
        bootstrap,
        &[
            ("client.id", client_id),
            ("group.id", READER_GROUP),
            ("enable.auto.commit", "false"),
            ("enable.auto.offset.store", "false"),
            ("enable.partition.eof", if eof { "true" } else { "false" }),
            ("auto.offset.reset", "earliest"),
            // Letters may be large: bound what librdkafka prefetches.
            ("queued.max.messages.kbytes", QUEUED_KBYTES),
        ],
        "the dead-letter reader",
    )
}

/// The topic does not exist.
#[derive(Debug, thiserror::Error)]
#[error("topic {0} does not exist")]
pub(crate) struct NoSuchTopic(String);

/// The partitions of `topic`, from the cluster's metadata, for a consumer not yet assigned
/// partitions (it is polled while connecting: see [`librdkafka::metadata`]).
pub(crate) fn partitions(
    consumer: &BaseConsumer<KafkaContext>,
    context: &KafkaContext,
    topic: &str,
) -> anyhow::Result<Vec<i32>> {
    let metadata = librdkafka::metadata(consumer, context, Some(topic), REQUEST)
        .with_context(|| format!("reading the metadata of {topic}"))?;
    partitions_in(&metadata, topic)
}

/// The partitions of `topic` for a consumer that is reading: the metadata is asked for without
/// polling the consumer, which would take a record off its queue and lose it.
pub(crate) fn partitions_while_reading(
    consumer: &BaseConsumer<KafkaContext>,
    topic: &str,
) -> anyhow::Result<Vec<i32>> {
    let metadata = consumer
        .fetch_metadata(Some(topic), REQUEST)
        .with_context(|| format!("reading the metadata of {topic}"))?;
    partitions_in(&metadata, topic)
}

fn partitions_in(metadata: &Metadata, topic: &str) -> anyhow::Result<Vec<i32>> {
    let Some(found) = metadata.topics().iter().find(|t| t.name() == topic) else {
        return Err(NoSuchTopic(topic.to_owned()).into());
    };
    match found.error() {
        None => Ok(found.partitions().iter().map(|p| p.id()).collect()),
        Some(rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART) => {
            Err(NoSuchTopic(topic.to_owned()).into())
        }
        Some(err) => anyhow::bail!("reading the metadata of {topic}: {err:?}"),
    }
}

/// What a record says as a marker.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Marker {
    /// Not a marker: a letter.
    None,
    /// A well-formed marker about the letter at `offset`.
    Valid { offset: i64, kind: MarkerKind },
    /// A marker (it has the marker header) whose kind is unknown.
    UnknownKind(String),
    /// A marker without a decimal letter offset.
    BadOffset(Option<String>),
}

/// Reads `message` as a marker. A record with unreadable headers is not one.
pub(crate) fn marker(message: &BorrowedMessage<'_>) -> Marker {
    let (mut kind, mut offset) = (None, None);
    let read = each_header(message, |key, value| {
        if key == headers::MARKER {
            kind = Some(value.unwrap_or_default().to_vec());
        } else if key == headers::MARKER_OFFSET {
            offset = Some(value.unwrap_or_default().to_vec());
        }
    });
    match (read, kind) {
        (Err(UnreadableHeaders), _) | (Ok(()), None) => Marker::None,
        (Ok(()), Some(kind)) => parse_marker(&kind, offset.as_deref()),
    }
}

/// A marker from its two header values.
fn parse_marker(kind: &[u8], offset: Option<&[u8]>) -> Marker {
    let Some(kind_parsed) = MarkerKind::parse(kind) else {
        return Marker::UnknownKind(shown(kind));
    };
    let parsed = offset
        .and_then(|o| std::str::from_utf8(o).ok())
        .and_then(|o| o.parse::<i64>().ok())
        .filter(|o| *o >= 0);
    match parsed {
        Some(offset) => Marker::Valid {
            offset,
            kind: kind_parsed,
        },
        None => Marker::BadOffset(offset.map(shown)),
    }
}

/// Every header of `message`, owned.
pub(crate) fn owned_headers(
    message: &BorrowedMessage<'_>,
) -> Result<Vec<LetterHeader>, UnreadableHeaders> {
    let mut out = Vec::new();
    each_header(message, |key, value| {
        out.push(LetterHeader {
            key: key.to_owned(),
            value: value.map(<[u8]>::to_vec),
        });
    })?;
    Ok(out)
}

/// Calls `f` with each header of `message`.
///
/// rdkafka panics on a header name that is not UTF-8 (`BorrowedHeaders::try_get` unwraps it),
/// and anyone who can write to the topic can write one: that panic is caught here, silenced, and
/// reported as [`UnreadableHeaders`].
pub(crate) fn each_header(
    message: &BorrowedMessage<'_>,
    mut f: impl FnMut(&str, Option<&[u8]>),
) -> Result<(), UnreadableHeaders> {
    let Some(headers) = message.headers() else {
        return Ok(());
    };
    quietly(|| {
        for index in 0..headers.count() {
            if let Some(header) = headers.try_get(index) {
                f(header.key, header.value);
            }
        }
    })
    .ok_or(UnreadableHeaders)
}

thread_local! {
    /// Set while [`quietly`] runs on this thread: the panic hook stays silent.
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f`; `None` if it panicked, without the panic message on stderr.
fn quietly<T>(f: impl FnOnce() -> T) -> Option<T> {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.get() {
                previous(info);
            }
        }));
    });
    QUIET.set(true);
    let result = std::panic::catch_unwind(AssertUnwindSafe(f));
    QUIET.set(false);
    result.ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_parse_strictly() {
        assert_eq!(
            parse_marker(b"replayed", Some(b"42")),
            Marker::Valid {
                offset: 42,
                kind: MarkerKind::Replayed
            }
        );
        assert_eq!(
            parse_marker(b"skipped", Some(b"0")),
            Marker::Valid {
                offset: 0,
                kind: MarkerKind::Skipped
            }
        );
        assert_eq!(
            parse_marker(b"deleted", Some(b"1")),
            Marker::UnknownKind("deleted".into())
        );
        assert_eq!(parse_marker(b"replayed", None), Marker::BadOffset(None));
        assert_eq!(
            parse_marker(b"replayed", Some(b"-1")),
            Marker::BadOffset(Some("-1".into()))
        );
        assert_eq!(
            parse_marker(b"replayed", Some(&[0xff, b'1'])),
            Marker::BadOffset(Some("\u{fffd}1".into()))
        );
    }

    #[test]
    fn untrusted_text_is_escaped_and_bounded() {
        assert_eq!(shown(b"topic"), "topic");
        assert_eq!(shown(b"a\nb\x1b[2J"), "a\\nb\\u{1b}[2J");
        assert_eq!(shown(&[0xff]), "\u{fffd}");
        let long = shown(&[b'x'; 1000]);
        assert_eq!(long.chars().count(), SHOWN_MAX + 1);
    }

    #[test]
    fn a_panic_is_caught_quietly() {
        assert_eq!(quietly(|| 7), Some(7));
        assert_eq!(quietly(|| -> u8 { panic!("not UTF-8") }), None);
        assert!(!QUIET.get());
    }
}
