//! Presence on the control topic: the task that writes this worker's heartbeats, and the reader
//! side that feeds every presence record to the [`Ledger`] (see the [module docs](super)).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::Notify;

use super::ledger::{Ledger, Read, Timing};
use super::{Fleet, FleetSender, Lease};
use crate::control::Writer;

/// The least time between two heartbeats written early, to acknowledge a newcomer: junk joins
/// cannot make a worker write more than this allows.
const MIN_ACK_GAP: Duration = Duration::from_millis(50);
/// How often an owed acknowledgement looks again whether the dispatcher has applied the counts.
const ACK_POLL: Duration = Duration::from_millis(5);
/// How long leaving waits for its records to be written.
const LEAVE_TIMEOUT: Duration = Duration::from_secs(5);

/// What the control topic's reader hands presence records to. Cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct MemberReader {
    ledger: Arc<Mutex<Ledger>>,
    changed: Arc<Notify>,
    refused: Arc<AtomicU64>,
    forget: Duration,
}

impl MemberReader {
    /// Reads the presence record at `at` (`topic@offset`, for the logs), written at `timestamp`
    /// (milliseconds since the epoch, when the record has one).
    pub(crate) fn read(
        &self,
        offset: i64,
        key: &[u8],
        value: Option<&[u8]>,
        timestamp: Option<i64>,
        at: &str,
    ) {
        let stale = timestamp
            .and_then(|ms| u64::try_from(ms).ok())
            .and_then(|ms| SystemTime::UNIX_EPOCH.checked_add(Duration::from_millis(ms)))
            .and_then(|written| SystemTime::now().duration_since(written).ok())
            .is_some_and(|age| age >= self.forget);
        let read = lock(&self.ledger).read(offset, key, value, stale, Instant::now());
        match read {
            Read::Counted => {}
            Read::Forged => tracing::warn!(
                at,
                "control: a presence record under this worker's own key that it did not write; it joins the fleet again"
            ),
            Read::Refused(why) => {
                // One warning per power of two: junk cannot flood the log.
                let n = self.refused.fetch_add(1, Ordering::Relaxed) + 1;
                if n.is_power_of_two() {
                    tracing::warn!(at, why = %crate::checks::one_line(&why, 256), refused = n, "control: presence record refused");
                }
            }
        }
        self.changed.notify_one();
    }
}

/// This worker's presence: heartbeats written until [`leave`](Self::leave).
#[derive(Debug)]
pub(crate) struct Presence {
    ledger: Arc<Mutex<Ledger>>,
    stop: Arc<Notify>,
    task: Option<tokio::task::JoinHandle<()>>,
}

/// A new presence for worker `me`: its reader, to feed before [`Presence::start`].
pub(crate) fn new(me: &str) -> (MemberReader, PresenceParts) {
    let nonce = format!("{:016x}", rand::random::<u64>());
    let lease = Arc::new(Lease::fenced());
    let timing = Timing::default();
    let ledger = Arc::new(Mutex::new(Ledger::new(me, nonce, timing, lease.clone())));
    let changed = Arc::new(Notify::new());
    (
        MemberReader {
            ledger: ledger.clone(),
            changed: changed.clone(),
            refused: Arc::new(AtomicU64::new(0)),
            forget: timing.forget,
        },
        PresenceParts {
            ledger,
            changed,
            lease,
        },
    )
}

/// What [`Presence::start`] needs.
#[derive(Debug)]
pub(crate) struct PresenceParts {
    ledger: Arc<Mutex<Ledger>>,
    changed: Arc<Notify>,
    lease: Arc<Lease>,
}

impl Presence {
    /// Starts writing heartbeats through `writer`; the fleet it returns takes its counts from
    /// the ledger. Needs a tokio runtime.
    pub(crate) fn start(parts: PresenceParts, writer: Writer) -> (Self, Fleet) {
        let view = lock(&parts.ledger).view();
        let (fleet, sender) = Fleet::with_lease(view, parts.lease);
        let stop = Arc::new(Notify::new());
        let task = tokio::spawn(beat(
            parts.ledger.clone(),
            parts.changed,
            sender,
            fleet.demand(),
            writer,
            stop.clone(),
        ));
        (
            Self {
                ledger: parts.ledger,
                stop,
                task: Some(task),
            },
            fleet,
        )
    }

    /// Stops starting rate-limited records at once, says so on the control topic (the others
    /// take this worker's share as soon as they read it), and tombstones this worker's key.
    pub(crate) async fn leave(mut self) {
        lock(&self.ledger).leave();
        self.stop.notify_one();
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(LEAVE_TIMEOUT * 2, task).await;
        }
    }
}

