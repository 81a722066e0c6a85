//! `handler = "http"`: the payload as the body of a request to `url`.

use std::sync::Arc;
use std::time::Duration;

use crate::config::{OnRedirect, RouteSection};
use anyhow::Context;
use reqwest::header::{HeaderMap, LOCATION, RETRY_AFTER};
use reqwest::{Method, StatusCode, Url, redirect};
use worker_core::{Job, Outcome};

use super::{first_chars, one_line};
use crate::tls;

/// The longest path segment a redacted URL shows (see [`redacted`]); longer ones may be tokens.
const MAX_PLAIN_SEGMENT: usize = 24;

/// How much of a `Location` header a reason quotes: it is the endpoint's to choose.
const MAX_LOCATION_CHARS: usize = 200;

/// Sends each record: 2xx accepts; 408, 429, 5xx, a timeout or a connection or TLS error retries
/// (honouring `Retry-After` in seconds); a 3xx retries or rejects (`on-redirect`) and is never
/// followed; any other status rejects. Only the status and headers are read: the body never is.
///
/// A webhook URL often carries its credential (`user:pw@`, `?token=`, a secret path segment), so
/// a reason never quotes it: it names the [`shown`](Self::shown) form instead, and `Debug` too.
pub(crate) struct Http {
    client: reqwest::Client,
    method: Method,
    url: Url,
    /// The URL as reasons and logs name it: see [`redacted`].
    shown: String,
    on_redirect: OnRedirect,
    /// An https route without a client certificate: whether a server asked for one.
    no_certificate: Option<Arc<tls::NoClientCertificate>>,
}

impl std::fmt::Debug for Http {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Http")
            .field("method", &self.method)
            .field("url", &self.shown)
            .field("on_redirect", &self.on_redirect)
            .finish_non_exhaustive()
    }
}

impl Http {
    pub(crate) fn new(route: &RouteSection, timeout: Duration) -> anyhow::Result<Self> {
        let url = route
            .url
            .as_deref()
            .with_context(|| format!("route {}: http needs a url", route.topic))?;
        let url = Url::parse(url).with_context(|| format!("route {}: bad url", route.topic))?;
        let method = route
            .method
            .as_deref()
            .unwrap_or("POST")
            .to_ascii_uppercase();
        let method = Method::from_bytes(method.as_bytes())
            .with_context(|| format!("route {}: bad method {method:?}", route.topic))?;
        // A followed 301/302/303 turns the POST into a GET without the payload, and the 200 of
        // whatever page it lands on would accept a record that was never delivered.
        let mut client = reqwest::Client::builder()
            .timeout(timeout)
            .redirect(redirect::Policy::none());
        let mut no_certificate = None;
        if url.scheme() == "https" {
            let identity = route.cert_file.as_deref().zip(route.key_file.as_deref());
            let tls = tls::RouteTls::new(route.ca_file.as_deref(), identity)
                .with_context(|| format!("route {}", route.topic))?;
            no_certificate = tls.no_certificate;
            client = client.tls_backend_preconfigured(tls.config);
        } else {
            // Never TLS (redirects are not followed): it needs no roots, which a slim container
            // may not have.
            client = client.tls_certs_only([]);
        }
        let client = client
            .build()
            .with_context(|| format!("route {}: creating the HTTP client", route.topic))?;
        Ok(Self {
            client,
            method,
            shown: redacted(&url),
            url,
            on_redirect: route.on_redirect.unwrap_or_default(),
            no_certificate,
        })
    }

