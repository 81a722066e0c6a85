//! Fetches, and the records that arrive from them: each gets a slot, a span and its first phase.

use std::convert::Infallible;
use std::task::{Context, Poll};

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::Service;
use tracing::field::Empty;

use crate::source::{AckKind, Delivery, ShareSource};
use crate::telemetry;
use crate::{ErrorKind, Job, Outcome, Result};

use super::super::lifecycle::{Arrival, Life, Phase};
use super::super::observer::Subject;
use super::super::slots::InFlight;
use super::{Dispatcher, EMPTY_FETCH_PAUSE, FETCH_BACKOFF, MAX_FETCH_BACKOFF, ends_the_worker};

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

    /// Asks for min(concurrency − unfinished records, max_poll_records, what the fullest route
    /// may still take) records, if fetching is allowed now. Records whose acknowledgement is on the way do not count: the fetch carries (or
    /// overlaps) their acknowledgements, so a finished handler's successor does not wait a round
    /// trip for the broker's answer first.
    pub(super) fn start_fetch(&mut self, now: Instant) -> bool {
        if self.stopping.is_some() || self.fetching.future.is_some() || self.dlq_failing() {
            return false;
        }
        if let Some(at) = self.fetching.not_before {
            if now < at {
                return false;
            }
            self.fetching.not_before = None;
        }
        let unfinished = self.slots.held().saturating_sub(self.acking.len());
        let room = self
            .config
            .concurrency
            .saturating_sub(unfinished)
            .min(self.slots.free())
            .min(self.routes.fetch_room(self.route_share));
        if room == 0 {
            return false;
        }
        let max = u32::try_from(room)
            .unwrap_or(u32::MAX)
            .min(self.config.max_poll_records);
        self.fetching.future = Some(Box::pin(self.source.fetch(max)));
        self.fetching.started = now;
        true
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
        if batch.is_empty() {
            self.fetching.not_before = Some(now + EMPTY_FETCH_PAUSE);
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
        let route = self.routes.route_for(&id.topic);
        if !delivery.lock_duration.is_zero() {
            self.shortest_lock = self.shortest_lock.min(delivery.lock_duration);
        }
        let renew_every = self.config.renew_every(delivery.lock_duration);
        let next_renewal = renew_every.map(|every| delivery.acquired_at + every);
        let (life, step) = Life::arrive(
            Arrival {
                attempt: delivery.delivery_count,
                undecodable: delivery.undecodable.as_deref().map(|u| u.error.as_str()),
                routed: route.is_some(),
            },
            rules!(self, now),
        );
        // Kept for the dead-letter sink: a handler consumes its job. Reference counts only, plus
        // the header list when the record has headers.
        let letter = self.dead_letters.as_ref().map(|_| delivery.clone());
        let job = InFlight {
            id,
            life,
            cancel: CancellationToken::new(),
            renew_every,
            next_renewal: None,
            letter,
            route,
            span,
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
            self.renewals.schedule(key, at);
        }
        self.perform(key, Phase::Queued, step, Some(delivery), now);
    }
}
