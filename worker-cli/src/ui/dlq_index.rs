//! What the dashboard knows of one dead-letter topic without holding its letters: counts by
//! reason and by source topic, which letters are marked done, and how far it has read.
//!
//! One plain consumer per topic (the same reader and marker rules as `dlq replay`, see
//! [`scan`]) reads the topic from its start and then follows it, on a thread of its own; no value
//! is copied, only a few header values (cut to [`scan::SHOWN_MAX`]) and marker offsets are kept.
//! An attacker who writes letters with ever new reasons or source topics grows no map past
//! [`MAX_KEYS`]: the rest are counted under [`OTHER`].

use std::collections::{BTreeMap, HashMap};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::{Offset, TopicPartitionList};
use worker_core::security::{KafkaContext, Security};

use crate::replay::markers::Markers;
use crate::replay::provenance::{self, Provenance};
use crate::replay::scan::{self, LetterStatus, Marker};

/// The most distinct reasons (and source topics) counted one by one.
pub(crate) const MAX_KEYS: usize = 64;
/// Where the letters past [`MAX_KEYS`] distinct values are counted.
pub(crate) const OTHER: &str = "(other)";

/// What is known of one dead-letter topic so far.
#[derive(Debug, Default)]
pub(crate) struct IndexState {
    /// `None` until the topic was looked up; then why it cannot be read, if it cannot.
    pub(crate) problem: Option<String>,
    pub(crate) opened: bool,
    /// Letters read (markers not counted).
    pub(crate) letters: u64,
    pub(crate) reasons: BTreeMap<String, u64>,
    pub(crate) sources: BTreeMap<String, u64>,
    pub(crate) markers: Markers,
    /// Per partition, the next offset to read.
    pub(crate) read_to: BTreeMap<i32, i64>,
    /// Per partition, the high watermark as last looked up.
    pub(crate) high: BTreeMap<i32, i64>,
    /// Per partition, the low watermark as last looked up.
    pub(crate) low: BTreeMap<i32, i64>,
}

impl IndexState {
    /// Whether every record up to the last looked-up end of each partition has been read.
    pub(crate) fn caught_up(&self) -> bool {
        self.opened
            && self
                .high
                .iter()
                .all(|(p, high)| self.read_to.get(p).copied().unwrap_or(0) >= *high)
    }

    /// The records the topic holds (letters and markers), as last looked up.
    pub(crate) fn records(&self) -> u64 {
        self.high
            .iter()
            .map(|(p, high)| {
                let low = self.low.get(p).copied().unwrap_or(0);
                u64::try_from(high - low).unwrap_or(0)
            })
            .sum()
    }

    /// The sum of the partitions' high watermarks: it grows by one per record written.
    pub(crate) fn end_total(&self) -> i64 {
        self.high.values().sum()
    }

    /// The letter's status, or `None` while the index has not read past where its marker would
    /// be, or when the topic is too fragmented to tell ([`Markers`]).
    pub(crate) fn status(&self, partition: i32, offset: i64) -> Option<LetterStatus> {
        if !self.caught_up() {
            return None;
        }
        self.markers.status(partition, offset)
    }

    fn count(map: &mut BTreeMap<String, u64>, key: String) {
        if map.len() < MAX_KEYS || map.contains_key(&key) {
            *map.entry(key).or_default() += 1;
        } else {
            *map.entry(OTHER.to_owned()).or_default() += 1;
        }
    }

    fn record(&mut self, message: &BorrowedMessage<'_>) {
        let (partition, offset) = (message.partition(), message.offset());
        self.read_to.insert(partition, offset + 1);
        match scan::marker(message) {
            Marker::Valid {
                offset: letter,
                kind,
            } => {
                // A marker that names no letter before it is ignored (and counted), as by
                // `dlq replay`.
                let _ = self.markers.marker(partition, offset, letter, kind);
            }
            Marker::None => {
                self.markers.letter(partition, offset);
                // The worker's letters and a Kafka 4.4 broker's alike (`replay::provenance`).
                let provenance = provenance::of_message(message);
                let reason = provenance.as_ref().map(Provenance::reason_shown);
                let source = provenance.and_then(|p| p.topic).map(|t| t.shown());
                self.letters += 1;
                Self::count(&mut self.reasons, reason.unwrap_or_else(|| "?".to_owned()));
                Self::count(&mut self.sources, source.unwrap_or_else(|| "?".to_owned()));
            }
            Marker::UnknownKind(_) | Marker::BadOffset(_) => {
                self.markers.no_letter(partition, offset);
            }
        }
    }
}

/// The index of one topic; dropping it stops its reader.
#[derive(Debug)]
pub(crate) struct DlqIndex {
    pub(crate) topic: String,
    state: Arc<Mutex<IndexState>>,
    stop: Arc<AtomicBool>,
}

