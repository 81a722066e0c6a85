//! `handler = "http"`: the payload as the body of a request to `url`.

use std::time::Duration;

use anyhow::Context;
use reqwest::header::RETRY_AFTER;
use reqwest::{Method, StatusCode};
use worker_core::config::RouteSection;
use worker_core::{Job, Outcome};

/// Sends each record: 2xx accepts; 408, 429, 5xx, a timeout or a connection error retries
/// (honouring `Retry-After` in seconds); any other status rejects.
#[derive(Debug)]
pub(crate) struct Http {
    client: reqwest::Client,
    method: Method,
    url: String,
}

impl Http {
    pub(crate) fn new(route: &RouteSection, timeout: Duration) -> anyhow::Result<Self> {
        let url = route
            .url
            .clone()
            .with_context(|| format!("route {}: http needs a url", route.topic))?;
        let method = route
            .method
            .as_deref()
            .unwrap_or("POST")
            .to_ascii_uppercase();
        let method = Method::from_bytes(method.as_bytes())
            .with_context(|| format!("route {}: bad method {method:?}", route.topic))?;
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .context("creating the HTTP client")?;
        Ok(Self {
            client,
            method,
            url,
        })
    }

    pub(crate) async fn handle(&self, job: &Job) -> Outcome {
        let id = job.id();
        let body = job.payload().cloned().unwrap_or_default();
        let request = self
            .client
            .request(self.method.clone(), &self.url)
            .header("X-Share-Topic", &*id.topic)
            .header("X-Share-Partition", id.partition.to_string())
            .header("X-Share-Offset", id.offset.to_string())
            .header("X-Share-Delivery-Count", job.attempt().to_string())
            .header(
                "Idempotency-Key",
                format!("{}-{}-{}", id.topic, id.partition, id.offset),
            )
            .body(body);
        match request.send().await {
            Ok(response) => classify(response.status(), response.headers().get(RETRY_AFTER)),
            Err(err) if err.is_timeout() => Outcome::retry(format!("timed out: {err}")),
            Err(err) => Outcome::retry(format!("request failed: {err}")),
        }
    }
}

/// The outcome of a response.
fn classify(status: StatusCode, retry_after: Option<&reqwest::header::HeaderValue>) -> Outcome {
    if status.is_success() {
        return Outcome::Accept;
    }
    let reason = format!("HTTP {status}");
    let retryable = status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
        || status.is_server_error();
    if !retryable {
        return Outcome::reject(reason);
    }
    let after = retry_after
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    match after {
        Some(seconds) => Outcome::retry_after(Duration::from_secs(seconds), reason),
        None => Outcome::retry(reason),
    }
}

#[cfg(test)]
mod tests {
    use reqwest::header::HeaderValue;

    use super::*;

    #[test]
    fn statuses_map_to_outcomes() {
        assert_eq!(classify(StatusCode::OK, None), Outcome::Accept);
        assert_eq!(classify(StatusCode::NO_CONTENT, None), Outcome::Accept);
        let two = HeaderValue::from_static("2");
        assert_eq!(
            classify(StatusCode::TOO_MANY_REQUESTS, Some(&two)),
            Outcome::retry_after(Duration::from_secs(2), "HTTP 429 Too Many Requests")
        );
        assert!(matches!(
            classify(StatusCode::SERVICE_UNAVAILABLE, None),
            Outcome::Retry { after: None, .. }
        ));
        assert!(matches!(
            classify(StatusCode::REQUEST_TIMEOUT, None),
            Outcome::Retry { .. }
        ));
        assert!(matches!(
            classify(StatusCode::BAD_REQUEST, None),
            Outcome::Reject { .. }
        ));
        assert!(matches!(
            classify(StatusCode::NOT_FOUND, Some(&two)),
            Outcome::Reject { .. }
        ));
    }
}
