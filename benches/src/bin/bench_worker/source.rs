//! A bench-only [`ShareSource`] around the real one: it watches what the worker fetches,
//! acknowledges and renews without changing any of it.
//!
//! - Every fetch: deliveries with a delivery count above 1, the highest delivery count, and the
//!   shortest and longest lock duration the source reported.
//! - Every renewal: how many, and when the first and the last were queued.
//! - With latency timing on: each delivery's record timestamp is kept by [`DeliveryId`] at fetch;
//!   when an ACCEPT's receipt resolves OK (the broker answered the acknowledgement), now − record
//!   timestamp goes into the latency list. That is produce time (CreateTime, set by the producer)
//!   to the broker's answer to the acknowledgement, as the worker learns it.
//! - With profiling on (`--profile`): fetch calls and their durations, the time between fetches,
//!   how long each record is held from its fetch's return to its acknowledge call, and how long the
//!   acknowledgement then takes to be answered (sums, for averages in the summary line).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use worker_core::Result;
use worker_core::source::{AckKind, AckReceipt, Delivery, DeliveryId, ShareSource};

/// What [`BenchSource`] saw; shared with `main` for the summary line.
#[derive(Default)]
pub(crate) struct Observed {
    pub(crate) fetched: AtomicU64,
    pub(crate) redelivered: AtomicU64,
    pub(crate) max_delivery_count: AtomicU64,
    pub(crate) min_lock_ms: AtomicU64,
    pub(crate) max_lock_ms: AtomicU64,
    pub(crate) renews: AtomicU64,
    renew_span: Mutex<Option<(Instant, Instant)>>,
    /// Record timestamps by delivery, only while latency timing is on.
    pending: Option<Mutex<HashMap<DeliveryId, i64>>>,
    /// Produce → acknowledgement answered, milliseconds.
    latencies: Mutex<Vec<u32>>,
    profile: Option<Profile>,
}

/// Where a record's slot time goes (sums in microseconds).
#[derive(Default)]
pub(crate) struct Profile {
    fetches: AtomicU64,
    empty_fetches: AtomicU64,
    fetch_us: AtomicU64,
    gap_us: AtomicU64,
    last_fetch_end: Mutex<Option<Instant>>,
    fetched_at: Mutex<HashMap<DeliveryId, Instant>>,
    held: AtomicU64,
    held_us: AtomicU64,
    answered: AtomicU64,
    answer_us: AtomicU64,
}

impl Observed {
    pub(crate) fn new(timing: bool, profile: bool) -> Arc<Self> {
        Arc::new(Observed {
            min_lock_ms: AtomicU64::new(u64::MAX),
            pending: timing.then(|| Mutex::new(HashMap::new())),
            profile: profile.then(Profile::default),
            ..Observed::default()
        })
    }

    /// Seconds from the first to the last renewal queued (0 when fewer than two).
    pub(crate) fn renew_span_s(&self) -> f64 {
        match *self.renew_span.lock().unwrap() {
            Some((first, last)) => (last - first).as_secs_f64(),
            None => 0.0,
        }
    }

    /// `{"p50":..,"p99":..,"p999":..,"max":..,"count":..}` in milliseconds, or `null` when empty.
    pub(crate) fn latency_json(&self) -> String {
        let mut all = self.latencies.lock().unwrap().clone();
        if all.is_empty() {
            return "null".to_owned();
        }
        all.sort_unstable();
        let q = |q: f64| {
            let rank = ((q * all.len() as f64).ceil() as usize).clamp(1, all.len());
            all[rank - 1]
        };
        format!(
            "{{\"p50\":{},\"p99\":{},\"p999\":{},\"max\":{},\"count\":{}}}",
            q(0.50),
            q(0.99),
            q(0.999),
            all[all.len() - 1],
            all.len()
        )
    }

    /// `{"fetches":..,"empty_fetches":..,"avg_fetch_ms":..,"avg_gap_ms":..,"avg_records_per_fetch":..,
    /// "avg_held_ms":..,"avg_ack_answer_ms":..}` or `null`.
    pub(crate) fn profile_json(&self) -> String {
        let Some(p) = &self.profile else {
            return "null".to_owned();
        };
        let avg = |sum: &AtomicU64, n: &AtomicU64| {
            sum.load(Ordering::Relaxed) as f64 / 1000.0 / n.load(Ordering::Relaxed).max(1) as f64
        };
        let fetches = p.fetches.load(Ordering::Relaxed);
        format!(
            "{{\"fetches\":{fetches},\"empty_fetches\":{},\"avg_fetch_ms\":{:.2},\"avg_gap_ms\":{:.2},\"avg_records_per_fetch\":{:.1},\"avg_held_ms\":{:.2},\"avg_ack_answer_ms\":{:.2}}}",
            p.empty_fetches.load(Ordering::Relaxed),
            avg(&p.fetch_us, &p.fetches),
            avg(&p.gap_us, &p.fetches),
            self.fetched.load(Ordering::Relaxed) as f64 / fetches.max(1) as f64,
            avg(&p.held_us, &p.held),
            avg(&p.answer_us, &p.answered),
        )
    }

