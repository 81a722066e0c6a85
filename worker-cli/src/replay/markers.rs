//! Which letters of a dead-letter topic are done, as its marker records say, in bounded memory.
//!
//! A reader goes through each partition in offset order and tells [`Markers`] what every record
//! is: a letter, a marker naming an earlier letter, or anything else. Offsets are kept as runs
//! of one state (a pending letter, a letter replayed or skipped, a record that is no letter), so
//! a topic whose letters were replayed in batches takes a handful of runs however many markers it
//! holds. A marker counts only when it names a letter that this reader saw: markers naming
//! markers, offsets below the reader's start or offsets never written are ignored and counted, so
//! nobody who can write to the topic inflates the done counts or the memory with them.
//!
//! The runs are bounded by [`MAX_RUNS`] for the whole topic (a few MiB). A topic fragmented past
//! it (letters and markers interleaved hundreds of thousands of times: only a writer set on it
//! does that) stops being tracked: from then on every status is unknown, and callers say so
//! rather than guess (a replay refuses to run, the dashboard shows no status).

use std::collections::{BTreeMap, HashMap};

use worker_core::dlq::headers::MarkerKind;

use super::scan::LetterStatus;

/// The most runs kept for one topic, over all its partitions.
pub(crate) const MAX_RUNS: usize = 100_000;

/// What one offset holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Letter(LetterStatus),
    /// A marker, or a record that is neither a letter nor a valid marker.
    NoLetter,
}

/// Why a marker did not count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ignored {
    /// It names an offset that is not a letter this reader saw.
    NoSuchLetter,
    /// The topic is fragmented past [`MAX_RUNS`]: nothing more is tracked.
    Overflowed,
}

/// One partition's runs: start offset → (end offset, exclusive; state). Runs never overlap.
#[derive(Debug, Default)]
struct Runs(BTreeMap<i64, (i64, State)>);

impl Runs {
    /// The run holding `offset`: its start, end and state.
    fn find(&self, offset: i64) -> Option<(i64, i64, State)> {
        let (&start, &(end, state)) = self.0.range(..=offset).next_back()?;
        (offset < end).then_some((start, end, state))
    }

    /// Appends `offset` (past every offset seen) with `state`; the change in the number of runs.
    fn append(&mut self, offset: i64, state: State) -> isize {
        if let Some((_, (end, last))) = self.0.iter_mut().next_back()
            && *end == offset
            && *last == state
        {
            *end += 1;
            return 0;
        }
        self.0.insert(offset, (offset + 1, state));
        1
    }

    /// Sets the state of the single offset `offset` inside the run `start..end`, splitting it and
    /// merging with equal neighbours; the change in the number of runs.
    fn set(&mut self, offset: i64, (start, end, old): (i64, i64, State), state: State) -> isize {
        let before = self.0.len();
        self.0.remove(&start);
        if start < offset {
            self.0.insert(start, (offset, old));
        }
        if offset + 1 < end {
            self.0.insert(offset + 1, (end, old));
        }
        let (mut from, mut to) = (offset, offset + 1);
        if let Some((&prev, &(prev_end, prev_state))) = self.0.range(..offset).next_back()
            && prev_end == offset
            && prev_state == state
        {
            self.0.remove(&prev);
            from = prev;
        }
        if let Some(&(next_end, next_state)) = self.0.get(&to)
            && next_state == state
        {
            self.0.remove(&to);
            to = next_end;
        }
        self.0.insert(from, (to, state));
        self.0.len() as isize - before as isize
    }
}

/// The done letters of one topic (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Markers {
    partitions: HashMap<i32, Runs>,
    runs: usize,
    replayed: u64,
    skipped: u64,
    ignored: u64,
    overflowed: bool,
}

impl Markers {
    /// The record at `partition`/`offset` is a letter.
    pub(crate) fn letter(&mut self, partition: i32, offset: i64) {
        self.append(partition, offset, State::Letter(LetterStatus::Pending));
    }

