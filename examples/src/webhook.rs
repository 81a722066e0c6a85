//! A webhook notifier: a plain async fn, wrapped in tower layers (a timeout and a rate limit).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tower::ServiceBuilder;
use worker_core::handler::{Handler, JobError, Json, RetryOnErrorLayer, State};
use worker_core::{Job, Outcome};

/// The job payload: one event to deliver to a subscriber's URL.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Unique id of the event (receivers deduplicate on it).
    pub id: u64,
    /// Where to deliver it.
    pub url: String,
    /// What happened.
    pub kind: String,
}

/// A stand-in for the subscribers' HTTP endpoints: each delivery takes `latency`, except that the
/// first delivery of an event whose id is a multiple of `hang_every` hangs (so only a timeout ends it).
#[derive(Clone, Debug)]
pub struct FakeEndpoints {
    latency: Duration,
    hang_every: u64,
    deliveries: Arc<Mutex<HashMap<u64, u32>>>,
}

impl FakeEndpoints {
    /// Endpoints answering in `latency`, hanging once for every event id divisible by `hang_every`.
    pub fn new(latency: Duration, hang_every: u64) -> Self {
        Self {
            latency,
            hang_every: hang_every.max(1),
            deliveries: Arc::default(),
        }
    }

    /// Delivers one event.
    pub async fn post(&self, event: &Event) -> Result<(), String> {
        let attempt = {
            let mut deliveries = self
                .deliveries
                .lock()
                .map_err(|_| "endpoint state poisoned")?;
            let attempt = deliveries.entry(event.id).or_default();
            *attempt += 1;
            *attempt
        };
        if attempt == 1 && event.id.is_multiple_of(self.hang_every) {
            std::future::pending::<()>().await;
        }
        tokio::time::sleep(self.latency).await;
        Ok(())
    }

    /// How many times each event id was posted.
    pub fn deliveries(&self) -> HashMap<u64, u32> {
        self.deliveries
            .lock()
            .map(|d| d.clone())
            .unwrap_or_default()
    }
}

/// Delivers one event to its endpoint. An event whose URL is not `https://` can never be delivered:
/// it is rejected (and so dead-lettered with reason `rejected`).
pub async fn notify(
    State(endpoints): State<FakeEndpoints>,
    Json(event): Json<Event>,
) -> Result<(), JobError> {
    if !event.url.starts_with("https://") {
        return Err(JobError::permanent(format!(
            "refusing to post to {:?}: not https",
            event.url
        )));
    }
    endpoints.post(&event).await.map_err(JobError::retry)
}

/// The notifier as the service a route runs: at most `per_second` deliveries a second, each cut
/// off after `timeout` (a timed-out delivery is retried).
pub fn service(
    endpoints: FakeEndpoints,
    timeout: Duration,
    per_second: u64,
) -> impl tower::Service<
    Job,
    Response = Outcome,
    Error = std::convert::Infallible,
    Future: Send + 'static,
> + Send
+ 'static {
    ServiceBuilder::new()
        .layer(RetryOnErrorLayer::new())
        .timeout(timeout)
        .rate_limit(per_second, Duration::from_secs(1))
        .service(notify.with_state(endpoints))
}
