//! The overview's data, sampled in the background every `ui.sample-every`: the group (members,
//! assignments), its start offset and lag per partition, the dead-letter topics' growth, and
//! with a worker in the process its rates and handler latency. A page only reads the last
//! samples; no request makes the dashboard call the cluster for the overview.
//!
//! Where each number comes from:
//! - group, members, lag: ShareGroupDescribe + DescribeShareGroupOffsets (both modes);
//! - dead-lettered/s: the growth of the dead-letter topics' end offsets (both modes; markers
//!   written by replays count too);
//! - processed/s, retried/s, handler p50/p99: only the worker's own `/ui` sees them, from its
//!   [`WorkerHealth`] counts and its handler-duration histogram. A standalone `share-worker ui`
//!   has no worker in its process and shows no such series.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};
use worker_core::cron::CronScheduler;
use worker_core::kafka::{Admin, PartitionOffsets, ShareGroupDescription};
use worker_core::runtime::WorkerHealth;
use worker_core::security::Security;
use worker_core::telemetry::names;

use super::dlq_index::DlqIndex;

/// Samples kept for the charts.
pub(crate) const HISTORY: usize = 120;
/// The handler-duration histogram, as the Prometheus exporter names it.
const HANDLER_DURATION: &str = "share_worker_handler_duration_seconds";
/// The route slots gauge, as the Prometheus exporter names it.
const ROUTE_SLOTS: &str = "share_worker_route_slots";

/// A worker running in this process, for the embedded `/ui`.
#[derive(Clone, Debug)]
pub(crate) struct WorkerView {
    pub(crate) registry: prometheus::Registry,
    /// Set once the worker is built.
    pub(crate) health: Arc<OnceLock<WorkerHealth>>,
}

/// One chart point.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Point {
    /// Ms since the epoch.
    pub(crate) at_ms: i64,
    pub(crate) lag: Option<i64>,
    pub(crate) dead_lettered_per_s: Option<f64>,
    pub(crate) processed_per_s: Option<f64>,
    pub(crate) retried_per_s: Option<f64>,
    pub(crate) p50_ms: Option<f64>,
    pub(crate) p99_ms: Option<f64>,
}

/// A periodic job as the overview shows it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ScheduleView {
    pub(crate) name: String,
    /// The schedule as configured (`every 10s`, `"0 9 * * *" in Europe/Berlin`).
    pub(crate) when: String,
    pub(crate) topic: String,
    /// Its last firing (ms since the epoch), if any.
    pub(crate) last: Option<i64>,
    /// Its next tick (ms since the epoch).
    pub(crate) next: Option<i64>,
    /// Whether it has missed two ticks since its last firing.
    pub(crate) overdue: bool,
}

/// A route that is a lane (has a priority or a weight), as configured.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Lane {
    pub(crate) topic: String,
    pub(crate) priority: Option<u8>,
    pub(crate) weight: Option<u32>,
}

/// The last sample of the group and the chart history.
#[derive(Debug, Default)]
pub(crate) struct Samples {
    /// `Err`: why the group could not be described.
    pub(crate) group: Option<Result<ShareGroupDescription, String>>,
    pub(crate) offsets: Vec<PartitionOffsets>,
    pub(crate) sampled_at_ms: Option<i64>,
    pub(crate) history: VecDeque<Point>,
    /// Whether a worker runs in this process (the embedded `/ui`).
    pub(crate) embedded: bool,
    /// The routes that are lanes.
    pub(crate) lanes: Vec<Lane>,
    /// Records handled per second by this process's worker, per topic, between the last two
    /// samples (embedded only).
    pub(crate) handled_per_s: BTreeMap<String, f64>,
    /// The slots each route of this process's worker may hold now (embedded only).
    pub(crate) slots: BTreeMap<String, f64>,
    /// The periodic jobs with their last and next firings, as last read.
    pub(crate) schedules: Vec<ScheduleView>,
    /// Why the last read of the firings failed, if it did.
    pub(crate) schedules_error: Option<String>,
}

impl Samples {
    pub(crate) fn total_lag(&self) -> Option<i64> {
        total_lag(&self.offsets)
    }

    /// `topic`'s lag: the sum over its partitions whose lag is known.
    pub(crate) fn topic_lag(&self, topic: &str) -> Option<i64> {
        let of_topic: Vec<PartitionOffsets> = self
            .offsets
            .iter()
            .filter(|p| p.topic == topic)
            .cloned()
            .collect();
        total_lag(&of_topic)
    }
}

