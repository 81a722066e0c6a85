//! [`LagMonitor`]: the share group's lag per partition as a gauge, sampled in the background.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Meter, ObservableGauge};
use tokio::task::JoinHandle;

use crate::kafka::{Admin, PartitionOffsets};

use super::names;
use crate::defaults::LAG_WHILE_CHANGING;

/// Samples a share group's lag on its topics (records not yet settled, per partition:
/// [`Admin::share_group_backlog`], which works it out from the offsets while the broker has none,
/// so a new group has a value from the first sample) and reports it as the
/// [`GROUP_LAG`](names::GROUP_LAG) gauge. The first sample is taken at once; then every
/// [`LAG_WHILE_CHANGING`] (or `every`, if shorter) while the total lag changes from one sample to
/// the next, and every `every` once it holds still.
///
/// Lag is the signal to scale workers on: it counts what the group has not finished, whichever
/// member holds it, and unlike consumer-group lag it does not stop at the first unacknowledged
/// record. One monitor per group is enough; every worker may run one (the values agree).
///
/// Sampling stops when the monitor is dropped.
#[derive(Debug)]
pub struct LagMonitor {
    latest: Arc<Mutex<Vec<PartitionOffsets>>>,
    task: JoinHandle<()>,
    _gauge: ObservableGauge<i64>,
}

impl LagMonitor {
    /// Starts sampling `group`'s lag on `topics` (the first sample at once, then as the type's
    /// docs say). Failed samples are logged and keep the previous values. Call within a Tokio
    /// runtime.
    pub fn start(
        admin: Admin,
        group: impl Into<String>,
        topics: Vec<String>,
        every: Duration,
        meter: &Meter,
    ) -> Self {
        let group: Arc<str> = Arc::from(group.into());
        let latest: Arc<Mutex<Vec<PartitionOffsets>>> = Arc::new(Mutex::new(Vec::new()));
        let observed = latest.clone();
        let label = group.clone();
        let gauge = meter
            .i64_observable_gauge(names::GROUP_LAG)
            .with_description("Records of a partition not yet settled by the share group.")
            .with_unit("{record}")
            .with_callback(move |observer| {
                let latest = observed.lock().unwrap_or_else(PoisonError::into_inner);
                for p in latest.iter().filter(|p| p.lag >= 0) {
                    observer.observe(
                        p.lag,
                        &[
                            KeyValue::new(names::GROUP, label.clone()),
                            KeyValue::new(names::TOPIC, p.topic.clone()),
                            KeyValue::new(names::PARTITION, i64::from(p.partition)),
                        ],
                    );
                }
            })
            .build();
        let task = tokio::spawn(sample(admin, group, topics, every, latest.clone()));
        Self {
            latest,
            task,
            _gauge: gauge,
        }
    }

    /// The last sample: start offset and lag per partition (lag -1 where the broker has none).
    pub fn latest(&self) -> Vec<PartitionOffsets> {
        self.latest
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for LagMonitor {
    fn drop(&mut self) {
        self.task.abort();
        // The gauge's callback stays registered with the provider: make it report nothing.
        self.latest
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }
}

async fn sample(
    admin: Admin,
    group: Arc<str>,
    topics: Vec<String>,
    every: Duration,
    latest: Arc<Mutex<Vec<PartitionOffsets>>>,
) {
    let topics: Vec<&str> = topics.iter().map(String::as_str).collect();
    let every = every.max(Duration::from_millis(100));
    let changing = every.min(LAG_WHILE_CHANGING);
    let mut last_total: Option<i64> = None;
    let mut failing = false;
    loop {
        let wait = match admin.share_group_backlog(&group, &topics).await {
            Ok(offsets) => {
                if failing {
                    tracing::info!(%group, "share-group lag sampling works again");
                    failing = false;
                }
                let total: i64 = offsets.iter().map(|p| p.lag.max(0)).sum();
                let steady = last_total == Some(total);
                last_total = Some(total);
                *latest.lock().unwrap_or_else(PoisonError::into_inner) = offsets;
                if steady { every } else { changing }
            }
            Err(err) => {
                if !failing {
                    tracing::warn!(%group, error = %err, "cannot sample the share group's lag: keeping the last values");
                    failing = true;
                }
                every
            }
        };
        tokio::time::sleep(wait).await;
    }
}