    pub(crate) async fn handle(&self, job: &Job) -> Outcome {
        // The record actually delivered, never what its headers claim: a record back from the
        // delay topic names the record it was moved from in headers anyone who can write the
        // delay topic can forge, and a forged key would make the endpoint drop a real job as a
        // repeat of it. A moved job so has a key per move; its retries in place share one.
        let id = job.id();
        let (topic, partition, offset) = (&*id.topic, id.partition, id.offset);
        let body = job.payload().cloned().unwrap_or_default();
        let request = self
            .client
            .request(self.method.clone(), self.url.clone())
            .header("X-Share-Topic", topic)
            .header("X-Share-Partition", partition.to_string())
            .header("X-Share-Offset", offset.to_string())
            .header("X-Share-Delivery-Count", job.attempt().to_string())
            .header("Idempotency-Key", format!("{topic}-{partition}-{offset}"))
            .body(body);
        let sent = tokio::select! {
            sent = request.send() => sent,
            // Cancelled (through the control topic, or its lock lost): the request is dropped.
            // What was sent may still arrive; the retry finds the job cancelled and accepts it.
            () = job.cancellation().cancelled() => {
                return Outcome::retry(format!("{}: the job was cancelled", self.shown));
            }
        };
        match sent {
            // The response is dropped unread: a large or endless body costs nothing.
            Ok(response) => classify(response.status(), response.headers(), self.on_redirect),
            Err(err) => self.failed(err),
        }
    }

    /// Sends one batch request (`body` of `content_type`, carrying the records `records`, as
    /// `partition-offset` pairs, all delivered from `topic`): the response when its status is
    /// 2xx, else the outcome of every record of the request.
    pub(crate) async fn send_batch(
        &self,
        topic: &str,
        records: &str,
        count: usize,
        body: Vec<u8>,
        content_type: &'static str,
    ) -> Result<reqwest::Response, Outcome> {
        let request = self
            .client
            .request(self.method.clone(), self.url.clone())
            .header("Content-Type", content_type)
            .header("X-Share-Topic", topic)
            .header("X-Share-Batch-Size", count.to_string())
            .header("X-Share-Records", records)
            .body(body);
        match request.send().await {
            Ok(response) if response.status().is_success() => Ok(response),
            Ok(response) => Err(classify(
                response.status(),
                response.headers(),
                self.on_redirect,
            )),
            Err(err) => Err(self.failed(err)),
        }
    }

    /// The URL as reasons name it.
    pub(crate) fn shown(&self) -> &str {
        &self.shown
    }

    /// The outcome of a request that got no response.
    fn failed(&self, err: reqwest::Error) -> Outcome {
        // reqwest's message quotes the whole URL, credentials and all.
        let err = err.without_url();
        let url = &self.shown;
        match tls::failure_reason(&err, self.no_certificate.as_deref()) {
            Some(reason) => Outcome::retry(format!("{url}: {reason}")),
            None if err.is_timeout() => {
                Outcome::retry(format!("{url}: timed out: {}", with_causes(&err)))
            }
            None => Outcome::retry(format!("{url}: request failed: {}", with_causes(&err))),
        }
    }
}

/// `url` as a reason or a log line may name it: scheme, host and port, and the path with every
/// segment masked but leading plain words (`/api/webhooks/…/…`). Userinfo, query and fragment
/// are dropped. Webhook URLs carry their credentials in all of those: `user:pw@`, `?token=`,
/// a last segment (`/services/T0/B0/secret`), a segment with digits (`/bot123:AA…/send`).
pub(crate) fn redacted(url: &Url) -> String {
    let mut shown = format!("{}://{}", url.scheme(), url.host_str().unwrap_or(""));
    if let Some(port) = url.port() {
        shown.push_str(&format!(":{port}"));
    }
    let segments: Vec<&str> = url
        .path_segments()
        .into_iter()
        .flatten()
        .filter(|s| !s.is_empty())
        .collect();
    let plain = |segment: &&&str| {
        segment.len() <= MAX_PLAIN_SEGMENT
            && segment
                .bytes()
                .all(|b| b.is_ascii_alphabetic() || matches!(b, b'-' | b'_' | b'.'))
    };
    let kept = segments
        .iter()
        .take(segments.len().saturating_sub(1))
        .take_while(plain)
        .count();
    for (i, segment) in segments.iter().enumerate() {
        shown.push('/');
        shown.push_str(if i < kept { segment } else { "…" });
    }
    shown
}

/// `err` and its causes, `: `-separated: reqwest's own message names none ("error sending request
/// for url (…)"), where the cause says what happened (a refused connection, a reset).
fn with_causes(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let message = cause.to_string();
        if !text.ends_with(&message) {
            text.push_str(": ");
            text.push_str(&message);
        }
        source = cause.source();
    }
    text
}

