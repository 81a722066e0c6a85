//! [`MemoryDlq`]: a dead-letter sink in memory, with failure injection.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::dlq::{DeadLetter, DlqError, DlqReason, DlqSink};
use crate::{Error, ErrorKind};

/// A [`DlqSink`] that keeps dead letters in memory, for tests. Cheap to clone: clones share the
/// same letters, so keep one to look inside while the worker owns another.
///
/// - **Looking inside:** [`letters`](Self::letters), [`len`](Self::len),
///   [`offsets`](Self::offsets), [`attempts`](Self::attempts) (writes tried, failed ones included).
/// - **Faults:** [`fail_writes`](Self::fail_writes) (every write fails until switched off, like a
///   broker that is down), [`fail_next`](Self::fail_next) (the next `n` writes fail),
///   [`fail_permanently`](Self::fail_permanently) (every write fails in a way no retry can mend,
///   like a write that is not authorised) and [`latency`](Self::latency) (each write takes this
///   long, in tokio time).
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use tower::service_fn;
/// use worker_core::dlq::DlqReason;
/// use worker_core::testing::{MemoryBroker, MemoryDlq};
/// use worker_core::{Job, Outcome, Worker};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> worker_core::Result<()> {
/// let broker = MemoryBroker::new();
/// broker.produce("sms", "not a phone number");
/// let dlq = MemoryDlq::new();
///
/// let worker = Worker::builder(broker.member("worker-1"))
///     .route("sms", service_fn(|_job: Job| async {
///         Ok::<_, std::convert::Infallible>(Outcome::undecodable("expected +<digits>: <text>"))
///     }))
///     .dlq(dlq.clone())
///     .build()?;
/// let shutdown = worker.shutdown_handle();
/// let running = tokio::spawn(worker.run());
/// while dlq.is_empty() || broker.counts().archived < 1 {
///     tokio::time::sleep(Duration::from_millis(10)).await;
/// }
/// shutdown.shutdown();
/// running.await.expect("the worker task")?;
/// assert_eq!(dlq.letters()[0].reason, DlqReason::Decode);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, Default)]
pub struct MemoryDlq {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    letters: Vec<DeadLetter>,
    attempts: u64,
    failing: bool,
    permanent: bool,
    fail_next: u64,
    latency: Duration,
}

impl MemoryDlq {
    /// An empty sink that accepts every write.
    pub fn new() -> Self {
        Self::default()
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every letter written so far, in order.
    pub fn letters(&self) -> Vec<DeadLetter> {
        self.inner().letters.clone()
    }

    /// How many letters were written.
    pub fn len(&self) -> usize {
        self.inner().letters.len()
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The source (topic, partition, offset) and reason of every letter, in order.
    pub fn offsets(&self) -> Vec<(String, i32, i64, DlqReason)> {
        self.inner()
            .letters
            .iter()
            .map(|l| {
                let id = &l.delivery.id;
                (id.topic.to_string(), id.partition, id.offset, l.reason)
            })
            .collect()
    }

    /// How many writes were tried, failed ones included.
    pub fn attempts(&self) -> u64 {
        self.inner().attempts
    }

    /// Fault injection: while `fail` is true every write fails with
    /// [`ErrorKind::Dlq`] and stores nothing.
    pub fn fail_writes(&self, fail: bool) {
        self.inner().failing = fail;
    }

    /// Fault injection: while `fail` is true every write fails with a
    /// [`Permanent`](crate::dlq::DlqErrorKind::Permanent) error and stores nothing.
    pub fn fail_permanently(&self, fail: bool) {
        self.inner().permanent = fail;
    }

    /// Fault injection: the next `n` writes fail.
    pub fn fail_next(&self, n: u64) {
        self.inner().fail_next = n;
    }

    /// Each write takes this long (tokio time) before it succeeds or fails. Default zero.
    pub fn latency(&self, latency: Duration) {
        self.inner().latency = latency;
    }
}

#[async_trait::async_trait]
impl DlqSink for MemoryDlq {
    async fn send(&self, letter: &DeadLetter) -> Result<(), DlqError> {
        let latency = self.inner().latency;
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        let mut inner = self.inner();
        inner.attempts += 1;
        if inner.permanent {
            return Err(DlqError::permanent(Error::new(
                ErrorKind::Dlq,
                format!(
                    "injected permanent failure writing {} to the memory DLQ",
                    letter.delivery.id
                ),
            )));
        }
        if inner.failing || inner.fail_next > 0 {
            inner.fail_next = inner.fail_next.saturating_sub(1);
            return Err(Error::new(
                ErrorKind::Dlq,
                format!(
                    "injected failure writing {} to the memory DLQ",
                    letter.delivery.id
                ),
            )
            .into());
        }
        inner.letters.push(letter.clone());
        Ok(())
    }
}
