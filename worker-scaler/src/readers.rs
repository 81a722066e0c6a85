//! One reader per target (a group and its topics), shared by every call and stream that asks for
//! it: however many scaled objects, streams and calls name a target, the cluster is read for it at
//! most once per [`Limits::every`](crate::Limits) while a stream follows it, and once per call
//! otherwise, never twice at the same time.
//!
//! Each read is bounded: when the cluster is slow or unreachable, the last value read is given
//! instead (flagged stale), so KEDA's calls never hang on the brokers; with no value yet, the
//! call fails. Memory is bounded too, whatever names clients send: at most
//! [`Limits::targets`](crate::Limits) readers, the groups found missing remembered a while in a
//! bounded list, and at most [`FIRST_READS`] first reads (lookups of targets never read) at once.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{Notify, Semaphore, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backlog::{Failure, Reading, Source};
use crate::metadata::Target;

/// How long a group found missing is answered `NOT_FOUND` without looking it up again.
pub(crate) const MISSING_FOR: Duration = Duration::from_secs(10);
/// The most groups remembered as missing; the oldest is forgotten first.
pub(crate) const MAX_MISSING: usize = 1_000;
/// The most first reads at once: a flood of new names waits here instead of flooding the cluster.
pub(crate) const FIRST_READS: usize = 16;
/// How long a reader no stream follows is kept after its last call.
const IDLE_AFTER: Duration = Duration::from_secs(60);
/// How long a call waits past the read bound for a read already under way.
const SLACK: Duration = Duration::from_millis(250);

/// What the readers may hold and how often they read.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bounds {
    /// How long a read may take before the last value is given.
    pub(crate) read: Duration,
    /// How often a followed target is read; a value read within it is given again.
    pub(crate) every: Duration,
    /// The most targets read at once.
    pub(crate) targets: usize,
}

/// The readers of every target asked for.
pub(crate) struct Readers {
    source: Arc<dyn Source>,
    bounds: Bounds,
    state: Mutex<State>,
    first_reads: Arc<Semaphore>,
    /// Fired when the server stops: every reader ends.
    stopping: CancellationToken,
    /// Reads done, for the log and the tests.
    reads: AtomicU64,
}

impl std::fmt::Debug for Readers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("Readers")
            .field("bounds", &self.bounds)
            .field("targets", &state.live.len())
            .field("missing", &state.missing.len())
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct State {
    live: HashMap<Target, Arc<Reader>>,
    missing: Missing,
}

/// Groups found missing, with why, oldest first.
#[derive(Default)]
struct Missing {
    why: HashMap<String, (String, Instant)>,
    order: VecDeque<(String, Instant)>,
}

impl Missing {
    fn len(&self) -> usize {
        self.why.len()
    }

    fn get(&mut self, group: &str) -> Option<String> {
        self.expire();
        self.why.get(group).map(|(why, _)| why.clone())
    }

    fn insert(&mut self, group: &str, why: String) {
        self.expire();
        while self.why.len() >= MAX_MISSING {
            let Some((oldest, at)) = self.order.pop_front() else {
                break;
            };
            if self.why.get(&oldest).is_some_and(|(_, a)| *a == at) {
                self.why.remove(&oldest);
            }
        }
        let now = Instant::now();
        self.why.insert(group.to_owned(), (why, now));
        self.order.push_back((group.to_owned(), now));
    }

    /// Forgets what was found missing longer than [`MISSING_FOR`] ago.
    fn expire(&mut self) {
        while let Some((group, at)) = self.order.front() {
            if at.elapsed() < MISSING_FOR {
                break;
            }
            if self.why.get(group).is_some_and(|(_, a)| a == at) {
                self.why.remove(group);
            }
            self.order.pop_front();
        }
    }
}

/// One target's reader: a task that reads the cluster and publishes what it read.
struct Reader {
    target: Target,
    latest: watch::Sender<Snapshot>,
    /// A call wants a read now.
    wanted: Notify,
    /// Streams following the target: while there are any, it is read every [`Bounds::every`].
    streams: AtomicUsize,
    /// A read is under way: a call waits for it rather than asking for another.
    reading: AtomicBool,
    /// When a call or stream last asked for it.
    touched: Mutex<Instant>,
    /// Ends the reader (forgotten, or the server stops).
    cancel: CancellationToken,
}

