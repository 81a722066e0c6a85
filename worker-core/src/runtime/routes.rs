//! [`Routes`]: topic → handler service, each with the records waiting for it to be ready.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use tower::Service;

use crate::source::Delivery;
use crate::{Job, Outcome};

use super::rate::RateLimit;
use super::slots::SlotKey;

/// A route's limits, as configured.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct RouteLimits {
    /// How often the route's records may start.
    pub(crate) rate: Option<RateLimit>,
    /// How often the records of one key may start.
    pub(crate) per_key: Option<RateLimit>,
    /// How many records of one key may run at once in this worker.
    pub(crate) key_concurrency: Option<usize>,
    /// The route's circuit breaker.
    pub(crate) breaker: Option<super::breaker::Breaker>,
    /// Whether a handler's `retry_after` pauses the route for the whole fleet.
    pub(crate) cool_down: bool,
    /// Its lane's strict priority (0 first), if it is a lane.
    pub(crate) priority: Option<u8>,
    /// Its lane's weight among the lanes of its priority, if it is a weighted lane.
    pub(crate) weight: Option<u32>,
}

impl RouteLimits {
    fn is_lane(&self) -> bool {
        self.priority.is_some() || self.weight.is_some()
    }
}

/// Each route's topic and share of the slots, as last computed.
pub(crate) type Shares = Arc<Mutex<Vec<(Arc<str>, usize)>>>;

/// Which route a topic belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Lookup {
    pub(crate) route: usize,
    /// The topic is one of the route's delay topics.
    pub(crate) from_delay: bool,
    /// Which of them (an index into [`TIERS`](crate::delay::TIERS)); 0 for the route's topic.
    pub(crate) tier: usize,
}

/// One topic's service and its queue of fetched records.
#[derive(Debug)]
struct RouteEntry<Svc> {
    topic: Arc<str>,
    /// Its delay topics, nearest first, when the worker moves long waits there.
    delay_topics: Vec<Arc<str>>,
    service: Svc,
    /// This route's job timeout, if it has its own.
    timeout: Option<Duration>,
    limits: RouteLimits,
    /// Its records not yet being acknowledged (queued, running, held, dead-lettering).
    active: usize,
    /// Its records that want a handler now (admitted, queued or running): what makes a lane
    /// busy, so that lower lanes yield to it. A held retry or a paused route wants none.
    demand: usize,
    /// Whether its topic is paused at the source (it holds its full share of the slots).
    paused: bool,
    /// Lanes: whether the next fetch leaves its topic out (another lane has more room: see
    /// [`Routes::plan_fetch`]).
    skipped: bool,
    /// Lanes: whether the last fetch that asked for its topic brought some of its records.
    had_records: bool,
    /// Lanes: whether the fetch in flight asks for its topic.
    asked: bool,
    /// Whether the controls pause it fleet-wide: a lane that cannot run is not busy.
    blocked: bool,
    /// Records fetched for this topic that wait for `poll_ready`. Bounded by the slot count: every
    /// record here holds a slot.
    queue: VecDeque<(SlotKey, Delivery)>,
}

impl<Svc> RouteEntry<Svc> {
    /// Whether the lane has work: records that want a handler, or records in the broker (its last
    /// fetch brought some), and the controls do not pause it.
    fn busy(&self) -> bool {
        !self.blocked && (self.demand > 0 || self.had_records)
    }
}

/// The route table. The dispatcher owns it: it calls `poll_ready` on a route's service and then
/// `call` on that same service, as the tower contract asks, so no per-record clone is needed.
#[derive(Debug)]
pub(crate) struct Routes<Svc> {
    routes: Vec<RouteEntry<Svc>>,
    by_topic: HashMap<Arc<str>, Lookup>,
    /// Where the next readiness scan starts, so no route starves the others.
    next: usize,
    queued: usize,
    /// How many unfinished records all routes hold at most together.
    capacity: usize,
    /// Whether some route is a lane (has a priority or a weight): then a route's share depends
    /// on which other lanes are busy.
    lanes: bool,
    /// The routes in the order their queues are looked at: by lane priority (routes without one
    /// last), the order of insertion within one priority.
    order: Vec<usize>,
    /// Each route's share as last computed, for `share_worker.route.slots`.
    shares: Shares,
}

