//! [`Routes`]: topic → handler service, each with the records waiting for it to be ready.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::Arc;
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
}

/// Which route a topic belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Lookup {
    pub(crate) route: usize,
    /// The topic is the route's delay topic.
    pub(crate) from_delay: bool,
}

/// One topic's service and its queue of fetched records.
#[derive(Debug)]
struct RouteEntry<Svc> {
    topic: Arc<str>,
    /// Its delay topic, when the worker moves long waits there.
    delay_topic: Option<Arc<str>>,
    service: Svc,
    /// This route's job timeout, if it has its own.
    timeout: Option<Duration>,
    limits: RouteLimits,
    /// Its records not yet being acknowledged (queued, running, held, dead-lettering).
    active: usize,
    /// Whether its topic is paused at the source (it holds its full share of the slots).
    paused: bool,
    /// Records fetched for this topic that wait for `poll_ready`. Bounded by the slot count: every
    /// record here holds a slot.
    queue: VecDeque<(SlotKey, Delivery)>,
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
}

impl<Svc> Default for Routes<Svc> {
    fn default() -> Self {
        Self {
            routes: Vec::new(),
            by_topic: HashMap::new(),
            next: 0,
            queued: 0,
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
            },
        );
        self.routes.push(RouteEntry {
            topic,
            delay_topic: None,
            service,
            timeout,
            limits,
            active: 0,
            paused: false,
            queue: VecDeque::new(),
        });
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

    /// Gives every route its delay topic, `name(topic)`; an error names a delay topic that is
    /// some route's own topic.
    pub(crate) fn set_delay_topics(
        &mut self,
        name: impl Fn(&str) -> String,
    ) -> std::result::Result<(), String> {
        for index in 0..self.routes.len() {
            let delay: Arc<str> = Arc::from(name(&self.routes[index].topic));
            if self.by_topic.contains_key(&delay) {
                return Err(format!(
                    "the delay topic of route `{}` is `{delay}`, which already has a route",
                    self.routes[index].topic
                ));
            }
            self.by_topic.insert(
                delay.clone(),
                Lookup {
                    route: index,
                    from_delay: true,
                },
            );
            self.routes[index].delay_topic = Some(delay);
        }
        Ok(())
    }

    /// Whether the worker reads `topic`, and as what (`"a route's topic"`, `"a delay topic"`).
    pub(crate) fn reads(&self, topic: &str) -> Option<&'static str> {
        if self.topics().any(|t| t == topic) {
            return Some("a route's topic");
        }
        (0..self.len())
            .any(|route| self.delay_topic(route).is_some_and(|d| &**d == topic))
            .then_some("a delay topic")
    }

    /// Route `route`'s topic.
    pub(crate) fn topic(&self, route: usize) -> Option<&Arc<str>> {
        self.routes.get(route).map(|r| &r.topic)
    }

    /// Route `route`'s delay topic, if it has one.
    pub(crate) fn delay_topic(&self, route: usize) -> Option<&Arc<str>> {
        self.routes.get(route).and_then(|r| r.delay_topic.as_ref())
    }

    /// Whether route `route` holds its full share (its topics are paused).
    pub(crate) fn is_full(&self, route: usize) -> bool {
        self.routes.get(route).is_some_and(|r| r.paused)
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

    /// How many unfinished records one route may hold when `concurrency` is shared by all routes:
    /// each other route keeps a reserve of max(1, concurrency / (4 × routes)) slots, so a route
    /// whose handlers are stuck cannot take the slots the other topics need. One route may use
    /// all of them.
    pub(crate) fn share(&self, concurrency: usize) -> usize {
        let n = self.routes.len().max(1);
        let reserve = (concurrency / (4 * n)).max(1);
        concurrency
            .saturating_sub((n - 1).saturating_mul(reserve))
            .max(1)
    }

    /// Counts a record of route `route` becoming unfinished (`true`) or finished (`false`).
    /// Returns whether to pause or resume the route's topic at the source when the route reached
    /// its `share` or fell below it.
    pub(crate) fn count(&mut self, route: usize, active: bool, share: usize) -> Option<bool> {
        let r = self.routes.get_mut(route)?;
        if active {
            r.active += 1;
        } else {
            r.active = r.active.saturating_sub(1);
        }
        let full = r.active >= share;
        if full == r.paused {
            return None;
        }
        r.paused = full;
        Some(full)
    }

    /// Route `route`'s records not yet being acknowledged.
    pub(crate) fn active(&self, route: usize) -> usize {
        self.routes.get(route).map_or(0, |r| r.active)
    }

    /// The most records one fetch may bring so that no route exceeds its `share`: what the
    /// fullest route that is not paused has left. 0 when every route is paused.
    pub(crate) fn fetch_room(&self, share: usize) -> usize {
        self.routes
            .iter()
            .filter(|r| !r.paused)
            .map(|r| share.saturating_sub(r.active))
            .min()
            .unwrap_or(0)
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
        let n = self.routes.len();
        for step in 0..n {
            let i = (self.next + step) % n;
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
                    self.next = (i + 1) % n;
                    return Poll::Ready((i, key, delivery));
                }
                Poll::Ready(Err(never)) => match never {},
                Poll::Pending => {}
            }
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

    #[test]
    fn one_route_may_use_every_slot_and_more_routes_keep_a_reserve_each() {
        assert_eq!(routes(1).share(64), 64);
        assert_eq!(routes(2).share(64), 56);
        assert_eq!(routes(4).share(64), 52);
        assert_eq!(routes(3).share(4), 2);
        assert_eq!(routes(8).share(4), 1);
    }

    #[test]
    fn a_route_at_its_share_is_paused_and_fetches_leave_room_for_the_others() {
        let mut r = routes(2);
        let share = r.share(8);
        assert_eq!((share, r.fetch_room(share)), (7, 7));
        for _ in 0..6 {
            assert_eq!(r.count(0, true, share), None);
        }
        assert_eq!(r.fetch_room(share), 1);
        assert_eq!(r.count(0, true, share), Some(true));
        assert_eq!(r.fetch_room(share), 7, "t1 has its whole share left");
        assert_eq!(r.count(1, true, share), None);
        assert_eq!(r.fetch_room(share), 6);
        assert_eq!(r.count(0, false, share), Some(false));
        assert_eq!(r.fetch_room(share), 1);
    }
}