impl DlqIndex {
    /// Starts reading `topic` on a thread of its own; watermarks are looked up every `every`.
    pub(crate) fn start(
        bootstrap: String,
        security: Security,
        client_id: String,
        topic: String,
        every: Duration,
    ) -> Self {
        let state = Arc::new(Mutex::new(IndexState::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let reader = Reader {
            bootstrap,
            security,
            client_id,
            topic: topic.clone(),
            every,
            state: state.clone(),
            stop: stop.clone(),
        };
        let spawned = std::thread::Builder::new()
            .name(format!("dlq-index-{topic}"))
            .spawn(move || reader.run());
        if let Err(err) = spawned {
            lock(&state).problem = Some(format!("cannot start its reader: {err}"));
        }
        Self { topic, state, stop }
    }

    /// Runs `f` on the state (briefly: the reader waits meanwhile).
    pub(crate) fn with<T>(&self, f: impl FnOnce(&IndexState) -> T) -> T {
        f(&lock(&self.state))
    }
}

impl Drop for DlqIndex {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn lock(state: &Mutex<IndexState>) -> std::sync::MutexGuard<'_, IndexState> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

struct Reader {
    bootstrap: String,
    security: Security,
    client_id: String,
    topic: String,
    every: Duration,
    state: Arc<Mutex<IndexState>>,
    stop: Arc<AtomicBool>,
}

impl Reader {
    fn run(self) {
        while !self.stop.load(Ordering::Relaxed) {
            if let Err(err) = self.follow() {
                lock(&self.state).problem = Some(format!("{err:#}"));
            }
            self.pause(self.every);
        }
    }

    fn pause(&self, total: Duration) {
        let until = Instant::now() + total;
        while !self.stop.load(Ordering::Relaxed) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Opens the topic and reads it until stopped; an error ends it (to be opened again).
    fn follow(&self) -> anyhow::Result<()> {
        let (consumer, context) =
            scan::reader(&self.bootstrap, &self.security, &self.client_id, false)?;
        let partitions = scan::partitions(&consumer, &context, &self.topic)?;
        let mut assignment = TopicPartitionList::new();
        {
            let state = lock(&self.state);
            for partition in &partitions {
                let from = state.read_to.get(partition).copied();
                let offset = from.map_or(Offset::Beginning, Offset::Offset);
                assignment.add_partition_offset(&self.topic, *partition, offset)?;
            }
        }
        consumer.assign(&assignment)?;
        self.watermarks(&consumer, &partitions)?;
        {
            let mut state = lock(&self.state);
            state.opened = true;
            state.problem = None;
        }
        let mut looked_up = Instant::now();
        while !self.stop.load(Ordering::Relaxed) {
            let flow = self.poll(&consumer);
            if flow.is_break() {
                return Ok(());
            }
            // `every` counts from the end of the last look-up: at the end of the topic a look-up
            // waits behind the reader's own long-polling fetch on the broker's connection, and a
            // look-up after every record would read a backlog one record per look-up.
            if looked_up.elapsed() >= self.every {
                self.watermarks(&consumer, &partitions)?;
                if scan::partitions_while_reading(&consumer, &self.topic)?.len() != partitions.len()
                {
                    anyhow::bail!("{}: its partitions changed; reading it again", self.topic);
                }
                looked_up = Instant::now();
            }
        }
        Ok(())
    }

    /// One poll; its record (if any) counted.
    fn poll(&self, consumer: &BaseConsumer<KafkaContext>) -> ControlFlow<()> {
        match consumer.poll(Duration::from_millis(200)) {
            None | Some(Err(KafkaError::PartitionEOF(_))) => {}
            Some(Err(err)) => tracing::debug!(error = %err, "dashboard: reading {}", self.topic),
            Some(Ok(message)) => lock(&self.state).record(&message),
        }
        ControlFlow::Continue(())
    }

    fn watermarks(
        &self,
        consumer: &BaseConsumer<KafkaContext>,
        partitions: &[i32],
    ) -> anyhow::Result<()> {
        let mut marks = HashMap::new();
        for partition in partitions {
            let (low, high) = consumer.fetch_watermarks(&self.topic, *partition, scan::REQUEST)?;
            marks.insert(*partition, (low, high));
        }
        let mut state = lock(&self.state);
        for (partition, (low, high)) in marks {
            state.low.insert(partition, low);
            state.high.insert(partition, high);
            // Records below the low watermark are gone: nothing to wait for there.
            let read = state.read_to.entry(partition).or_insert(low);
            *read = (*read).max(low);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_stop_growing_new_keys_at_the_cap() {
        let mut map = BTreeMap::new();
        for i in 0..MAX_KEYS + 10 {
            IndexState::count(&mut map, format!("reason-{i}"));
        }
        IndexState::count(&mut map, "reason-0".to_owned());
        assert_eq!(map.len(), MAX_KEYS + 1);
        assert_eq!(map[OTHER], 10);
        assert_eq!(map["reason-0"], 2);
    }

    #[test]
    fn a_letters_status_is_known_once_the_index_caught_up() {
        let mut state = IndexState {
            opened: true,
            ..IndexState::default()
        };
        state.high.insert(0, 10);
        state.read_to.insert(0, 4);
        assert_eq!(state.status(0, 2), None);
        state.read_to.insert(0, 10);
        assert_eq!(state.status(0, 2), Some(LetterStatus::Pending));
        assert_eq!(state.end_total(), 10);
    }
}