impl<Svc> Default for Routes<Svc> {
    fn default() -> Self {
        Self {
            routes: Vec::new(),
            by_topic: HashMap::new(),
            next: 0,
            queued: 0,
            capacity: 1,
            lanes: false,
            order: Vec::new(),
            shares: Arc::default(),
        }
    }
}

impl<Svc> Routes<Svc> {
    /// Adds a route with its own job timeout and limits; `false` if the topic already has one.
    pub(crate) fn insert(
        &mut self,
        topic: Arc<str>,
        service: Svc,
        timeout: Option<Duration>,
        limits: RouteLimits,
    ) -> bool {
        if self.by_topic.contains_key(&topic) {
            return false;
        }
        self.by_topic.insert(
            topic.clone(),
            Lookup {
                route: self.routes.len(),
                from_delay: false,
                tier: 0,
            },
        );
        self.lanes |= limits.is_lane();
        self.routes.push(RouteEntry {
            topic,
            delay_topics: Vec::new(),
            service,
            timeout,
            limits,
            active: 0,
            demand: 0,
            paused: false,
            skipped: false,
            had_records: true,
            asked: false,
            blocked: false,
            queue: VecDeque::new(),
        });
        let rank = |route: &usize| {
            self.routes[*route]
                .limits
                .priority
                .map_or(u16::from(u8::MAX) + 1, u16::from)
        };
        self.order = (0..self.routes.len()).collect();
        self.order.sort_by_key(rank);
        true
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }

    pub(crate) fn topics(&self) -> impl Iterator<Item = &str> {
        self.routes.iter().map(|r| &*r.topic)
    }

    /// The route for `topic` (its own topic or its delay topic), if it has one.
    pub(crate) fn route_for(&self, topic: &str) -> Option<Lookup> {
        self.by_topic.get(topic).copied()
    }

    /// Route `route`'s limits.
    pub(crate) fn limits(&self, route: usize) -> RouteLimits {
        self.routes.get(route).map(|r| r.limits).unwrap_or_default()
    }

    /// Gives every route its delay topics, `names(topic)`, nearest first; an error names a delay
    /// topic that is some route's own topic or another route's delay topic.
    pub(crate) fn set_delay_topics(
        &mut self,
        names: impl Fn(&str) -> Vec<String>,
    ) -> std::result::Result<(), String> {
        for index in 0..self.routes.len() {
            for (tier, delay) in names(&self.routes[index].topic).into_iter().enumerate() {
                let delay: Arc<str> = Arc::from(delay);
                if self.by_topic.contains_key(&delay) {
                    return Err(format!(
                        "the delay topic `{delay}` of route `{}` is already another route's topic or delay topic",
                        self.routes[index].topic
                    ));
                }
                self.by_topic.insert(
                    delay.clone(),
                    Lookup {
                        route: index,
                        from_delay: true,
                        tier,
                    },
                );
                self.routes[index].delay_topics.push(delay);
            }
        }
        Ok(())
    }

