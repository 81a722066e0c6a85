//! The fleet: how many workers of the share group take a share of each rate, so that a rate
//! written for the whole group holds for the whole group, in every window, while workers join,
//! leave and die.
//!
//! A route's `rate` (and the worker-wide one, and a route's `rate-per-key` for each key) is the
//! group's total: each worker takes `rate / n` and `burst / n` (rounded down, at least 1), where
//! `n` counts the workers that take a share of that rate. How `n` is known decides what holds:
//!
//! - **Presence on the control topic** (`presence`, with `[control]`): exact. Each worker
//!   writes a heartbeat record under `member/{worker id}` every second and reads everyone's in
//!   the topic's single, totally ordered log. A newcomer is counted by the others from its first
//!   heartbeat on, and starts no rate-limited record until every member that was there before it
//!   has written a heartbeat acknowledging it (a `seen` offset past its first heartbeat, written
//!   only once that member's limiters run at the smaller share). A worker starts rate-limited
//!   records only while its lease holds: its own heartbeat read back within 1 s of writing it
//!   keeps the lease for 3 s. The others drop a silent member only once they read back a
//!   heartbeat of their own written 4 s (lease + read-back bound) after they last heard it, so
//!   a member is dropped only after its lease ended, even if it was only stopped or cut off.
//!   Hence at every instant the shares of the workers that may start add up to at most the
//!   rate, and the bursts to at most the burst: any 1-second window sees at most
//!   `rate + burst`. See `docs/control.md` for the whole argument and the timings.
//! - **The described membership** ([`Fleet::follow`], without a control topic): approximate.
//!   The group's members are read every [`FLEET_REFRESH`](crate::defaults::FLEET_REFRESH); a
//!   worker takes no share for its first two reads (so the others have counted it), but a
//!   worker whose reads fail keeps its last share, and a crashed member holds its share until
//!   the coordinator drops it (the group's session timeout).
//! - [`Fleet::manual`]: what an application that knows its replicas sets.

// Without rdkafka nothing reads the control topic: the ledger and most of the record go unused.
#[cfg_attr(not(feature = "rdkafka"), allow(dead_code))]
pub(crate) mod ledger;
#[cfg_attr(not(feature = "rdkafka"), allow(dead_code))]
pub(crate) mod member;
#[cfg(feature = "rdkafka")]
pub(crate) mod presence;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::kafka::Admin;
use crate::{Error, Result};

/// How long a worker keeps claiming a rate after its last record waiting for it: a worker
/// between two fetches keeps its share. Short, since the others run at the smaller share for
/// this long after the worker ran dry (while work waits, that much of its share goes unused).
const DEMAND_LINGER: Duration = Duration::from_millis(250);

/// How many workers take a share of each rate.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FleetView {
    assigned: u32,
    by_topic: BTreeMap<String, u32>,
    /// Grows with each change: what the dispatcher reports back as applied.
    version: u64,
}

impl FleetView {
    /// The view of members given as their assignments, (topic, partition) pairs each: a member
    /// takes a share of the rates of the topics it is assigned, and of the worker-wide rate if
    /// it is assigned anything.
    pub fn from_assignments<'a, M, A>(members: M) -> Self
    where
        M: IntoIterator<Item = A>,
        A: IntoIterator<Item = &'a (String, i32)>,
    {
        let mut view = Self::default();
        for assignment in members {
            let mut topics: Vec<&str> = assignment.into_iter().map(|(t, _)| t.as_str()).collect();
            if topics.is_empty() {
                continue;
            }
            topics.sort_unstable();
            topics.dedup();
            view.assigned += 1;
            for topic in topics {
                *view.by_topic.entry(topic.to_owned()).or_default() += 1;
            }
        }
        view
    }