/// The outcome of a response.
fn classify(status: StatusCode, headers: &HeaderMap, on_redirect: OnRedirect) -> Outcome {
    if status.is_success() {
        return Outcome::Accept;
    }
    if status.is_redirection() {
        let reason = redirect_reason(status, headers);
        return match on_redirect {
            OnRedirect::Retry => Outcome::retry(reason),
            OnRedirect::Reject => Outcome::reject(reason),
        };
    }
    let reason = format!("HTTP {status}");
    let retryable = status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
        || status.is_server_error();
    if !retryable {
        return Outcome::reject(reason);
    }
    let after = headers
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    match after {
        Some(seconds) => Outcome::retry_after(Duration::from_secs(seconds), reason),
        None => Outcome::retry(reason),
    }
}

/// `HTTP 302 Found, not followed; Location: …`, the Location cut and kept on one line.
fn redirect_reason(status: StatusCode, headers: &HeaderMap) -> String {
    let Some(location) = headers.get(LOCATION) else {
        return format!("HTTP {status}, not followed; no Location");
    };
    let location = String::from_utf8_lossy(location.as_bytes());
    let kept = first_chars(&location, MAX_LOCATION_CHARS);
    let cut = if kept.len() < location.len() {
        "…"
    } else {
        ""
    };
    format!(
        "HTTP {status}, not followed; Location: {}{cut}",
        one_line(kept)
    )
}

#[cfg(test)]
mod tests {
    use reqwest::header::HeaderValue;

    use super::*;

    fn headers(pairs: &[(reqwest::header::HeaderName, HeaderValue)]) -> HeaderMap {
        pairs.iter().cloned().collect()
    }

    #[test]
    fn statuses_map_to_outcomes() {
        let none = HeaderMap::new();
        let retry = OnRedirect::Retry;
        assert_eq!(classify(StatusCode::OK, &none, retry), Outcome::Accept);
        assert_eq!(
            classify(StatusCode::NO_CONTENT, &none, retry),
            Outcome::Accept
        );
        let two = headers(&[(RETRY_AFTER, HeaderValue::from_static("2"))]);
        assert_eq!(
            classify(StatusCode::TOO_MANY_REQUESTS, &two, retry),
            Outcome::retry_after(Duration::from_secs(2), "HTTP 429 Too Many Requests")
        );
        assert!(matches!(
            classify(StatusCode::SERVICE_UNAVAILABLE, &none, retry),
            Outcome::Retry { after: None, .. }
        ));
        assert!(matches!(
            classify(StatusCode::REQUEST_TIMEOUT, &none, retry),
            Outcome::Retry { .. }
        ));
        assert!(matches!(
            classify(StatusCode::BAD_REQUEST, &none, retry),
            Outcome::Reject { .. }
        ));
        assert!(matches!(
            classify(StatusCode::NOT_FOUND, &two, retry),
            Outcome::Reject { .. }
        ));
    }

    /// A status HTTP does not define: a 2xx one is a success like any other, one outside 1xx to
    /// 5xx rejects, naming it.
    #[test]
    fn a_made_up_status_is_named() {
        let none = HeaderMap::new();
        let made_up = |code| StatusCode::from_u16(code).unwrap();
        assert_eq!(
            classify(made_up(299), &none, OnRedirect::Retry),
            Outcome::Accept
        );
        assert_eq!(
            classify(made_up(777), &none, OnRedirect::Retry),
            Outcome::reject("HTTP 777 <unknown status code>")
        );
        let two = headers(&[(RETRY_AFTER, HeaderValue::from_static("2"))]);
        assert_eq!(
            classify(made_up(999), &two, OnRedirect::Retry),
            Outcome::reject("HTTP 999 <unknown status code>")
        );
    }