    /// The record at `partition`/`offset` is no letter (a marker that names none, say).
    pub(crate) fn no_letter(&mut self, partition: i32, offset: i64) {
        self.append(partition, offset, State::NoLetter);
    }

    /// The record at `partition`/`offset` is a marker saying the letter at `letter` is done as
    /// `kind`. A letter marked both replayed and skipped counts as replayed: it was republished.
    pub(crate) fn marker(
        &mut self,
        partition: i32,
        offset: i64,
        letter: i64,
        kind: MarkerKind,
    ) -> Result<(), Ignored> {
        self.no_letter(partition, offset);
        let marked = self.mark(partition, letter, kind);
        if marked.is_err() {
            self.ignored += 1;
        }
        marked
    }

    fn mark(&mut self, partition: i32, letter: i64, kind: MarkerKind) -> Result<(), Ignored> {
        if self.overflowed {
            return Err(Ignored::Overflowed);
        }
        let runs = self.partitions.entry(partition).or_default();
        let Some(run @ (_, _, State::Letter(status))) = runs.find(letter) else {
            return Err(Ignored::NoSuchLetter);
        };
        match (status, kind) {
            (LetterStatus::Done(MarkerKind::Replayed), _) => return Ok(()),
            (LetterStatus::Done(_), MarkerKind::Replayed) => self.skipped -= 1,
            (LetterStatus::Done(_), _) => return Ok(()),
            (LetterStatus::Pending, _) => {}
        }
        match kind {
            MarkerKind::Replayed => self.replayed += 1,
            _ => self.skipped += 1,
        }
        let change = runs.set(letter, run, State::Letter(LetterStatus::Done(kind)));
        self.grow(change);
        Ok(())
    }

    fn append(&mut self, partition: i32, offset: i64, state: State) {
        if self.overflowed {
            return;
        }
        let change = self
            .partitions
            .entry(partition)
            .or_default()
            .append(offset, state);
        self.grow(change);
    }

    fn grow(&mut self, change: isize) {
        self.runs = self.runs.saturating_add_signed(change);
        if self.runs > MAX_RUNS {
            self.overflowed = true;
            self.partitions = HashMap::new();
            self.runs = 0;
        }
    }

    /// The status of the letter at `partition`/`offset`; `None` once the topic is fragmented past
    /// [`MAX_RUNS`] (unknown). An offset this reader did not see as a letter is pending.
    pub(crate) fn status(&self, partition: i32, offset: i64) -> Option<LetterStatus> {
        if self.overflowed {
            return None;
        }
        let status = self
            .partitions
            .get(&partition)
            .and_then(|runs| runs.find(offset))
            .and_then(|(_, _, state)| match state {
                State::Letter(status) => Some(status),
                State::NoLetter => None,
            });
        Some(status.unwrap_or(LetterStatus::Pending))
    }

    /// How many letters are marked replayed, and how many skipped.
    pub(crate) fn done(&self) -> (u64, u64) {
        (self.replayed, self.skipped)
    }

    /// How many markers did not count (see [`Ignored`]).
    pub(crate) fn ignored(&self) -> u64 {
        self.ignored
    }

    /// Whether the topic is fragmented past [`MAX_RUNS`], so statuses are unknown.
    pub(crate) fn overflowed(&self) -> bool {
        self.overflowed
    }