    /// A view of `n` workers claiming each rate (a route topic, `{topic}/{partition}` for a
    /// partition's per-key rate).
    #[cfg(test)]
    pub(crate) fn of_claims<'a>(claims: impl IntoIterator<Item = (&'a str, u32)>) -> Self {
        Self {
            by_topic: claims
                .into_iter()
                .map(|(claim, n)| (claim.to_owned(), n))
                .collect(),
            ..Self::default()
        }
    }

    /// How many workers share `topic`'s rate (`None`: the worker-wide rate); at least 1.
    pub fn sharing(&self, topic: Option<&str>) -> u32 {
        let n = match topic {
            Some(topic) => self.by_topic.get(topic).copied().unwrap_or(0),
            None => self.assigned,
        };
        n.max(1)
    }

    /// The version of the counts (presence: grows with each change).
    pub(crate) fn version(&self) -> u64 {
        self.version
    }

    fn same_counts(&self, other: &Self) -> bool {
        self.assigned == other.assigned && self.by_topic == other.by_topic
    }
}

/// Whether a worker may start records that need a share of a rate now: for every rate, never
/// (fenced), or until an instant (a presence lease) for the rates the fleet has acknowledged
/// this worker's claim of. Read by the dispatcher before each such start.
#[derive(Debug)]
pub(crate) struct Lease {
    base: Instant,
    /// Nanoseconds after `base` the lease holds until; 0: fenced; `u64::MAX`: always, for
    /// every rate.
    until: AtomicU64,
    /// The version of the view the dispatcher must run at (or past) to start: the last one in
    /// which a count grew (a smaller share must be taken up before the next start).
    needs: AtomicU64,
    /// The rates whose claims the fleet has acknowledged (with a lease that is not `always`).
    rates: std::sync::Mutex<std::collections::BTreeSet<String>>,
}

#[cfg_attr(not(feature = "rdkafka"), allow(dead_code))]
impl Lease {
    const FENCED: u64 = 0;
    const ALWAYS: u64 = u64::MAX;

    fn new(until: u64) -> Self {
        Self {
            base: Instant::now(),
            until: AtomicU64::new(until),
            needs: AtomicU64::new(0),
            rates: std::sync::Mutex::default(),
        }
    }

    pub(crate) fn always() -> Self {
        Self::new(Self::ALWAYS)
    }

    pub(crate) fn fenced() -> Self {
        Self::new(Self::FENCED)
    }

