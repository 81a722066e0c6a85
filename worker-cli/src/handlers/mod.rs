//! The route handlers: each route becomes a tower `Service<Job, Response = Outcome, Error =
//! Infallible>` (a batch route a `Service<Vec<Job>, Response = Vec<Outcome>>`), wrapped in a
//! `ConcurrencyLimit` when the route sets `concurrency`: calls in flight, records or batches.

mod batch;
mod exec;
mod http;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{DEFAULT_ROUTE_TIMEOUT, HandlerKind, RouteSection};
use tower::limit::ConcurrencyLimit;
use tower::service_fn;
use tower::util::{BoxCloneService, BoxService};
use worker_core::{Job, Outcome};

use crate::activity::Activity;

/// A route's service, boxed.
pub(crate) type RouteService = BoxService<Job, Outcome, Infallible>;

/// A batch route's service, boxed.
pub(crate) type BatchService = BoxCloneService<Vec<Job>, Vec<Outcome>, Infallible>;

/// What a route runs: one call per record, or one per batch.
pub(crate) enum RouteServices {
    Single(RouteService),
    Batch(BatchService),
}

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

/// A route's handler, built before the worker joins its group: a route that cannot start (a TLS
/// file that does not parse, say) stops the worker before it holds any record.
#[derive(Debug)]
pub(crate) struct RouteHandler {
    handler: RouteKind,
    concurrency: Option<usize>,
}

#[derive(Debug)]
enum RouteKind {
    Single(Handler),
    Batch(batch::HttpBatch),
}

/// The handler of `route` (validated by the config).
pub(crate) fn handler(route: &RouteSection) -> anyhow::Result<RouteHandler> {
    let timeout = route.timeout.unwrap_or(DEFAULT_ROUTE_TIMEOUT);
    let handler = match (route.handler, &route.batch) {
        (HandlerKind::Http, Some(batch)) => RouteKind::Batch(batch::HttpBatch::new(
            http::Http::new(route, timeout)?,
            batch.format,
        )),
        (_, Some(_)) => anyhow::bail!("route {}: `batch` applies to http routes only", route.topic),
        (HandlerKind::Noop, None) => {
            RouteKind::Single(Handler::Noop(route.delay.unwrap_or_default()))
        }
        (HandlerKind::Exec, None) => {
            RouteKind::Single(Handler::Exec(exec::Exec::new(route, timeout)?))
        }
        (HandlerKind::Http, None) => {
            RouteKind::Single(Handler::Http(http::Http::new(route, timeout)?))
        }
    };
    Ok(RouteHandler {
        handler,
        concurrency: route.concurrency,
    })
}

impl RouteHandler {
    /// The route's service, counting its calls (a batch's records each) in `activity`.
    pub(crate) fn into_services(self, activity: Arc<Activity>) -> RouteServices {
        let handler = match self.handler {
            RouteKind::Single(handler) => handler,
            RouteKind::Batch(batch) => {
                let batch = Arc::new(batch);
                let service = service_fn(move |jobs: Vec<Job>| {
                    let (batch, activity) = (batch.clone(), activity.clone());
                    async move {
                        let calls: Vec<_> = jobs.iter().map(|_| activity.start()).collect();
                        let outcomes = batch.handle(&jobs).await;
                        for ((call, outcome), job) in calls.into_iter().zip(&outcomes).zip(&jobs) {
                            call.finish(outcome, job.attempt());
                        }
                        Ok::<_, Infallible>(outcomes)
                    }
                });
                // The route's `concurrency` bounds its requests in flight; its records are
                // bounded by the worker's.
                return RouteServices::Batch(match self.concurrency {
                    Some(limit) => BoxCloneService::new(ConcurrencyLimit::new(service, limit)),
                    None => BoxCloneService::new(service),
                });
            }
        };
        let handler = Arc::new(handler);
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
        RouteServices::Single(match self.concurrency {
            Some(limit) => BoxService::new(ConcurrencyLimit::new(service, limit)),
            None => BoxService::new(service),
        })
    }
}

/// At most the first `max` characters of `text`.
fn first_chars(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((end, _)) => text.get(..end).unwrap_or(text),
        None => text,
    }
}

/// At most the last `max` characters of `text`.
fn last_chars(text: &str, max: usize) -> &str {
    let Some(skip) = max.checked_sub(1) else {
        return "";
    };
    match text.char_indices().rev().nth(skip) {
        Some((start, _)) => text.get(start..).unwrap_or(text),
        None => text,
    }
}

/// `text` as it may appear inside one log line: control characters (newlines, escape sequences)
/// and the Unicode line separators and direction overrides are written as `\u{..}` escapes.
fn one_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let unsafe_in_a_line = c.is_control()
            || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        if unsafe_in_a_line {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// A job of `topic` at partition 0, offset 7, delivered once, with the payload `payload`.
#[cfg(test)]
fn test_job(
    topic: &str,
    key: Option<&'static [u8]>,
    cancel: tokio_util::sync::CancellationToken,
) -> Job {
    use worker_core::source::{Delivery, DeliveryId, Lease};
    let delivery = Delivery {
        id: DeliveryId {
            topic: Arc::from(topic),
            partition: 0,
            offset: 7,
            lease: Lease::default(),
        },
        key: key.map(bytes::Bytes::from_static),
        value: Some(bytes::Bytes::from_static(b"payload")),
        headers: Vec::new(),
        timestamp: 0,
        delivery_count: 1,
        lock_duration: Duration::from_secs(30),
        acquired_at: tokio::time::Instant::now(),
        undecodable: None,
    };
    Job::new(delivery, cancel)
}

/// The first route of a one-route configuration whose route is `route` (TOML keys after
/// `topic = "t"`).
#[cfg(test)]
fn test_route(route: &str) -> RouteSection {
    let text = format!(
        "[kafka]\nbootstrap = \"x:1\"\n[worker]\ngroup = \"g\"\n[[route]]\ntopic = \"t\"\n{route}"
    );
    let config =
        crate::config::Config::from_toml(&text, None, []).unwrap_or_else(|err| panic!("{err}"));
    config.routes[0].clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_fall_on_char_boundaries() {
        assert_eq!(first_chars("héllo", 2), "hé");
        assert_eq!(first_chars("hé", 5), "hé");
        assert_eq!(first_chars("hé", 0), "");
        assert_eq!(last_chars("héllo", 4), "éllo");
        assert_eq!(last_chars("ß€😀", 2), "€😀");
        assert_eq!(last_chars("ab", 5), "ab");
        assert_eq!(last_chars("ab", 0), "");
        assert_eq!(last_chars("", 3), "");
    }

    #[test]
    fn one_line_escapes_what_breaks_a_line() {
        assert_eq!(one_line("a\nb\r\tc"), "a\\nb\\r\\tc");
        assert_eq!(one_line("\u{1b}[31mred"), "\\u{1b}[31mred");
        assert_eq!(one_line("x\u{2028}y\u{202e}z"), "x\\u{2028}y\\u{202e}z");
        assert_eq!(one_line("plain ünïcode ✓"), "plain ünïcode ✓");
        assert!(!one_line("\0\u{7f}\u{85}").chars().any(char::is_control));
    }
}