fn total_lag(offsets: &[PartitionOffsets]) -> Option<i64> {
    let known: Vec<i64> = offsets.iter().map(|p| p.lag).filter(|l| *l >= 0).collect();
    (!known.is_empty()).then(|| known.iter().sum())
}

/// The counters a rate is computed from, as of one sample.
#[derive(Clone, Debug, Default)]
struct Raw {
    at: Option<Instant>,
    /// The dead-letter topics' summed end offsets; `None` until every index has looked them up.
    dlq_end: Option<i64>,
    processed: u64,
    retried: u64,
    buckets: Vec<(f64, u64)>,
    /// Records handled per topic.
    by_topic: BTreeMap<String, u64>,
}

/// What the sampler asks.
pub(crate) struct Sources {
    pub(crate) bootstrap: String,
    pub(crate) security: Security,
    pub(crate) group: String,
    pub(crate) topics: Vec<String>,
    pub(crate) dlq: Arc<Vec<DlqIndex>>,
    pub(crate) worker: Option<WorkerView>,
    pub(crate) lanes: Vec<Lane>,
    /// The group's periodic jobs, whose firings are read from the cron topic.
    pub(crate) cron: Option<CronScheduler>,
}

/// Samples every `every` into `samples` until aborted.
pub(crate) fn spawn(
    sources: Sources,
    every: Duration,
    samples: Arc<Mutex<Samples>>,
) -> JoinHandle<()> {
    {
        let mut samples = samples.lock().unwrap_or_else(PoisonError::into_inner);
        samples.embedded = sources.worker.is_some();
        samples.lanes = sources.lanes.clone();
    }
    tokio::spawn(async move {
        let mut admin: Option<Admin> = None;
        let mut raw = Raw::default();
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            if admin.is_none() {
                match Admin::connect_with(sources.bootstrap.clone(), &sources.security).await {
                    Ok(connected) => admin = Some(connected),
                    Err(err) => {
                        let why = format!("cannot connect to {}: {err}", sources.bootstrap);
                        lock(&samples).group = Some(Err(why));
                        continue;
                    }
                }
            }
            let Some(connected) = &admin else { continue };
            let described = connected.describe_share_group(&sources.group).await;
            let topics: Vec<&str> = sources.topics.iter().map(String::as_str).collect();
            let offsets = connected.share_group_backlog(&sources.group, &topics).await;
            let now = Instant::now();
            let next = Raw {
                at: Some(now),
                dlq_end: sources
                    .dlq
                    .iter()
                    .map(|index| index.with(|s| s.opened.then(|| s.end_total())))
                    .sum(),
                ..worker_counts(sources.worker.as_ref())
            };
            let point = point(&raw, &next, sources.worker.is_some());
            let handled_per_s = topic_rates(&raw, &next);
            let schedules = match &sources.cron {
                Some(cron) => Some(schedules(cron.clone(), every).await),
                None => None,
            };
            let slots = sources
                .worker
                .as_ref()
                .map(|worker| gauge_by_topic(&worker.registry, ROUTE_SLOTS))
                .unwrap_or_default();
            raw = next;
            let mut samples = lock(&samples);
            samples.handled_per_s = handled_per_s;
            samples.slots = slots;
            match schedules {
                Some(Ok(schedules)) => {
                    samples.schedules = schedules;
                    samples.schedules_error = None;
                }
                Some(Err(why)) => samples.schedules_error = Some(why),
                None => {}
            }
            match described {
                Ok(group) => samples.group = Some(Ok(group)),
                Err(err) => {
                    samples.group = Some(Err(format!("describing {}: {err}", sources.group)));
                    admin = None;
                }
            }
            if let Ok(offsets) = offsets {
                samples.offsets = offsets;
            }
            let at_ms = now_ms();
            samples.sampled_at_ms = Some(at_ms);
            let lag = samples.total_lag();
            samples.history.push_back(Point {
                at_ms,
                lag,
                ..point
            });
            while samples.history.len() > HISTORY {
                samples.history.pop_front();
            }
        }
    })
}

fn lock(samples: &Mutex<Samples>) -> std::sync::MutexGuard<'_, Samples> {
    samples.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The worker's counters now (zero without a worker).