    fn rates(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeSet<String>> {
        self.rates
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn fence(&self) {
        self.until.store(Self::FENCED, Ordering::SeqCst);
    }

    pub(crate) fn hold_always(&self) {
        self.until.store(Self::ALWAYS, Ordering::SeqCst);
    }

    /// The lease holds until `until` for `rates` (and no other).
    pub(crate) fn hold_until(&self, until: Instant, rates: std::collections::BTreeSet<String>) {
        *self.rates() = rates;
        let nanos = until.saturating_duration_since(self.base).as_nanos();
        let nanos = u64::try_from(nanos).unwrap_or(Self::ALWAYS - 1).max(1);
        self.until.store(nanos, Ordering::SeqCst);
    }

    /// Takes `rate` out of the lease at once (this worker gives up its claim).
    pub(crate) fn drop_rate(&self, rate: &str) {
        self.rates().remove(rate);
    }

    /// The dispatcher must run at `version` of the view (or later) before it starts again.
    pub(crate) fn require_version(&self, version: u64) {
        self.needs.fetch_max(version, Ordering::SeqCst);
    }

    /// Whether a dispatcher running at version `applied` of the view may start a record that
    /// needs a share of `rate` at `now`.
    pub(crate) fn holds_for(&self, rate: &str, now: Instant, applied: u64) -> bool {
        if applied < self.needs.load(Ordering::SeqCst) {
            return false;
        }
        match self.until.load(Ordering::SeqCst) {
            Self::FENCED => false,
            Self::ALWAYS => true,
            until => {
                now.saturating_duration_since(self.base) < Duration::from_nanos(until)
                    && self.rates().contains(rate)
            }
        }
    }

    /// Whether the lease holds at `now` (for some rate).
    pub(crate) fn holds(&self, now: Instant) -> bool {
        match self.until.load(Ordering::SeqCst) {
            Self::FENCED => false,
            Self::ALWAYS => true,
            until => now.saturating_duration_since(self.base) < Duration::from_nanos(until),
        }
    }
}

/// Which rates this worker has records waiting for, and until when it expects to look again:
/// what its presence claims a share of. A worker without such records claims no share, so the
/// members that have work take the whole rate.
#[derive(Debug, Default)]
pub(crate) struct Demand {
    wanted: std::sync::Mutex<BTreeMap<String, Instant>>,
    /// Wakes the presence when a rate is wanted that was not.
    pub(crate) grew: tokio::sync::Notify,
}

#[cfg_attr(not(feature = "rdkafka"), allow(dead_code))]
impl Demand {
    /// Records wait for `rate`; the next look is due by `until`.
    pub(crate) fn want(&self, rate: &str, until: Instant) {
        let mut wanted = self
            .wanted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match wanted.get_mut(rate) {
            Some(at) => *at = (*at).max(until),
            None => {
                wanted.insert(rate.to_owned(), until);
                drop(wanted);
                self.grew.notify_one();
            }
        }
    }

    /// The rates wanted at `now` (the others are forgotten), and when the first of them stops
    /// being wanted unless asked for again.
    pub(crate) fn wanted(
        &self,
        now: Instant,
    ) -> (std::collections::BTreeSet<String>, Option<Instant>) {
        let mut wanted = self
            .wanted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        wanted.retain(|_, until| *until > now);
        (
            wanted.keys().cloned().collect(),
            wanted.values().min().copied(),
        )
    }
}

/// A worker's view of its fleet, updated as the membership changes. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Fleet {
    view: watch::Receiver<Arc<FleetView>>,
    lease: Arc<Lease>,
    /// The version of the view the dispatcher runs at (presence acknowledges only that).
    applied: Arc<AtomicU64>,
    /// What the dispatcher has records waiting for.
    demand: Arc<Demand>,
}

/// Sets the view of a [`Fleet::manual`].
#[derive(Debug)]
pub struct FleetSender {
    view: watch::Sender<Arc<FleetView>>,
}

#[cfg_attr(not(feature = "rdkafka"), allow(dead_code))]
impl FleetSender {
    /// Makes `view` the fleet every clone of the fleet sees.
    pub fn set(&self, view: FleetView) {
        self.view.send_if_modified(|current| {
            // A view made by hand has no version: each change of its counts is the next one.
            let (changed, version) = if view.version == 0 {
                (!current.same_counts(&view), current.version + 1)
            } else {
                (view.version != current.version, view.version)
            };
            if changed {
                *current = Arc::new(FleetView { version, ..view });
            }
            changed
        });
    }

    /// Resolves once every clone of the fleet is dropped.
    pub(crate) async fn closed(&self) {
        self.view.closed().await;
    }
}

impl Fleet {
    /// A fleet that changes only through the returned sender: for tests, or an application that
    /// knows its replicas another way.
    pub fn manual(view: FleetView) -> (Self, FleetSender) {
        Self::with_lease(view, Arc::new(Lease::always()))
    }

    pub(crate) fn with_lease(view: FleetView, lease: Arc<Lease>) -> (Self, FleetSender) {
        let (sender, receiver) = watch::channel(Arc::new(view));
        (
            Self {
                view: receiver,
                lease,
                applied: Arc::new(AtomicU64::new(0)),
                demand: Arc::default(),
            },
            FleetSender { view: sender },
        )
    }