    /// How many runs are kept.
    #[cfg(test)]
    fn runs(&self) -> usize {
        self.runs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPLAYED: MarkerKind = MarkerKind::Replayed;
    const SKIPPED: MarkerKind = MarkerKind::Skipped;
    const PENDING: Option<LetterStatus> = Some(LetterStatus::Pending);

    fn done(kind: MarkerKind) -> Option<LetterStatus> {
        Some(LetterStatus::Done(kind))
    }

    #[test]
    fn a_replayed_marker_wins() {
        let mut markers = Markers::default();
        markers.letter(0, 5);
        markers.letter(1, 5);
        assert_eq!(markers.marker(0, 6, 5, REPLAYED), Ok(()));
        assert_eq!(markers.marker(0, 7, 5, SKIPPED), Ok(()));
        assert_eq!(markers.marker(1, 6, 5, SKIPPED), Ok(()));
        assert_eq!(markers.status(0, 5), done(REPLAYED));
        assert_eq!(markers.status(1, 5), done(SKIPPED));
        assert_eq!(markers.done(), (1, 1));
        assert_eq!(markers.marker(1, 7, 5, REPLAYED), Ok(()));
        assert_eq!(markers.status(1, 5), done(REPLAYED));
        assert_eq!(markers.done(), (2, 0));
        assert_eq!(markers.status(1, 8), PENDING);
    }

    #[test]
    fn only_markers_that_name_a_letter_count() {
        let mut markers = Markers::default();
        markers.letter(0, 10);
        // A marker naming a marker, one naming an offset before the reader's start, one naming
        // a letter of another partition.
        assert_eq!(markers.marker(0, 11, 10, REPLAYED), Ok(()));
        assert_eq!(
            markers.marker(0, 12, 11, REPLAYED),
            Err(Ignored::NoSuchLetter)
        );
        assert_eq!(
            markers.marker(0, 13, 3, SKIPPED),
            Err(Ignored::NoSuchLetter)
        );
        assert_eq!(
            markers.marker(1, 0, 10, SKIPPED),
            Err(Ignored::NoSuchLetter)
        );
        assert_eq!(markers.done(), (1, 0));
        assert_eq!(markers.ignored(), 3);
    }

    /// A million markers for a million letters replayed in batches take a few runs.
    #[test]
    fn batches_of_markers_take_a_few_runs() {
        let mut markers = Markers::default();
        let mut offset = 0;
        for _ in 0..10 {
            let first = offset;
            for _ in 0..100_000 {
                markers.letter(0, offset);
                offset += 1;
            }
            let last = offset;
            for letter in first..last {
                assert_eq!(markers.marker(0, offset, letter, REPLAYED), Ok(()));
                offset += 1;
            }
        }
        assert_eq!(markers.done(), (1_000_000, 0));
        assert!(markers.runs() <= 20, "{}", markers.runs());
        assert_eq!(markers.status(0, 0), done(REPLAYED));
        assert_eq!(markers.status(0, offset), PENDING);
    }

    /// Letters marked every other one, interleaved with their markers: the runs grow until the
    /// bound, then statuses are unknown and nothing more is kept.
    #[test]
    fn a_fragmented_topic_stays_within_the_bound() {
        let mut markers = Markers::default();
        let mut offset = 0;
        while !markers.overflowed() {
            markers.letter(0, offset);
            markers.letter(0, offset + 1);
            let _ = markers.marker(0, offset + 2, offset, SKIPPED);
            offset += 3;
            assert!(markers.runs() <= MAX_RUNS);
        }
        assert_eq!(markers.status(0, 0), None);
        assert_eq!(
            markers.marker(0, offset, 1, SKIPPED),
            Err(Ignored::Overflowed)
        );
        assert_eq!(markers.runs(), 0);
    }

    #[test]
    fn marking_splits_and_merges_runs() {
        let mut markers = Markers::default();
        for offset in 0..5 {
            markers.letter(0, offset);
        }
        assert_eq!(markers.runs(), 1);
        markers.marker(0, 5, 2, SKIPPED).unwrap();
        // pending 0..2, skipped 2, pending 3..5, marker 5
        assert_eq!(markers.runs(), 4);
        markers.marker(0, 6, 1, SKIPPED).unwrap();
        markers.marker(0, 7, 3, SKIPPED).unwrap();
        // pending 0, skipped 1..4, pending 4, markers 5..8
        assert_eq!(markers.runs(), 4);
        assert_eq!(
            (0..5).map(|o| markers.status(0, o)).collect::<Vec<_>>(),
            [
                PENDING,
                done(SKIPPED),
                done(SKIPPED),
                done(SKIPPED),
                PENDING
            ]
        );
    }
}
