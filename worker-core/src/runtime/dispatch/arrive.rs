//! Fetches, and the records that arrive from them: each gets a slot, a span and its first phase.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::SystemTime;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::Service;
use tracing::field::Empty;

use crate::delay::{headers, parse_not_before};
use crate::source::{AckKind, Delivery, DeliveryId, Header, ShareSource};
use crate::telemetry;
use crate::{ErrorKind, Job, Outcome, Result};

use super::super::lifecycle::{Arrival, Life, Phase};
use super::super::observer::Subject;
use super::super::slots::{Counted, InFlight, Origin};
use super::{
    Dispatcher, FETCH_BACKOFF, FIRST_EMPTY_FETCH_PAUSE, MAX_EMPTY_FETCH_PAUSE, MAX_FETCH_BACKOFF,
    WAITED_FOR_RECORDS, ends_the_worker,
};

impl<S, Svc> Dispatcher<'_, S, Svc>
where
    S: ShareSource,
    Svc: Service<Job, Response = Outcome, Error = Infallible>,
    Svc::Future: Send + 'static,
{
    /// Polls the fetch in progress; `true` if it ended (its records are admitted).
    pub(super) fn poll_fetch(&mut self, cx: &mut Context<'_>, now: Instant) -> bool {
        let Some(fetch) = self.fetching.future.as_mut() else {
            return false;
        };
        let Poll::Ready(result) = fetch.as_mut().poll(cx) else {
            return false;
        };
        self.fetching.future = None;
        self.on_fetched(result, now);
        true
    }

    /// Asks for min(concurrency + records fetched ahead − unfinished records, max_poll_records per
    /// request the source sends, what the fullest route may still take) records, if fetching is
    /// allowed now (see `ahead`).
    /// Records whose acknowledgement is on the way do not count: the fetch carries (or overlaps)
    /// their acknowledgements, so a finished handler's successor does not wait a round trip for
    /// the broker's answer first. Their slots stay held until the broker answers, and a source may
    /// return one record more per acknowledgement queued while it waits (each unfinished record
    /// may be one): the request leaves room for those, so that a broker slow to answer never makes
    /// a batch overflow the slots (its excess would be released unhandled, a delivery spent).
    pub(super) fn start_fetch(&mut self, now: Instant) -> bool {
        if self.paths.stopping.is_some()
            || self.fetching.future.is_some()
            || self.paths.dlq_failing()
        {
            return false;
        }
        if let Some(at) = self.fetching.not_before {
            if now < at {
                return false;
            }
            self.fetching.not_before = None;
        }
        let leaders = self.fit_leaders();
        if self.routes.plan_fetch() {
            self.sync_route_pauses();
        }
        // Records waiting for their not-before are bounded by `max_held` apart: they never
        // take the room that new work needs.
        let unfinished = self
            .slots
            .held()
            .saturating_sub(self.tasks.acking.len())
            .saturating_sub(self.waits.delayed);
        // The slots kept for records that will wait for their not-before are not for the rest.
        let free = self
            .slots
            .free()
            .saturating_sub(self.config.max_held().saturating_sub(self.waits.delayed));
        let room_within = |limit: usize| {
            limit
                .saturating_sub(unfinished)
                .min(free.saturating_sub(unfinished))
                .min(self.routes.fetch_room())
        };
        let concurrency = self.config.concurrency;
        let handler = self.fetching.coalesce.handler_average();
        let ahead = self.fetching.ahead.records(concurrency, leaders, handler);
        let room = room_within(concurrency + ahead);
        if room == 0 {
            return false;
        }
        let max_poll = self.config.max_poll_records as usize;
        let per_fetch = max_poll.saturating_mul(leaders);
        let max = u32::try_from(room.min(per_fetch)).unwrap_or(u32::MAX);
        // Whether to wait for the last batch is judged on the handlers' own slots: the records
        // fetched ahead would otherwise fill every fetch and no fetch would ever wait.
        let own_room = room_within(concurrency).min(max_poll);
        self.fetching.coalesce_until =
            self.fetching
                .coalesce
                .wait_until(own_room, concurrency.min(max_poll), unfinished, now);
        if self.fetching.coalesce_until.is_some() {
            return false;
        }
        // Right after a partition's resume, a small fetch (see `key_waits`).
        let max = match self.waits.key_waits.take_fetch_limit() {
            Some(most) => max.min(u32::try_from(most).unwrap_or(u32::MAX)),
            None => max,
        };
        self.fetching.future = Some(Box::pin(self.source.fetch(max)));
        self.fetching.started = now;
        self.fetching.asked = max;
        true
    }

    /// How many partition leaders the source sends requests to now; sizes the slot table and the
    /// route's share for records fetched ahead from the most it has seen (never shrunk, so no held
    /// record is ever outside them), while the records fetched ahead follow the leaders of now.
    fn fit_leaders(&mut self) -> usize {
        let leaders = self.source.fetch_requests().max(1);
        if leaders <= self.fetching.leaders {
            return leaders;
        }
        self.fetching.leaders = leaders;
        let unfinished = self
            .config
            .concurrency
            .saturating_add(self.fetching.ahead.most(leaders));
        if self.routes.set_capacity(unfinished) {
            self.sync_route_pauses();
        }
        self.slots.grow(
            unfinished
                .saturating_mul(3)
                .saturating_add(self.config.max_held()),
        );
        leaders
    }

    fn on_fetched(&mut self, result: Result<Vec<Delivery>>, now: Instant) {
        let took = now.saturating_duration_since(self.fetching.started);
        self.observer
            .fetch_ended(took, result.as_ref().ok().map(Vec::as_slice));
        let batch = match result {
            Ok(batch) => batch,
            Err(err) if ends_the_worker(err.kind()) => {
                if err.kind() == ErrorKind::Closed {
                    tracing::error!(error = %err, "the source closed: shutting down");
                } else {
                    tracing::error!(error = %err, "the source cannot go on: releasing what the worker holds and stopping");
                }
                self.fatal = Some(err);
                self.begin_shutdown(now);
                return;
            }
            Err(err) => {
                if self.fetching.backoff == FETCH_BACKOFF {
                    self.health.set_fetch_failure(Some(err.to_string()));
                }
                tracing::warn!(error = %err, retry_in = ?self.fetching.backoff, "fetch failed");
                self.fetching.not_before = Some(now + self.fetching.backoff);
                self.fetching.backoff = (self.fetching.backoff * 2).min(MAX_FETCH_BACKOFF);
                return;
            }
        };
        if self.fetching.backoff != FETCH_BACKOFF {
            self.health.set_fetch_failure(None);
        }
        self.fetching.backoff = FETCH_BACKOFF;
        self.fetching
            .coalesce
            .fetched(self.fetching.asked as usize, batch.len());
        self.fetching.ahead.fetched(took, batch.len());
        if !batch.is_empty() || took >= WAITED_FOR_RECORDS {
            self.fetching.empty_pause = FIRST_EMPTY_FETCH_PAUSE;
        } else {
            self.fetching.not_before = Some(now + self.fetching.empty_pause);
            self.fetching.empty_pause = (self.fetching.empty_pause * 2).min(MAX_EMPTY_FETCH_PAUSE);
        }
        if self.routes.fetched(self.fetching.asked as usize, &batch) {
            self.sync_route_pauses();
        }
        for delivery in batch {
            self.admit(delivery, now);
        }
    }

    /// Gives a fetched record a slot, a span and its first phase.
    fn admit(&mut self, delivery: Delivery, now: Instant) {
        let id = delivery.id.clone();
        self.observer.arrived(&id.topic, delivery.delivery_count);
        let span = tracing::info_span!(
            target: telemetry::SPAN_TARGET,
            "process",
            otel.kind = "consumer",
            otel.status_code = Empty,
            messaging.system = "kafka",
            messaging.operation.type = "process",
            messaging.operation.name = "process",
            messaging.destination.name = &*id.topic,
            messaging.consumer.group.name = self.group.as_deref(),
            messaging.destination.partition.id = id.partition,
            messaging.kafka.offset = id.offset,
            share_worker.delivery_count = i64::from(delivery.delivery_count),
            share_worker.outcome = Empty,
            share_worker.handler_ms = Empty,
            error.type = Empty,
        );
        telemetry::continue_trace(&span, &delivery.headers);
        let lookup = self.routes.route_for(&id.topic);
        let route = lookup.map(|lookup| lookup.route);
        let from_delay = lookup.is_some_and(|lookup| lookup.from_delay);
        let tier = lookup.map_or(0, |lookup| lookup.tier);
        if !delivery.lock_duration.is_zero() {
            self.pace.shortest_lock = self.pace.shortest_lock.min(delivery.lock_duration);
        }
        let renew_every = self.config.renew_every(delivery.lock_duration);
        let next_renewal = renew_every.map(|every| delivery.acquired_at + every);
        let delay_of = route
            .filter(|_| from_delay)
            .and_then(|route| self.routes.topic(route))
            .map(|topic| (&id, &**topic));
        let waits = Waits::read(
            &delivery.headers,
            delay_of,
            self.paths.policy.delivery_limit(),
        );
        let attempt = waits.prior.saturating_add(delivery.delivery_count);
        let wait = waits
            .not_before
            .and_then(|at| at.duration_since(self.waits.wall_clock(now)).ok())
            .filter(|wait| !wait.is_zero());
        let undecodable = delivery
            .undecodable
            .as_deref()
            .map(|u| u.error.as_str())
            .or(waits.bad.as_deref());
        let (life, step) = Life::arrive(
            Arrival {
                attempt,
                delivery_count: delivery.delivery_count,
                undecodable,
                routed: route.is_some(),
                wait,
                not_before_text: waits.not_before_text.as_deref(),
                from_delay,
                in_its_tier: wait.is_none_or(|wait| crate::delay::tier_of(wait) == tier),
            },
            self.paths.rules(self.config, now),
        );
        // Kept for the dead-letter sink and for moves to the delay topic: a handler consumes its
        // job. Reference counts only, plus the header list when the record has headers.
        // A route with a breaker or a cool-down keeps one too: a record that fails while its
        // route is paused runs again, and its handler consumed it.
        let letter = (self.paths.dead_letters.is_some()
            || self.paths.moves.is_some()
            || route.is_some_and(|route| self.control.breakers.keeps_copies(route)))
        .then(|| delivery.clone());
        let keyed = route.is_some_and(|route| self.waits.limits.keyed(route));
        let key = delivery
            .key
            .as_deref()
            .filter(|_| keyed)
            .map(|key| self.waits.keys.hash(key));
        let job = InFlight {
            id,
            life,
            cancel: CancellationToken::new(),
            renew_every,
            next_renewal: None,
            letter,
            route,
            span,
            parked: None,
            key,
            holds_key: false,
            throttle: None,
            probe: false,
            awaited_verdict: false,
            counted: Counted::default(),
            origin: waits.origin,
            not_before: waits.not_before,
            job_id: None,
        };
        let Some(key) = self.slots.insert(job) else {
            tracing::warn!(record = %delivery.id, "the source returned more records than asked for: releasing");
            drop(self.source.acknowledge(&delivery.id, AckKind::Release));
            return;
        };
        if let Some(route) = route {
            self.count_route(route, true);
        }
        if let Some(job) = self.slots.get(key) {
            self.observer.step(
                Subject {
                    id: &job.id,
                    span: &job.span,
                },
                None,
                &step,
                std::time::Duration::ZERO,
            );
        }
        if life.renewable()
            && let (Some(at), Some(job)) = (next_renewal, self.slots.get_mut(key))
        {
            job.next_renewal = Some(at);
            self.tasks.renewals.schedule(key, at);
        }
        self.perform(key, Phase::Admitting, step, Some(delivery), now);
    }
}