    /// Whether the worker reads `topic`, and as what (`"a route's topic"`, `"a delay topic"`).
    pub(crate) fn reads(&self, topic: &str) -> Option<&'static str> {
        if self.topics().any(|t| t == topic) {
            return Some("a route's topic");
        }
        (0..self.len())
            .any(|route| self.delay_topics(route).iter().any(|d| &**d == topic))
            .then_some("a delay topic")
    }

    /// Route `route`'s topic.
    pub(crate) fn topic(&self, route: usize) -> Option<&Arc<str>> {
        self.routes.get(route).map(|r| &r.topic)
    }

    /// Route `route`'s delay topics, nearest first (none without a delay sink).
    pub(crate) fn delay_topics(&self, route: usize) -> &[Arc<str>] {
        self.routes.get(route).map_or(&[], |r| &r.delay_topics)
    }

    /// Whether route `route` holds its full share (its topics are paused).
    pub(crate) fn is_full(&self, route: usize) -> bool {
        self.routes.get(route).is_some_and(|r| r.paused)
    }

    /// Whether the next fetch leaves route `route`'s topic out (see [`plan_fetch`](Self::plan_fetch)).
    pub(crate) fn is_skipped(&self, route: usize) -> bool {
        self.routes.get(route).is_some_and(|r| r.skipped)
    }

    /// How many routes there are.
    pub(crate) fn len(&self) -> usize {
        self.routes.len()
    }

    /// The longest job timeout of any route, `default` standing in for routes without their own.
    pub(crate) fn longest_timeout(&self, default: Duration) -> Duration {
        self.routes
            .iter()
            .map(|r| r.timeout.unwrap_or(default))
            .max()
            .unwrap_or(default)
    }

    /// Route `route`'s own job timeout, if it has one.
    pub(crate) fn timeout(&self, route: usize) -> Option<Duration> {
        self.routes.get(route).and_then(|r| r.timeout)
    }

    /// Sets how many unfinished records all routes hold at most together (the handlers' slots,
    /// and the records fetched ahead of them). Returns whether a route's pause changed.
    pub(crate) fn set_capacity(&mut self, capacity: usize) -> bool {
        self.capacity = capacity.max(1);
        self.repause(None)
    }

    /// The slots every other route keeps for itself: max(1, capacity / (4 × routes)), so a route
    /// whose handlers are stuck cannot take the slots the other topics need. It is also a lane's
    /// floor: the least a lower or lighter lane may hold, so none starves forever.
    fn reserve(&self) -> usize {
        (self.capacity / (4 * self.routes.len().max(1))).max(1)
    }

    /// How many unfinished records route `route` may hold now. Alone a route may use every slot;
    /// with others, all but their reserves. A lane holds less while other lanes are busy (want a
    /// handler): a lane yields down to its floor while a lane of a higher priority is busy, and
    /// weighted lanes of one priority split the slots by weight among those busy (itself
    /// counted busy), never below the floor.
    pub(crate) fn share(&self, route: usize) -> usize {
        let n = self.routes.len().max(1);
        let reserve = self.reserve();
        let most = self
            .capacity
            .saturating_sub((n - 1).saturating_mul(reserve))
            .max(1);
        let Some(me) = self.routes.get(route) else {
            return most;
        };
        if !self.lanes || !me.limits.is_lane() {
            return most;
        }
        let higher_busy = me.limits.priority.is_some_and(|mine| {
            self.routes.iter().any(|other| {
                other.busy() && other.limits.priority.is_some_and(|theirs| theirs < mine)
            })
        });
        if higher_busy {
            return reserve.min(most);
        }
        let Some(weight) = me.limits.weight else {
            return most;
        };
        let busy_weights: u64 = self
            .routes
            .iter()
            .enumerate()
            .filter(|(other, r)| {
                (*other == route || r.busy()) && r.limits.priority == me.limits.priority
            })
            .filter_map(|(_, r)| r.limits.weight)
            .map(u64::from)
            .sum();
        let split = (self.capacity as u64).saturating_mul(u64::from(weight)) / busy_weights.max(1);
        usize::try_from(split)
            .unwrap_or(usize::MAX)
            .max(reserve)
            .min(most)
    }

    /// Counts a record of route `route` becoming unfinished (`true`) or finished (`false`).
    /// Returns whether a route's pause at the source changed (it reached its share or fell
    /// below it).
    pub(crate) fn count(&mut self, route: usize, active: bool) -> bool {
        let Some(r) = self.routes.get_mut(route) else {
            return false;
        };
        if active {
            r.active += 1;
        } else {
            r.active = r.active.saturating_sub(1);
        }
        self.repause(Some(route))
    }

    /// Counts a record of route `route` starting or ending to want a handler. Returns whether a
    /// route's pause changed: a lane that becomes busy, or idle, moves the other lanes' shares.
    pub(crate) fn count_demand(&mut self, route: usize, wants: bool) -> bool {
        let Some(r) = self.routes.get_mut(route) else {
            return false;
        };
        let was_busy = r.busy();
        if wants {
            r.demand += 1;
        } else {
            r.demand = r.demand.saturating_sub(1);
        }
        if !self.lanes || was_busy == r.busy() {
            return false;
        }
        self.repause(None)
    }

    /// Marks route `route` paused (or no longer) by the controls. Returns whether a route's
    /// pause changed: a lane that cannot run yields to none.
    pub(crate) fn set_blocked(&mut self, route: usize, blocked: bool) -> bool {
        let Some(r) = self.routes.get_mut(route) else {
            return false;
        };
        let was_busy = r.busy();
        r.blocked = blocked;
        if !self.lanes || was_busy == r.busy() {
            return false;
        }
        self.repause(None)
    }

    /// Pauses the routes at their share and resumes those below it: route `only`, or (`None`)
    /// every route. Returns whether one changed.
    fn repause(&mut self, only: Option<usize>) -> bool {
        if only.is_none() {
            self.publish_shares();
        }
        let routes = only.map_or(0..self.routes.len(), |r| r..r + 1);
        let mut changed = false;
        for route in routes {
            let full = self
                .routes
                .get(route)
                .is_some_and(|r| r.active >= self.share(route));
            if let Some(r) = self.routes.get_mut(route)
                && r.paused != full
            {
                r.paused = full;
                changed = true;
            }
        }
        changed
    }

    /// Each route's share now, as `(topic, slots)`: updated whenever the shares move (capacity,
    /// a lane becoming busy or idle).
    pub(crate) fn shares(&self) -> Shares {
        self.shares.clone()
    }

    fn publish_shares(&self) {
        let now: Vec<(Arc<str>, usize)> = (0..self.routes.len())
            .map(|route| (self.routes[route].topic.clone(), self.share(route)))
            .collect();
        *self.shares.lock().unwrap_or_else(PoisonError::into_inner) = now;
    }

    /// Route `route`'s records not yet being acknowledged.
    pub(crate) fn active(&self, route: usize) -> usize {
        self.routes.get(route).map_or(0, |r| r.active)
    }

    /// The most records one fetch may bring so that no route exceeds its share: what the
    /// fullest route that is not paused has left. 0 when every route is paused.
    pub(crate) fn fetch_room(&self) -> usize {
        (0..self.routes.len())
            .filter(|route| !self.routes[*route].paused && !self.routes[*route].skipped)
            .map(|route| self.room(route))
            .min()
            .unwrap_or(0)
    }

    fn room(&self, route: usize) -> usize {
        self.share(route)
            .saturating_sub(self.routes.get(route).map_or(0, |r| r.active))
    }

    /// Lanes: chooses which topics the next fetch asks for, so that it may be as large as the
    /// roomiest lane that has records allows while no lane exceeds its share. A fetch brings at
    /// most what the fullest topic it asks for has left (one request, records of any of its
    /// topics), so asking for every topic would shrink each fetch to the fullest lane's last
    /// free slot; a lane with less room than that sits this fetch out (its room grows while the
    /// others fill up, so it is asked again soon), and a lane whose last fetch found nothing does
    /// not set the size. Returns whether a topic's skip changed. Without lanes every topic not
    /// paused is asked for.
    pub(crate) fn plan_fetch(&mut self) -> bool {
        if !self.lanes {
            return false;
        }
        let open: Vec<(usize, usize)> = (0..self.routes.len())
            .filter(|route| !self.routes[*route].paused)
            .map(|route| (route, self.room(route)))
            .collect();
        let with_records = open
            .iter()
            .filter(|(route, _)| self.routes[*route].had_records)
            .map(|(_, room)| *room)
            .max();
        let smallest = open.iter().map(|(_, room)| *room).min().unwrap_or(0);
        // A lane below its floor is always asked for, so that none starves.
        let reserve = self.reserve();
        let below_floor = |route: usize| self.routes[route].active < reserve;
        let floor_room = open
            .iter()
            .filter(|(route, _)| below_floor(*route))
            .map(|(_, room)| *room)
            .min();
        let size = with_records
            .unwrap_or(smallest)
            .min(floor_room.unwrap_or(usize::MAX));
        let skips: Vec<(usize, bool)> = open
            .iter()
            .map(|(route, room)| (*route, *room < size && !below_floor(*route)))
            .collect();
        let mut changed = false;
        for (route, skip) in skips {
            let entry = &mut self.routes[route];
            changed |= entry.skipped != skip;
            entry.skipped = skip;
        }
        for entry in &mut self.routes {
            entry.asked = !entry.paused && !entry.skipped;
        }
        changed
    }

    /// Lanes: a fetch that asked for `asked` records came back with `batch`. When it brought
    /// fewer than asked (the broker had no more to give), a lane it asked for that got none of
    /// its records is believed empty until a fetch brings it some. Returns whether a route's
    /// pause changed.
    pub(crate) fn fetched(&mut self, asked: usize, batch: &[Delivery]) -> bool {
        if !self.lanes {
            return false;
        }
        let busy_before: Vec<bool> = self.routes.iter().map(RouteEntry::busy).collect();
        if batch.len() < asked {
            for entry in &mut self.routes {
                if entry.asked {
                    entry.had_records = false;
                }
            }
        }
        for delivery in batch {
            if let Some(lookup) = self.by_topic.get(&delivery.id.topic) {
                self.routes[lookup.route].had_records = true;
            }
        }
        let moved = self
            .routes
            .iter()
            .zip(busy_before)
            .any(|(entry, before)| entry.busy() != before);
        moved && self.repause(None)
    }

    /// Queues a fetched record for route `route`'s service.
    pub(crate) fn enqueue(&mut self, route: usize, key: SlotKey, delivery: Delivery) {
        self.routes[route].queue.push_back((key, delivery));
        self.queued += 1;
    }

    /// Records waiting for a service.
    pub(crate) fn queued(&self) -> usize {
        self.queued
    }

    /// Empties route `route`'s queue (it was paused): the records were never started.
    pub(crate) fn take_queue(&mut self, route: usize) -> Vec<(SlotKey, Delivery)> {
        let Some(entry) = self.routes.get_mut(route) else {
            return Vec::new();
        };
        self.queued -= entry.queue.len();
        entry.queue.drain(..).collect()
    }

    /// Empties every queue (shutdown): the records were never started.
    pub(crate) fn drain(&mut self) -> Vec<(SlotKey, Delivery)> {
        self.queued = 0;
        self.routes
            .iter_mut()
            .flat_map(|r| r.queue.drain(..))
            .collect()
    }
}