    /// Follows `group`'s membership through `admin`: read once now (an error if it cannot be:
    /// without it the worker would take the whole rate), then every `every`. The worker takes
    /// no share until two reads after the first (the others have counted it by then). A later
    /// failed read keeps the last view (logged at warn level once per run of failures). The
    /// reading task ends when the last clone of the fleet is dropped. Needs a tokio runtime.
    pub async fn follow(admin: Admin, group: impl Into<String>, every: Duration) -> Result<Self> {
        let group = group.into();
        let read = async |admin: &Admin, group: &str| {
            admin.describe_share_group(group).await.map(|described| {
                FleetView::from_assignments(described.members.iter().map(|m| &m.assignment))
            })
        };
        let first = read(&admin, &group).await.map_err(|err| {
            let err = Error::from(err);
            Error::new(
                err.kind(),
                format!(
                    "reading share group {group}'s membership to share the rate limits: {}",
                    err.message()
                ),
            )
        })?;
        let lease = Arc::new(Lease::fenced());
        let (fleet, sender) = Self::with_lease(first, lease.clone());
        tokio::spawn(async move {
            let mut failing = false;
            let mut reads = 0u32;
            loop {
                tokio::select! {
                    () = sender.view.closed() => return,
                    () = tokio::time::sleep(every) => {}
                }
                match read(&admin, &group).await {
                    Ok(view) => {
                        if failing {
                            tracing::info!(group = %group, "the group's membership is read again");
                        }
                        failing = false;
                        sender.set(view);
                        reads += 1;
                        if reads == 2 {
                            lease.hold_always();
                        }
                    }
                    Err(err) if !failing => {
                        failing = true;
                        tracing::warn!(
                            group = %group,
                            error = %err,
                            "cannot read the group's membership: the rate limits keep the last shares"
                        );
                    }
                    Err(_) => {}
                }
            }
        });
        Ok(fleet)
    }

    /// The fleet now.
    pub fn view(&self) -> Arc<FleetView> {
        self.view.borrow().clone()
    }

    /// The fleet if it changed since this clone last looked.
    pub(crate) fn changed(&mut self) -> Option<Arc<FleetView>> {
        self.view
            .has_changed()
            .unwrap_or(false)
            .then(|| self.view.borrow_and_update().clone())
    }

    /// Resolves at the next change of the view (never, once nothing can change it): what wakes
    /// the dispatcher to take a new share at once.
    pub(crate) fn next_change(&self) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
        let mut view = self.view.clone();
        Box::pin(async move {
            if view.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        })
    }

    /// Whether this worker may start a record that needs a share of `rate` (a route topic, `*`
    /// for the worker-wide rate) at `now`; either way, it has such records until `next` (when
    /// it looks again), so its presence claims the rate.
    pub(crate) fn may_start(&self, rate: &str, now: Instant, next: Instant) -> bool {
        self.demand.want(rate, next.max(now + DEMAND_LINGER));
        self.lease
            .holds_for(rate, now, self.applied.load(Ordering::SeqCst))
    }

    #[cfg_attr(not(feature = "rdkafka"), allow(dead_code))]
    pub(crate) fn demand(&self) -> Arc<Demand> {
        self.demand.clone()
    }

    /// The dispatcher runs at `version` of the view now.
    pub(crate) fn applied(&self, version: u64) {
        self.applied.fetch_max(version, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(list: &[(&str, i32)]) -> Vec<(String, i32)> {
        list.iter().map(|(t, p)| ((*t).to_owned(), *p)).collect()
    }

    #[test]
    fn members_count_per_topic_they_are_assigned() {
        let a = parts(&[("sms", 0), ("sms", 1), ("email", 0)]);
        let b = parts(&[("sms", 2)]);
        let idle = parts(&[]);
        let view = FleetView::from_assignments([&a, &b, &idle]);
        assert_eq!(view.sharing(Some("sms")), 2);
        assert_eq!(view.sharing(Some("email")), 1);
        assert_eq!(
            view.sharing(None),
            2,
            "a member with no partition takes no share"
        );
        assert_eq!(
            view.sharing(Some("push")),
            1,
            "nobody assigned: the whole rate"
        );
        assert_eq!(FleetView::default().sharing(None), 1);
    }

    #[tokio::test]
    async fn a_clone_sees_each_change_once() {
        let (mut fleet, sender) = Fleet::manual(FleetView::default());
        assert!(fleet.changed().is_none());
        let a = parts(&[("sms", 0)]);
        sender.set(FleetView::from_assignments([&a, &a]));
        assert_eq!(fleet.changed().map(|v| v.sharing(Some("sms"))), Some(2));
        assert!(fleet.changed().is_none());
        sender.set(FleetView::from_assignments([&a, &a]));
        assert!(fleet.changed().is_none(), "the same view is no change");
    }
}