    #[tokio::test]
    async fn a_failed_request_says_why() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        let err = reqwest::Client::new()
            .post(format!("http://127.0.0.1:{port}/send"))
            .send()
            .await
            .unwrap_err();
        let reason = with_causes(&err);
        assert!(
            reason.starts_with(&format!(
                "error sending request for url (http://127.0.0.1:{port}/send): "
            )) && reason.contains("Connection refused"),
            "{reason}"
        );
    }

    #[test]
    fn a_url_is_named_without_its_secrets() {
        let cases = [
            (
                "https://user:pw@hooks.example.com/hook?token=t0k3n#f",
                "https://hooks.example.com/…",
            ),
            ("http://127.0.0.1:8080/send", "http://127.0.0.1:8080/…"),
            (
                "https://hooks.slack.com/services/T00/B00/XXXX",
                "https://hooks.slack.com/services/…/…/…",
            ),
            (
                "https://x.example/api/webhooks/123/abc",
                "https://x.example/api/webhooks/…/…",
            ),
            (
                "https://api.telegram.org/bot123:AAsecret/sendMessage",
                "https://api.telegram.org/…/…",
            ),
            ("https://x.example/", "https://x.example"),
            ("http://[::1]:9/a//b", "http://[::1]:9/a/…"),
        ];
        for (url, shown) in cases {
            assert_eq!(redacted(&Url::parse(url).unwrap()), shown, "{url}");
        }
    }

    /// A refused connection to a URL with a password and a query token: the reason names the
    /// host and port, and neither secret.
    #[tokio::test]
    async fn a_failure_reason_carries_no_secret_of_the_url() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        let url = format!("http://user:s3cret-pw@127.0.0.1:{port}/hook/k3y-path?token=t0k3n");
        let route = super::super::test_route(&format!("handler = \"http\"\nurl = \"{url}\""));
        let http = Http::new(&route, Duration::from_secs(5)).unwrap();
        let job = super::super::test_job("t", None, Default::default());
        let Outcome::Retry { reason, .. } = http.handle(&job).await else {
            panic!("a refused connection retries");
        };
        assert!(
            reason.starts_with(&format!("http://127.0.0.1:{port}/hook/…: request failed")),
            "{reason}"
        );
        for secret in ["s3cret-pw", "user", "t0k3n", "k3y-path", "token"] {
            assert!(!reason.contains(secret), "{secret} in {reason}");
            assert!(
                !format!("{http:?}").contains(secret),
                "{secret} in {http:?}"
            );
        }
    }

    #[test]
    fn a_redirect_is_never_an_accept() {
        let to = headers(&[(
            LOCATION,
            HeaderValue::from_static("https://sso.example/login"),
        )]);
        let reason = "HTTP 302 Found, not followed; Location: https://sso.example/login";
        assert_eq!(
            classify(StatusCode::FOUND, &to, OnRedirect::Retry),
            Outcome::retry(reason)
        );
        assert_eq!(
            classify(StatusCode::FOUND, &to, OnRedirect::Reject),
            Outcome::reject(reason)
        );
        for status in [301, 303, 304, 307, 308] {
            let status = StatusCode::from_u16(status).unwrap();
            assert!(matches!(
                classify(status, &HeaderMap::new(), OnRedirect::Retry),
                Outcome::Retry { after: None, .. }
            ));
        }
        assert_eq!(
            redirect_reason(StatusCode::MOVED_PERMANENTLY, &HeaderMap::new()),
            "HTTP 301 Moved Permanently, not followed; no Location"
        );
    }

    #[test]
    fn a_hostile_location_is_cut_and_kept_on_one_line() {
        // Header values cannot hold ASCII controls, but line separators and invalid UTF-8 pass.
        let mut long = b"http://x/\xe2\x80\xa8\xff\xe2\x80\xae".to_vec();
        long.extend(std::iter::repeat_n(b'a', 10_000));
        let to = headers(&[(LOCATION, HeaderValue::from_bytes(&long).unwrap())]);
        let reason = redirect_reason(StatusCode::SEE_OTHER, &to);
        assert!(
            reason.starts_with(
                "HTTP 303 See Other, not followed; Location: http://x/\\u{2028}\u{fffd}\\u{202e}aaa"
            ),
            "{reason}"
        );
        assert!(reason.ends_with("a…"), "{reason}");
        assert!(reason.len() < 300, "{}", reason.len());
        assert!(!reason.chars().any(char::is_control));
    }
}