impl<Svc> Routes<Svc>
where
    Svc: Service<Job, Response = Outcome, Error = Infallible>,
{
    /// Finds a route with a queued record whose service is ready, and takes that record. The caller
    /// must then [`call`](Self::call) that route at once.
    pub(crate) fn poll_next_ready(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<(usize, SlotKey, Delivery)> {
        if self.queued == 0 {
            return Poll::Pending;
        }
        // By priority; within one priority, round-robin from `next`, so no route starves the
        // others of its rank.
        let n = self.order.len();
        let mut start = 0;
        while start < n {
            let rank = self.routes[self.order[start]].limits.priority;
            let end = (start..n)
                .find(|&at| self.routes[self.order[at]].limits.priority != rank)
                .unwrap_or(n);
            let len = end - start;
            for step in 0..len {
                let i = self.order[start + self.next.wrapping_add(step) % len];
                let route = &mut self.routes[i];
                if route.queue.is_empty() {
                    continue;
                }
                match route.service.poll_ready(cx) {
                    Poll::Ready(Ok(())) => {
                        let Some((key, delivery)) = route.queue.pop_front() else {
                            continue;
                        };
                        self.queued -= 1;
                        self.next = self.next.wrapping_add(step + 1);
                        return Poll::Ready((i, key, delivery));
                    }
                    Poll::Ready(Err(never)) => match never {},
                    Poll::Pending => {}
                }
            }
            start = end;
        }
        Poll::Pending
    }

    /// Calls route `route`'s service, which [`poll_next_ready`](Self::poll_next_ready) found ready.
    pub(crate) fn call(&mut self, route: usize, job: Job) -> Svc::Future {
        self.routes[route].service.call(job)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn routes(n: usize) -> Routes<()> {
        let mut routes = Routes::default();
        for i in 0..n {
            routes.insert(Arc::from(format!("t{i}")), (), None, RouteLimits::default());
        }
        routes
    }

    fn delivery(offset: i64) -> Delivery {
        use crate::source::{DeliveryId, Lease};
        Delivery {
            id: DeliveryId {
                topic: Arc::from("t"),
                partition: 0,
                offset,
                lease: Lease::new(1, 1),
            },
            key: None,
            value: None,
            headers: Vec::new(),
            timestamp: 0,
            delivery_count: 1,
            lock_duration: Duration::from_secs(30),
            acquired_at: tokio::time::Instant::now(),
            undecodable: None,
        }
    }

    fn share(routes: &mut Routes<()>, capacity: usize) -> usize {
        routes.set_capacity(capacity);
        routes.share(0)
    }

    #[test]
    fn one_route_may_use_every_slot_and_more_routes_keep_a_reserve_each() {
        assert_eq!(share(&mut routes(1), 64), 64);
        assert_eq!(share(&mut routes(2), 64), 56);
        assert_eq!(share(&mut routes(4), 64), 52);
        assert_eq!(share(&mut routes(3), 4), 2);
        assert_eq!(share(&mut routes(8), 4), 1);
    }

    #[test]
    fn a_route_at_its_share_is_paused_and_fetches_leave_room_for_the_others() {
        let mut r = routes(2);
        r.set_capacity(8);
        assert_eq!((r.share(0), r.fetch_room()), (7, 7));
        for _ in 0..6 {
            assert!(!r.count(0, true));
        }
        assert_eq!(r.fetch_room(), 1);
        assert!(r.count(0, true));
        assert!(r.is_full(0));
        assert_eq!(r.fetch_room(), 7, "t1 has its whole share left");
        assert!(!r.count(1, true));
        assert_eq!(r.fetch_room(), 6);
        assert!(r.count(0, false));
        assert!(!r.is_full(0));
        assert_eq!(r.fetch_room(), 1);
    }

    fn lanes(lanes: &[(Option<u8>, Option<u32>)], capacity: usize) -> Routes<()> {
        let mut routes = Routes::default();
        for (i, (priority, weight)) in lanes.iter().enumerate() {
            let limits = RouteLimits {
                priority: *priority,
                weight: *weight,
                ..RouteLimits::default()
            };
            routes.insert(Arc::from(format!("lane{i}")), (), None, limits);
        }
        routes.set_capacity(capacity);
        found(&mut routes, &[]);
        routes
    }

    /// A fetch that asked for more than it got, with one record of each of `lanes`: the lanes it
    /// asked for and found nothing of are believed empty.
    fn found(routes: &mut Routes<()>, lanes: &[usize]) {
        routes.plan_fetch();
        let batch: Vec<Delivery> = lanes
            .iter()
            .map(|lane| {
                let mut record = delivery(0);
                record.id.topic = routes.topic(*lane).cloned().unwrap();
                record
            })
            .collect();
        routes.fetched(usize::MAX, &batch);
    }

    /// Fills route `route` with `n` records that run.
    fn run(routes: &mut Routes<()>, route: usize, n: usize) {
        for _ in 0..n {
            routes.count(route, true);
            routes.count_demand(route, true);
        }
    }

    #[test]
    fn a_lower_lane_yields_to_its_floor_while_a_higher_lane_is_busy() {
        // lane0: priority 0 (one-time passwords), lane1: priority 1 (marketing).
        let mut r = lanes(&[(Some(0), None), (Some(1), None)], 32);
        assert_eq!(
            (r.share(0), r.share(1)),
            (28, 28),
            "idle lanes: all but a reserve"
        );
        run(&mut r, 1, 28);
        assert!(r.is_full(1), "marketing at its share");
        assert_eq!(
            r.fetch_room(),
            28,
            "one-time passwords keep room to be fetched"
        );
        run(&mut r, 0, 1);
        assert_eq!(r.share(1), 4, "marketing yields to its floor");
        assert!(r.is_full(1));
        for _ in 0..24 {
            r.count_demand(1, false);
            r.count(1, false);
        }
        assert!(
            r.is_full(1),
            "at its floor it stays paused while the higher lane is busy"
        );
        r.count_demand(1, false);
        r.count(1, false);
        assert!(
            !r.is_full(1),
            "below its floor it is fetched again: never starved"
        );
        r.count_demand(0, false);
        assert_eq!(
            r.share(1),
            28,
            "the higher lane idle: marketing may grow again"
        );
        assert_eq!(r.share(0), 28, "a higher lane never yields to a lower one");
    }

    #[test]
    fn a_held_record_does_not_make_its_lane_busy() {
        let mut r = lanes(&[(Some(0), None), (Some(1), None)], 32);
        r.count(0, true);
        assert_eq!(
            r.share(1),
            28,
            "a record that waits (a retry's backoff) wants no handler"
        );
    }

    #[test]
    fn busy_weighted_lanes_split_the_slots_by_weight_and_an_idle_one_lends_its_part() {
        let mut r = lanes(&[(None, Some(3)), (None, Some(1))], 16);
        assert_eq!(
            (r.share(0), r.share(1)),
            (14, 14),
            "idle, each may use all but a reserve"
        );
        run(&mut r, 0, 14);
        assert!(r.is_full(0));
        run(&mut r, 1, 1);
        assert_eq!(
            (r.share(0), r.share(1)),
            (12, 4),
            "3:1 of 16 while both are busy"
        );
        assert!(
            r.is_full(0),
            "the heavy lane holds more than its part: it is paused"
        );
        let lanes_of_one = lanes(&[(None, Some(1)), (None, Some(1000))], 16);
        assert_eq!(
            lanes_of_one.share(0),
            14,
            "an idle heavy lane takes nothing from a busy light one"
        );
        let mut floor = lanes(&[(None, Some(1)), (None, Some(1000))], 16);
        run(&mut floor, 1, 1);
        assert_eq!(floor.share(0), 2, "never below the floor");
    }

    #[test]
    fn a_lane_whose_last_fetch_brought_records_stays_busy_between_fetches() {
        let mut r = lanes(&[(Some(0), None), (Some(1), None)], 32);
        found(&mut r, &[0]);
        assert_eq!(
            r.share(1),
            4,
            "the passwords' topic has records: marketing yields"
        );
        found(&mut r, &[]);
        assert_eq!(
            r.share(1),
            28,
            "a fetch found none: the passwords' lane is idle"
        );
        found(&mut r, &[0]);
        r.plan_fetch();
        let mut marketing = delivery(1);
        marketing.id.topic = Arc::from("lane1");
        r.fetched(2, &[marketing.clone(), marketing]);
        assert_eq!(
            r.share(1),
            4,
            "a fetch filled by another lane says nothing of the passwords' topic"
        );
        r.set_blocked(0, true);
        assert_eq!(r.share(1), 28, "a lane paused fleet-wide yields to none");
    }

    #[test]
    fn a_fetch_asks_for_the_roomiest_lane_with_records_and_leaves_out_the_fuller_ones() {
        let mut r = lanes(&[(None, Some(3)), (None, Some(1))], 16);
        found(&mut r, &[0, 1]);
        run(&mut r, 0, 6);
        run(&mut r, 1, 3);
        // Shares 12 and 4: rooms 6 and 1. Asking for both would fetch one record.
        assert!(r.plan_fetch());
        assert!(r.is_skipped(1) && !r.is_skipped(0));
        assert_eq!(r.fetch_room(), 6);
        run(&mut r, 0, 6);
        r.plan_fetch();
        assert!(
            !r.is_skipped(1),
            "the heavy lane full: the light one is asked for"
        );
        assert_eq!(r.fetch_room(), 1);
        // A lane whose last fetch found nothing does not set the size: it is asked for too.
        let mut idle = lanes(&[(Some(0), None), (Some(1), None)], 32);
        found(&mut idle, &[1]);
        run(&mut idle, 1, 25);
        idle.plan_fetch();
        assert!(!idle.is_skipped(0) && !idle.is_skipped(1));
        assert_eq!(idle.fetch_room(), 3);
        // A lane below its floor is always asked for.
        let mut floor = lanes(&[(None, Some(1)), (None, Some(1))], 32);
        found(&mut floor, &[0, 1]);
        run(&mut floor, 1, 2);
        floor.plan_fetch();
        assert!(!floor.is_skipped(1), "below its floor of 4");
        assert_eq!(floor.fetch_room(), 14);
    }

    #[test]
    fn queued_records_of_a_higher_lane_are_taken_first() {
        use std::task::Waker;

        let mut r: Routes<tower::util::ServiceFn<_>> = Routes::default();
        let service =
            || tower::service_fn(|_job: Job| async { Ok::<_, Infallible>(Outcome::Accept) });
        for (topic, priority) in [("low", 1), ("high", 0)] {
            let limits = RouteLimits {
                priority: Some(priority),
                ..RouteLimits::default()
            };
            r.insert(Arc::from(topic), service(), None, limits);
        }
        for (offset, route) in [0, 0, 1, 1].into_iter().enumerate() {
            r.enqueue(
                route,
                SlotKey::for_test(offset as u32),
                delivery(offset as i64),
            );
        }
        let mut cx = Context::from_waker(Waker::noop());
        let taken: Vec<usize> = (0..4)
            .map(|_| match r.poll_next_ready(&mut cx) {
                Poll::Ready((route, _, _)) => route,
                Poll::Pending => usize::MAX,
            })
            .collect();
        assert_eq!(taken, vec![1, 1, 0, 0]);
    }
}
