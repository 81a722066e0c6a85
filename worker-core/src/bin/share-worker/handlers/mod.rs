//! The route handlers: each route becomes a tower `Service<Job, Response = Outcome, Error =
//! Infallible>`, wrapped in a `ConcurrencyLimit` when the route sets `concurrency`.

mod exec;
mod http;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use tower::limit::ConcurrencyLimit;
use tower::service_fn;
use tower::util::BoxService;
use worker_core::config::{DEFAULT_ROUTE_TIMEOUT, HandlerKind, RouteSection};
use worker_core::{Job, Outcome};

use crate::activity::Activity;

/// A route's service, boxed.
pub(crate) type RouteService = BoxService<Job, Outcome, Infallible>;

/// What one route does with a job.
#[derive(Debug)]
enum Handler {
    Noop(Duration),
    Exec(exec::Exec),
    Http(http::Http),
}

impl Handler {
    async fn handle(&self, job: &Job) -> Outcome {
        match self {
            Handler::Noop(delay) => {
                if !delay.is_zero() {
                    tokio::time::sleep(*delay).await;
                }
                Outcome::Accept
            }
            Handler::Exec(exec) => exec.handle(job).await,
            Handler::Http(http) => http.handle(job).await,
        }
    }
}

/// The service of `route` (validated by the config), counting its calls in `activity`.
pub(crate) fn service(
    route: &RouteSection,
    activity: Arc<Activity>,
) -> anyhow::Result<RouteService> {
    let timeout = route.timeout.unwrap_or(DEFAULT_ROUTE_TIMEOUT);
    let handler = Arc::new(match route.handler {
        HandlerKind::Noop => Handler::Noop(route.delay.unwrap_or_default()),
        HandlerKind::Exec => Handler::Exec(exec::Exec::new(route, timeout)?),
        HandlerKind::Http => Handler::Http(http::Http::new(route, timeout)?),
    });
    let service = service_fn(move |job: Job| {
        let handler = handler.clone();
        let activity = activity.clone();
        async move {
            let call = activity.start();
            let outcome = handler.handle(&job).await;
            call.finish(&outcome, job.attempt());
            Ok::<_, Infallible>(outcome)
        }
    });
    Ok(match route.concurrency {
        Some(limit) => BoxService::new(ConcurrencyLimit::new(service, limit)),
        None => BoxService::new(service),
    })
}