fn worker_counts(worker: Option<&WorkerView>) -> Raw {
    let Some(worker) = worker else {
        return Raw::default();
    };
    let retried = worker
        .health
        .get()
        .map_or(0, |h| h.progress().summary.retried);
    let buckets = handler_buckets(&worker.registry);
    let processed = buckets.last().map_or(0, |(_, count)| *count);
    Raw {
        processed,
        retried,
        buckets,
        by_topic: handled_by_topic(&worker.registry),
        ..Raw::default()
    }
}

/// Each job of `cron` with its last firing (read from the cron topic, within `limit`) and its
/// next tick.
async fn schedules(cron: CronScheduler, limit: Duration) -> Result<Vec<ScheduleView>, String> {
    let reader = cron.clone();
    let firings = tokio::task::spawn_blocking(move || reader.read_firings(limit))
        .await
        .map_err(|err| err.to_string())?
        .map_err(|err| err.to_string())?;
    let now = SystemTime::now();
    Ok(cron
        .jobs()
        .iter()
        .map(|job| {
            let schedule = job.schedule();
            ScheduleView {
                name: job.name().to_owned(),
                when: format!("{schedule:?}"),
                topic: job.topic().to_owned(),
                last: firings.get(job.name()).copied(),
                next: schedule.latest(now).and_then(|t| schedule.next_after(t)),
                overdue: firings
                    .get(job.name())
                    .is_some_and(|last| schedule.is_overdue(*last, now)),
            }
        })
        .collect())
}

/// A gauge's value per `topic` label.
fn gauge_by_topic(registry: &prometheus::Registry, name: &str) -> BTreeMap<String, f64> {
    let mut values = BTreeMap::new();
    for family in registry.gather() {
        if family.name() != name {
            continue;
        }
        for metric in family.get_metric() {
            if let Some(topic) = metric
                .get_label()
                .iter()
                .find(|label| label.name() == names::TOPIC)
            {
                values.insert(topic.value().to_owned(), metric.get_gauge().get_value());
            }
        }
    }
    values
}

/// The handler-duration histogram's count per `topic` label.
fn handled_by_topic(registry: &prometheus::Registry) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for family in registry.gather() {
        if family.name() != HANDLER_DURATION {
            continue;
        }
        for metric in family.get_metric() {
            let Some(topic) = metric
                .get_label()
                .iter()
                .find(|label| label.name() == names::TOPIC)
            else {
                continue;
            };
            *counts.entry(topic.value().to_owned()).or_default() +=
                metric.get_histogram().get_sample_count();
        }
    }
    counts
}

/// The seconds between two samples, when both were taken and some time passed.
fn seconds_between(before: &Raw, now: &Raw) -> Option<f64> {
    before
        .at
        .zip(now.at)
        .map(|(a, b)| b.duration_since(a).as_secs_f64())
        .filter(|s| *s > 0.0)
}

/// Records handled per second per topic between two samples.
fn topic_rates(before: &Raw, now: &Raw) -> BTreeMap<String, f64> {
    let Some(secs) = seconds_between(before, now) else {
        return BTreeMap::new();
    };
    now.by_topic
        .iter()
        .map(|(topic, count)| {
            let old = before.by_topic.get(topic).copied().unwrap_or(0);
            (topic.clone(), count.saturating_sub(old) as f64 / secs)
        })
        .collect()
}

/// The handler-duration histogram summed over its series: (upper bound, cumulative count), the
/// last bound infinite.
fn handler_buckets(registry: &prometheus::Registry) -> Vec<(f64, u64)> {
    let mut sums: Vec<(f64, u64)> = Vec::new();
    for family in registry.gather() {
        if family.name() != HANDLER_DURATION {
            continue;
        }
        for metric in family.get_metric() {
            let histogram = metric.get_histogram();
            for (i, bucket) in histogram.get_bucket().iter().enumerate() {
                match sums.get_mut(i) {
                    Some(sum) => sum.1 += bucket.cumulative_count(),
                    None => sums.push((bucket.upper_bound(), bucket.cumulative_count())),
                }
            }
            let count = histogram.get_sample_count();
            let last = histogram.get_bucket().len();
            match sums.get_mut(last) {
                Some(sum) => sum.1 += count,
                None => sums.push((f64::INFINITY, count)),
            }
        }
    }
    sums
}