impl Drop for Presence {
    fn drop(&mut self) {
        lock(&self.ledger).leave();
        self.stop.notify_one();
    }
}

fn lock(ledger: &Mutex<Ledger>) -> std::sync::MutexGuard<'_, Ledger> {
    ledger.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Writes one record; a failure is logged at debug level (the lease lapsing says what matters).
fn write(writer: &Writer, key: String, value: Option<Vec<u8>>) -> crate::control::Written {
    (writer.0)(key, value)
}

/// The heartbeat loop.
async fn beat(
    ledger: Arc<Mutex<Ledger>>,
    changed: Arc<Notify>,
    sender: FleetSender,
    demand: Arc<super::Demand>,
    writer: Writer,
    stop: Arc<Notify>,
) {
    let heartbeat = lock(&ledger).timing().heartbeat;
    let mut next = tokio::time::Instant::now();
    let mut last_beat: Option<tokio::time::Instant> = None;
    let mut published = lock(&ledger).version();
    let mut said_fenced = false;
    loop {
        let owes = {
            let ledger = lock(&ledger);
            ledger.owes_ack() || ledger.version() != published
        };
        let mut wake = if owes {
            next.min(tokio::time::Instant::now() + ACK_POLL)
        } else {
            next
        };
        // A claim the dispatcher stops renewing is given up when it lapses, not a heartbeat later.
        if let (_, Some(lapses)) = demand.wanted(Instant::now()) {
            wake = wake.min(tokio::time::Instant::from_std(lapses));
        }
        tokio::select! {
            () = tokio::time::sleep_until(wake) => {}
            () = changed.notified() => {}
            () = demand.grew.notified() => {}
            () = stop.notified() => break,
            () = sender.closed() => break,
        }
        let now = tokio::time::Instant::now();
        let (beat, forget) = {
            let mut ledger = lock(&ledger);
            ledger.tick(now.into_std());
            // A change of claims is said at once: the sooner the others acknowledge a new one,
            // the sooner this worker takes its share; the sooner they read one given up, the
            // sooner they take it.
            let (wanted, _) = demand.wanted(now.into_std());
            let claims_changed = ledger.want(&wanted, now.into_std());
            if ledger.version() != published {
                published = ledger.version();
                sender.set(ledger.view());
            }
            let early = claims_changed
                || ledger.owes_ack()
                    && last_beat.is_none_or(|at| now.duration_since(at) >= MIN_ACK_GAP);
            let beat = (now >= next || early).then(|| ledger.heartbeat(now.into_std()));
            (beat, ledger.forgotten(now.into_std()))
        };
        let beat_written = beat.is_some();
        if let Some((key, value)) = beat {
            last_beat = Some(now);
            next = now + heartbeat;
            let written = write(&writer, key, Some(value));
            tokio::spawn(async move {
                if let Err(why) = written.await {
                    tracing::debug!(why, "presence heartbeat not written");
                }
            });
        }
        for key in forget {
            let written = write(&writer, key, None);
            tokio::spawn(async move {
                let _ = written.await;
            });
        }
        let lease_holds = {
            let ledger = lock(&ledger);
            if beat_written && let Some(why) = ledger.waiting_for(now.into_std()) {
                tracing::debug!(why, "fleet: a claimed rate is not admitted yet");
            }
            ledger.lease_holds(now.into_std())
        };
        if lease_holds == said_fenced {
            said_fenced = !lease_holds;
            if lease_holds {
                tracing::info!("fleet: this worker takes its share of the rates");
            } else {
                tracing::info!(
                    "fleet: this worker waits for the fleet to count it before it takes a share of the rates"
                );
            }
        }
    }
    // Leaving: fenced already; the others read the leave and take the share, then the key goes.
    let (key, value) = {
        let mut ledger = lock(&ledger);
        ledger.leave();
        ledger.heartbeat(tokio::time::Instant::now().into_std())
    };
    let left = async {
        if let Err(why) = write(&writer, key.clone(), Some(value)).await {
            tracing::warn!(
                why,
                "fleet: the leave was not written; the others take this worker's share once its lease ends"
            );
            return;
        }
        let _ = write(&writer, key, None).await;
    };
    if tokio::time::timeout(LEAVE_TIMEOUT, left).await.is_err() {
        tracing::warn!(
            "fleet: the leave was not written in time; the others take this worker's share once its lease ends"
        );
    }
}