impl Reader {
    fn touch(&self) {
        *self.touched.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    fn idle(&self) -> bool {
        self.streams.load(Ordering::SeqCst) == 0
            && self
                .touched
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .elapsed()
                >= IDLE_AFTER
    }
}

/// What a reader last read.
#[derive(Clone, Debug, Default)]
struct Snapshot {
    /// Reads finished (0: none yet).
    reads: u64,
    /// When the latest read finished.
    read_at: Option<Instant>,
    /// The last value read, and when.
    last: Option<(i64, Instant)>,
    /// Why the latest read failed, when it did.
    failure: Option<Failure>,
}

impl Snapshot {
    fn fresh(&self, every: Duration) -> bool {
        self.read_at.is_some_and(|at| at.elapsed() < every)
    }

    fn reading(&self, group: &str) -> Result<Reading, Failure> {
        match (&self.failure, self.last) {
            (None, Some((records, _))) => Ok(Reading {
                records,
                stale_for: None,
            }),
            (Some(Failure::Unavailable(_)), Some((records, at))) => Ok(Reading {
                records,
                stale_for: Some(at.elapsed()),
            }),
            (Some(Failure::Unavailable(why)), None) => Err(Failure::Unavailable(format!(
                "share group {group}: {why}, and no backlog was read before"
            ))),
            (Some(failure), _) => Err(failure.clone()),
            (None, None) => Err(Failure::Unavailable(format!(
                "share group {group}: no backlog read yet"
            ))),
        }
    }
}

/// A call's or a stream's hold on a reader.
pub(crate) struct Follow {
    reader: Arc<Reader>,
    latest: watch::Receiver<Snapshot>,
    bounds: Bounds,
    /// Counted among the reader's streams (uncounted on drop).
    stream: bool,
}

impl Drop for Follow {
    fn drop(&mut self) {
        if self.stream {
            self.reader.streams.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Follow {
    /// The backlog now: the value read within the last [`Bounds::every`], or a read awaited
    /// (within the bound, then the last value).
    pub(crate) async fn now(&mut self) -> Result<Reading, Failure> {
        self.reader.touch();
        let seen = self.latest.borrow_and_update().clone();
        if seen.reads > 0 && seen.fresh(self.bounds.every) {
            return seen.reading(&self.reader.target.group);
        }
        if !self.reader.reading.load(Ordering::SeqCst) {
            self.reader.wanted.notify_one();
        }
        let waited = tokio::time::timeout(
            self.bounds.read + SLACK,
            self.latest.wait_for(|s| s.reads > seen.reads),
        )
        .await;
        let group = &self.reader.target.group;
        match waited {
            Ok(Ok(snapshot)) => snapshot.reading(group),
            Ok(Err(_)) => Err(Failure::Unavailable("the scaler is stopping".to_owned())),
            Err(_) if seen.reads > 0 => seen.reading(group),
            Err(_) => Err(Failure::Unavailable(format!(
                "share group {group}: no backlog read within {:?} (the cluster is slow, or the \
                 scaler is looking up many new groups at once)",
                self.bounds.read
            ))),
        }
    }

    /// The next value read (`None` once the reader ended).
    pub(crate) async fn next(&mut self) -> Option<Result<Reading, Failure>> {
        self.latest.changed().await.ok()?;
        self.reader.touch();
        let snapshot = self.latest.borrow_and_update().clone();
        Some(snapshot.reading(&self.reader.target.group))
    }
}

impl Readers {
    pub(crate) fn new(source: impl Source, bounds: Bounds, stopping: CancellationToken) -> Self {
        Self {
            source: Arc::new(source),
            bounds,
            state: Mutex::default(),
            first_reads: Arc::new(Semaphore::new(FIRST_READS)),
            stopping,
            reads: AtomicU64::new(0),
        }
    }

    /// Reads done since start.
    #[cfg(test)]
    pub(crate) fn reads(&self) -> u64 {
        self.reads.load(Ordering::SeqCst)
    }

    /// Targets read now, and groups remembered as missing.
    #[cfg(test)]
    pub(crate) fn held(&self) -> (usize, usize) {
        let state = self.lock();
        (state.live.len(), state.missing.len())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The backlog of `target` now.
    pub(crate) async fn read(self: &Arc<Self>, target: &Target) -> Result<Reading, Failure> {
        self.follow(target, false)?.now().await
    }

    /// A hold on `target`'s reader, started when there is none; counted as a stream (read every
    /// [`Bounds::every`] while held) when `stream`.
    pub(crate) fn follow(
        self: &Arc<Self>,
        target: &Target,
        stream: bool,
    ) -> Result<Follow, Failure> {
        let mut state = self.lock();
        if let Some(why) = state.missing.get(&target.group) {
            return Err(Failure::NoGroup(why));
        }
        let reader = match state.live.get(target) {
            Some(reader) => reader.clone(),
            None => {
                if state.live.len() >= self.bounds.targets {
                    self.make_room(&mut state)?;
                }
                let reader = Arc::new(Reader {
                    target: target.clone(),
                    latest: watch::Sender::new(Snapshot::default()),
                    wanted: Notify::new(),
                    streams: AtomicUsize::new(0),
                    reading: AtomicBool::new(true),
                    touched: Mutex::new(Instant::now()),
                    cancel: self.stopping.child_token(),
                });
                state.live.insert(target.clone(), reader.clone());
                tokio::spawn(self.clone().run(reader.clone()));
                reader
            }
        };
        if stream {
            reader.streams.fetch_add(1, Ordering::SeqCst);
        }
        Ok(Follow {
            latest: reader.latest.subscribe(),
            reader,
            bounds: self.bounds,
            stream,
        })
    }

    /// Ends the reader asked for least recently that nobody holds; none: the scaler is full.
    fn make_room(&self, state: &mut State) -> Result<(), Failure> {
        // Held only by the map and its task: no call waits on it and no stream follows it.
        let unheld = state
            .live
            .iter()
            .filter(|(_, reader)| Arc::strong_count(reader) <= 2)
            .min_by_key(|(_, reader)| *reader.touched.lock().unwrap_or_else(|e| e.into_inner()))
            .map(|(target, _)| target.clone());
        let Some(target) = unheld else {
            return Err(Failure::Exhausted(format!(
                "the scaler reads {} targets already, each followed by a stream or a call; \
                 try again later",
                state.live.len()
            )));
        };
        if let Some(reader) = state.live.remove(&target) {
            reader.cancel.cancel();
        }
        Ok(())
    }

    /// Forgets `reader` (when it is still the one for its target).
    fn forget(&self, reader: &Arc<Reader>) {
        let mut state = self.lock();
        if state
            .live
            .get(&reader.target)
            .is_some_and(|live| Arc::ptr_eq(live, reader))
        {
            state.live.remove(&reader.target);
        }
    }

    /// The reader's task: reads when a call wants it, or every [`Bounds::every`] while streams
    /// follow; ends when the target is gone, when nobody asked for [`IDLE_AFTER`], or when the
    /// server stops.
    async fn run(self: Arc<Self>, reader: Arc<Reader>) {
        let mut first = true;
        loop {
            let read = async {
                // A first read waits its turn, so new names cannot flood the cluster.
                let _turn = if first {
                    Some(self.first_reads.clone().acquire_owned().await)
                } else {
                    None
                };
                tracing::debug!(group = %reader.target.group, topics = ?reader.target.topics, "reading the backlog");
                self.reads.fetch_add(1, Ordering::SeqCst);
                match tokio::time::timeout(self.bounds.read, self.source.backlog(&reader.target))
                    .await
                {
                    Ok(outcome) => outcome,
                    Err(_) => Err(Failure::Unavailable(format!(
                        "the cluster did not answer within {:?}",
                        self.bounds.read
                    ))),
                }
            };
            let outcome = tokio::select! {
                () = reader.cancel.cancelled() => return,
                outcome = read => outcome,
            };
            first = false;
            let gone = match &outcome {
                Err(Failure::NoGroup(why)) => {
                    self.lock()
                        .missing
                        .insert(&reader.target.group, why.clone());
                    true
                }
                Err(Failure::NotFound(_) | Failure::Denied(_)) => true,
                Err(Failure::Unavailable(why)) => {
                    if let Some((records, _)) = reader.latest.borrow().last {
                        tracing::warn!(group = %reader.target.group, why, records, "giving the last backlog read");
                    }
                    false
                }
                _ => false,
            };
            if gone {
                // Forgotten first: a call that sees the failure and asks again starts afresh.
                self.forget(&reader);
            }
            reader.latest.send_modify(|snapshot| {
                let now = Instant::now();
                snapshot.reads += 1;
                snapshot.read_at = Some(now);
                match outcome {
                    Ok(records) => {
                        snapshot.last = Some((records, now));
                        snapshot.failure = None;
                    }
                    Err(failure) => snapshot.failure = Some(failure),
                }
            });
            reader.reading.store(false, Ordering::SeqCst);
            if gone {
                return;
            }
            // Wait for the next read: a call that wants one, or the interval while streams follow.
            loop {
                tokio::select! {
                    () = reader.cancel.cancelled() => return,
                    () = reader.wanted.notified() => {
                        reader.reading.store(true, Ordering::SeqCst);
                        break;
                    }
                    () = tokio::time::sleep(self.bounds.every) => {
                        if reader.streams.load(Ordering::SeqCst) > 0 {
                            reader.reading.store(true, Ordering::SeqCst);
                            break;
                        }
                        if reader.idle() {
                            let mut state = self.lock();
                            // Held by nobody else (checked under the lock that hands it out).
                            if Arc::strong_count(&reader) <= 2 && reader.idle() {
                                if state.live.get(&reader.target).is_some_and(|r| Arc::ptr_eq(r, &reader)) {
                                    state.live.remove(&reader.target);
                                }
                                return;
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicI64;

    use super::*;

    /// A source that answers `records` after `delay` (-1: the group is not found), counting
    /// reads per group.
    #[derive(Clone, Default)]
    struct Slow {
        records: Arc<AtomicI64>,
        delay: Arc<Mutex<Duration>>,
        per_group: Arc<Mutex<HashMap<String, u64>>>,
    }

    #[async_trait::async_trait]
    impl Source for Slow {
        async fn backlog(&self, target: &Target) -> Result<i64, Failure> {
            *self
                .per_group
                .lock()
                .unwrap()
                .entry(target.group.clone())
                .or_default() += 1;
            let delay = *self.delay.lock().unwrap();
            tokio::time::sleep(delay).await;
            if target.group.starts_with("missing-") {
                return Err(Failure::NoGroup(format!(
                    "share group {} not found",
                    target.group
                )));
            }
            match self.records.load(Ordering::SeqCst) {
                -1 => Err(Failure::NoGroup("no such group".to_owned())),
                n => Ok(n),
            }
        }
    }

    const BOUNDS: Bounds = Bounds {
        read: Duration::from_secs(3),
        every: Duration::from_secs(1),
        targets: 1_000,
    };

    fn target(group: &str) -> Target {
        Target {
            group: group.to_owned(),
            topics: vec!["t".to_owned()],
        }
    }

    fn readers(source: &Slow, bounds: Bounds) -> Arc<Readers> {
        Arc::new(Readers::new(
            source.clone(),
            bounds,
            CancellationToken::new(),
        ))
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_cluster_gets_the_last_value_flagged_within_the_bound() {
        let source = Slow::default();
        source.records.store(42, Ordering::SeqCst);
        *source.delay.lock().unwrap() = Duration::from_millis(10);
        let readers = readers(&source, BOUNDS);
        let fresh = readers.read(&target("g")).await.expect("read");
        assert_eq!(
            fresh,
            Reading {
                records: 42,
                stale_for: None
            }
        );
        // Read again at once: the same value, not asked again.
        source.records.store(8, Ordering::SeqCst);
        assert_eq!(readers.read(&target("g")).await.expect("read").records, 42);
        assert_eq!(readers.reads(), 1);
        tokio::time::advance(BOUNDS.every).await;
        // The cluster hangs: the answer comes at the bound, with the last value.
        *source.delay.lock().unwrap() = Duration::from_secs(3600);
        let started = Instant::now();
        let stale = readers.read(&target("g")).await.expect("the last value");
        assert_eq!(stale.records, 42);
        assert!(stale.stale_for.is_some());
        assert!(
            started.elapsed() >= BOUNDS.read && started.elapsed() <= BOUNDS.read + SLACK,
            "within the bound: {:?}",
            started.elapsed()
        );
        // Another target, never read: no value to give.
        assert!(matches!(
            readers.read(&target("h")).await,
            Err(Failure::Unavailable(why)) if why.contains("no backlog was read before")
        ));
        // A group that is gone is said so, not hidden behind the last value.
        *source.delay.lock().unwrap() = Duration::ZERO;
        source.records.store(-1, Ordering::SeqCst);
        tokio::time::advance(BOUNDS.every).await;
        assert!(matches!(
            readers.read(&target("g")).await,
            Err(Failure::NoGroup(_))
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_thousand_streams_over_ten_groups_read_each_group_once_per_interval() {
        let source = Slow::default();
        source.records.store(5, Ordering::SeqCst);
        *source.delay.lock().unwrap() = Duration::from_millis(20);
        let readers = readers(&source, BOUNDS);
        let mut streams = Vec::new();
        for i in 0..1_000 {
            let mut follow = readers
                .follow(&target(&format!("g{}", i % 10)), true)
                .expect("follow");
            follow.now().await.expect("first answer");
            streams.push(follow);
        }
        let before: HashMap<String, u64> = source.per_group.lock().unwrap().clone();
        assert!(before.values().all(|n| *n <= 2), "{before:?}");
        // Calls between the stream reads cost nothing more.
        let interval = 10;
        for _ in 0..interval {
            tokio::time::sleep(BOUNDS.every).await;
            for g in 0..10 {
                readers.read(&target(&format!("g{g}"))).await.expect("read");
            }
        }
        let after = source.per_group.lock().unwrap().clone();
        for g in 0..10 {
            let group = format!("g{g}");
            let reads = after[&group] - before[&group];
            assert!(
                (interval - 1..=interval + 1).contains(&reads),
                "{group}: {reads} reads in {interval} intervals"
            );
        }
        assert_eq!(readers.held(), (10, 0));
        // The streams end: the readers stop reading once idle.
        drop(streams);
        tokio::time::sleep(IDLE_AFTER + BOUNDS.every * 3).await;
        assert_eq!(readers.held().0, 0, "idle readers end");
    }

    #[tokio::test(start_paused = true)]
    async fn random_group_names_stay_bounded_and_are_not_looked_up_twice() {
        let source = Slow::default();
        *source.delay.lock().unwrap() = Duration::from_millis(1);
        let readers = readers(
            &source,
            Bounds {
                targets: 100,
                ..BOUNDS
            },
        );
        for i in 0..10_000 {
            let err = readers
                .read(&target(&format!("missing-{i}")))
                .await
                .expect_err("unknown");
            assert!(
                matches!(&err, Failure::NoGroup(why) if why.contains(&format!("missing-{i} not found"))),
                "{err:?}"
            );
            let (live, missing) = readers.held();
            assert!(live <= 100 && missing <= MAX_MISSING, "{live} {missing}");
        }
        // Asked again at once: answered from memory, no lookup.
        let looked_up = readers.reads();
        assert!(readers.read(&target("missing-9999")).await.is_err());
        assert_eq!(readers.reads(), looked_up);
        // Remembered a while only.
        tokio::time::advance(MISSING_FOR).await;
        assert!(readers.read(&target("missing-9999")).await.is_err());
        assert_eq!(readers.reads(), looked_up + 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_scaler_refuses_new_targets_while_every_one_is_followed() {
        let source = Slow::default();
        let readers = readers(
            &source,
            Bounds {
                targets: 3,
                ..BOUNDS
            },
        );
        let mut streams = Vec::new();
        for g in 0..3 {
            streams.push(
                readers
                    .follow(&target(&format!("g{g}")), true)
                    .expect("room"),
            );
        }
        assert!(matches!(
            readers.read(&target("g3")).await,
            Err(Failure::Exhausted(why)) if why.contains("3 targets")
        ));
        // One stream ends: its reader makes room.
        streams.pop();
        readers.read(&target("g3")).await.expect("room again");
    }
}
