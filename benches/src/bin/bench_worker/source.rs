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
}

impl Observed {
    pub(crate) fn new(timing: bool) -> Arc<Self> {
        Arc::new(Observed {
            min_lock_ms: AtomicU64::new(u64::MAX),
            pending: timing.then(|| Mutex::new(HashMap::new())),
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
        let deliveries = self.inner.fetch(max_records).await?;
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
}