/// What a record's headers say about waiting: when it may run and, on a delay-topic record, the
/// attempts it used before and where it came from. A header that does not parse makes the record
/// undecodable (dead-lettered, reason `decode`): running it at the wrong time could be worse.
///
/// Anyone who can write a delay topic can write these headers, so a delay-topic record's are
/// obeyed only when they are what the worker writes: an origin that is the route the delay topic
/// belongs to (with a partition and offset at or above 0), and an attempt count within the group's
/// delivery limit. Anything else makes the record an undecodable record of that route; its
/// letter keeps the headers as they came, for people to see, and goes to the route's own
/// dead-letter topic.
#[derive(Debug, Default)]
struct Waits {
    not_before: Option<SystemTime>,
    /// The `share.not-before` header as written, for errors.
    not_before_text: Option<String>,
    prior: u16,
    origin: Option<Origin>,
    bad: Option<String>,
}

impl Waits {
    /// `delay_of`: for a record of a delay topic, the record and its route's topic.
    fn read(record: &[Header], delay_of: Option<(&DeliveryId, &str)>, delivery_limit: u16) -> Self {
        let mut waits = Waits::default();
        let last = |key: &str| {
            record
                .iter()
                .rev()
                .find(|h| &*h.key == key)
                .map(|h| h.value.as_deref().unwrap_or_default())
        };
        if let Some(value) = last(headers::NOT_BEFORE) {
            match parse_not_before(value) {
                Ok(at) => {
                    waits.not_before = Some(at);
                    waits.not_before_text = Some(String::from_utf8_lossy(value).trim().to_owned());
                }
                Err(err) => waits.bad = Some(err),
            }
        }
        let Some((id, route_topic)) = delay_of else {
            return waits;
        };
        match Self::provenance(&last, id, route_topic, delivery_limit) {
            Ok((prior, origin)) => {
                waits.prior = prior;
                waits.origin = Some(origin);
            }
            Err(err) => waits.bad = waits.bad.or(Some(err)),
        }
        waits
    }