    fn saw(&self, delivery: &Delivery) {
        self.fetched.fetch_add(1, Ordering::Relaxed);
        let count = u64::from(delivery.delivery_count);
        if count > 1 {
            self.redelivered.fetch_add(1, Ordering::Relaxed);
        }
        self.max_delivery_count.fetch_max(count, Ordering::Relaxed);
        let lock_ms = delivery.lock_duration.as_millis() as u64;
        self.min_lock_ms.fetch_min(lock_ms, Ordering::Relaxed);
        self.max_lock_ms.fetch_max(lock_ms, Ordering::Relaxed);
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_millis() as i64
}

/// The wrapper the bench worker runs on.
pub(crate) struct BenchSource<S> {
    inner: S,
    observed: Arc<Observed>,
}

impl<S> BenchSource<S> {
    pub(crate) fn new(inner: S, observed: Arc<Observed>) -> Self {
        BenchSource { inner, observed }
    }
}

impl<S: ShareSource> ShareSource for BenchSource<S> {
    async fn fetch(&self, max_records: u32) -> Result<Vec<Delivery>> {
        let started = Instant::now();
        let deliveries = self.inner.fetch(max_records).await?;
        if let Some(p) = &self.observed.profile {
            let now = Instant::now();
            p.fetches.fetch_add(1, Ordering::Relaxed);
            if deliveries.is_empty() {
                p.empty_fetches.fetch_add(1, Ordering::Relaxed);
            }
            p.fetch_us
                .fetch_add((now - started).as_micros() as u64, Ordering::Relaxed);
            if let Some(last) = p.last_fetch_end.lock().unwrap().replace(now) {
                p.gap_us.fetch_add(
                    started.saturating_duration_since(last).as_micros() as u64,
                    Ordering::Relaxed,
                );
            }
            let mut at = p.fetched_at.lock().unwrap();
            for delivery in &deliveries {
                at.insert(delivery.id.clone(), now);
            }
        }
        for delivery in &deliveries {
            self.observed.saw(delivery);
        }
        if let Some(pending) = &self.observed.pending {
            let mut pending = pending.lock().unwrap();
            for delivery in &deliveries {
                pending.insert(delivery.id.clone(), delivery.timestamp);
            }
        }
        Ok(deliveries)
    }

    fn acknowledge(&self, id: &DeliveryId, kind: AckKind) -> AckReceipt {
        let receipt = self.inner.acknowledge(id, kind);
        let receipt = match &self.observed.profile {
            Some(p) => {
                let now = Instant::now();
                if let Some(at) = p.fetched_at.lock().unwrap().remove(id) {
                    p.held.fetch_add(1, Ordering::Relaxed);
                    p.held_us
                        .fetch_add((now - at).as_micros() as u64, Ordering::Relaxed);
                }
                let (answer, ours) = AckReceipt::channel();
                let observed = self.observed.clone();
                tokio::spawn(async move {
                    let result = receipt.await;
                    if let Some(p) = &observed.profile {
                        p.answered.fetch_add(1, Ordering::Relaxed);
                        p.answer_us
                            .fetch_add(now.elapsed().as_micros() as u64, Ordering::Relaxed);
                    }
                    answer.send(result);
                });
                ours
            }
            None => receipt,
        };
        let Some(pending) = &self.observed.pending else {
            return receipt;
        };
        let timestamp = pending.lock().unwrap().remove(id);
        let (Some(timestamp), AckKind::Accept, Ok(runtime)) =
            (timestamp, kind, tokio::runtime::Handle::try_current())
        else {
            return receipt;
        };
        let (answer, ours) = AckReceipt::channel();
        let observed = self.observed.clone();
        runtime.spawn(async move {
            let result = receipt.await;
            if result.is_ok() {
                let ms = (now_ms() - timestamp).clamp(0, i64::from(u32::MAX)) as u32;
                observed.latencies.lock().unwrap().push(ms);
            }
            answer.send(result);
        });
        ours
    }

    fn renew(&self, id: &DeliveryId) -> AckReceipt {
        self.observed.renews.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        {
            let mut span = self.observed.renew_span.lock().unwrap();
            let first = span.map_or(now, |(first, _)| first);
            *span = Some((first, now));
        }
        self.inner.renew(id)
    }

    async fn close(&self) -> Result<()> {
        self.inner.close().await
    }

    async fn delivery_limit(&self) -> Result<Option<u16>> {
        self.inner.delivery_limit().await
    }

    fn group(&self) -> Option<&str> {
        self.inner.group()
    }

    fn fetch_requests(&self) -> usize {
        self.inner.fetch_requests()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_quantiles_are_nearest_rank() {
        let observed = Observed::new(true, false);
        assert_eq!(observed.latency_json(), "null");
        observed
            .latencies
            .lock()
            .unwrap()
            .extend((1..=1000).rev().map(|ms| ms as u32));
        assert_eq!(
            observed.latency_json(),
            "{\"p50\":500,\"p99\":990,\"p999\":999,\"max\":1000,\"count\":1000}"
        );
    }
}