/// The rates between two samples.
fn point(before: &Raw, now: &Raw, embedded: bool) -> Point {
    let Some(secs) = seconds_between(before, now) else {
        return Point::default();
    };
    let rate = |a: u64, b: u64| Some(b.saturating_sub(a) as f64 / secs);
    let dead = before
        .dlq_end
        .zip(now.dlq_end)
        .map(|(a, b)| (b - a).max(0) as f64 / secs);
    if !embedded {
        return Point {
            dead_lettered_per_s: dead,
            ..Point::default()
        };
    }
    let window = window(&before.buckets, &now.buckets);
    Point {
        dead_lettered_per_s: dead,
        processed_per_s: rate(before.processed, now.processed),
        retried_per_s: rate(before.retried, now.retried),
        p50_ms: quantile(&window, 0.5).map(|s| s * 1000.0),
        p99_ms: quantile(&window, 0.99).map(|s| s * 1000.0),
        ..Point::default()
    }
}

/// The bucket counts added between two samples of one histogram.
fn window(before: &[(f64, u64)], now: &[(f64, u64)]) -> Vec<(f64, u64)> {
    now.iter()
        .enumerate()
        .map(|(i, (bound, count))| {
            let old = before.get(i).map_or(0, |(_, c)| *c);
            (*bound, count.saturating_sub(old))
        })
        .collect()
}

/// The `q` quantile of cumulative buckets, interpolated within its bucket like Prometheus's
/// `histogram_quantile` (the last finite bound when it falls in the infinite one); `None`
/// without observations.
pub(crate) fn quantile(buckets: &[(f64, u64)], q: f64) -> Option<f64> {
    let total = buckets.last()?.1;
    if total == 0 {
        return None;
    }
    let rank = q * total as f64;
    let mut lower = (0.0, 0u64);
    for &(bound, count) in buckets {
        if count as f64 >= rank {
            if bound.is_infinite() {
                return Some(lower.0);
            }
            let inside = (count - lower.1) as f64;
            let into = if inside > 0.0 {
                (rank - lower.1 as f64) / inside
            } else {
                1.0
            };
            return Some(lower.0 + (bound - lower.0) * into);
        }
        lower = (bound, count);
    }
    Some(lower.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_within_their_bucket() {
        let buckets = [(0.01, 50), (0.1, 90), (1.0, 100), (f64::INFINITY, 100)];
        assert_eq!(quantile(&buckets, 0.5), Some(0.01));
        let p90 = quantile(&buckets, 0.9).unwrap();
        assert!((p90 - 0.1).abs() < 1e-9, "{p90}");
        let p99 = quantile(&buckets, 0.99).unwrap();
        assert!((p99 - 0.91).abs() < 1e-9, "{p99}");
        assert_eq!(quantile(&[(1.0, 0), (f64::INFINITY, 0)], 0.5), None);
        assert_eq!(quantile(&[(1.0, 0), (f64::INFINITY, 4)], 0.5), Some(1.0));
    }

    #[test]
    fn rates_come_from_the_difference_of_two_samples() {
        let start = Instant::now();
        let before = Raw {
            at: Some(start),
            dlq_end: Some(10),
            processed: 100,
            retried: 5,
            buckets: vec![(0.1, 100), (f64::INFINITY, 100)],
            by_topic: BTreeMap::from([("otp".to_owned(), 10), ("marketing".to_owned(), 90)]),
        };
        let now = Raw {
            at: Some(start + Duration::from_secs(2)),
            dlq_end: Some(14),
            processed: 300,
            retried: 9,
            buckets: vec![(0.1, 200), (f64::INFINITY, 300)],
            by_topic: BTreeMap::from([("otp".to_owned(), 50), ("marketing".to_owned(), 250)]),
        };
        assert_eq!(
            topic_rates(&before, &now),
            BTreeMap::from([("marketing".to_owned(), 80.0), ("otp".to_owned(), 20.0)])
        );
        let point = point(&before, &now, true);
        assert_eq!(point.processed_per_s, Some(100.0));
        assert_eq!(point.retried_per_s, Some(2.0));
        assert_eq!(point.dead_lettered_per_s, Some(2.0));
        assert_eq!(
            point.p99_ms,
            Some(100.0),
            "in the infinite bucket: the last bound"
        );
        let standalone = super::point(&before, &now, false);
        assert_eq!(standalone.processed_per_s, None);
        assert_eq!(standalone.dead_lettered_per_s, Some(2.0));
        let unread = Raw {
            dlq_end: None,
            ..before.clone()
        };
        assert_eq!(super::point(&unread, &now, false).dead_lettered_per_s, None);
    }
}