    /// A delay-topic record's `share.attempt` and `share.origin.*`, if they are the worker's.
    fn provenance<'h>(
        last: &impl Fn(&str) -> Option<&'h [u8]>,
        id: &DeliveryId,
        route_topic: &str,
        delivery_limit: u16,
    ) -> Result<(u16, Origin), String> {
        let shown = |value: &[u8]| {
            let text = String::from_utf8_lossy(value);
            let mut shown: String = text.chars().take(64).collect();
            if text.chars().count() > 64 {
                shown.push('…');
            }
            format!("{shown:?}")
        };
        let refused = |why: String| {
            format!(
                "delay-topic record {}/{}@{} (route {route_topic}): {why}; its delay headers are not obeyed",
                id.topic, id.partition, id.offset
            )
        };
        let number = |key: &str, max: i64| -> Result<i64, String> {
            let value = last(key).ok_or_else(|| refused(format!("{key} is missing")))?;
            std::str::from_utf8(value)
                .ok()
                .and_then(|text| text.trim().parse::<i64>().ok())
                .filter(|n| (0..=max).contains(n))
                .ok_or_else(|| {
                    refused(format!(
                        "{key} {} is not a number from 0 to {max}",
                        shown(value)
                    ))
                })
        };
        let prior = number(headers::ATTEMPT, i64::from(delivery_limit))?;
        let topic = last(headers::ORIGIN_TOPIC)
            .ok_or_else(|| refused(format!("{} is missing", headers::ORIGIN_TOPIC)))?;
        if topic != route_topic.as_bytes() {
            return Err(refused(format!(
                "{} {} is not the route this delay topic belongs to",
                headers::ORIGIN_TOPIC,
                shown(topic)
            )));
        }
        let partition = number(headers::ORIGIN_PARTITION, i64::from(i32::MAX))?;
        let offset = number(headers::ORIGIN_OFFSET, i64::MAX)?;
        Ok((
            u16::try_from(prior).unwrap_or(u16::MAX),
            Origin {
                topic: Arc::from(route_topic),
                partition: i32::try_from(partition).unwrap_or(i32::MAX),
                offset,
            },
        ))
    }
}
