use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::post;
use base64::Engine as _;

use super::*;
use crate::security::SaslConfig;

// ---- renewal policy -------------------------------------------------------------------------

#[test]
fn renewal_comes_at_80_percent_or_30_s_before_expiry_but_not_before_half() {
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
    let secs = Duration::from_secs;
    let at = |lifetime: u64| {
        renew_at(t0, Some(t0 + secs(lifetime))).and_then(|t| t.duration_since(t0).ok())
    };
    assert_eq!(at(3600), Some(secs(2880)), "80% of an hour");
    assert_eq!(at(150), Some(secs(120)), "both rules agree");
    assert_eq!(at(100), Some(secs(70)), "30 s before expiry is earlier");
    assert_eq!(at(40), Some(secs(20)), "not before half");
    assert_eq!(at(2), Some(secs(1)));
    assert_eq!(at(0), Some(secs(0)));
    assert_eq!(renew_at(t0, None), None, "no expiry, no renewal");
    assert!(
        renew_at(t0, Some(t0 - secs(5))) <= Some(t0),
        "expired: renew now"
    );
}

#[test]
fn after_a_failed_renewal_the_next_try_waits_a_tenth_of_what_is_left() {
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
    let secs = Duration::from_secs;
    let wait = |left: Option<u64>| {
        retry_at(t0, left.map(|left| t0 + secs(left)))
            .duration_since(t0)
            .ok()
    };
    assert_eq!(wait(Some(100)), Some(secs(10)));
    assert_eq!(wait(Some(3600)), Some(secs(30)), "at most 30 s");
    assert_eq!(wait(Some(5)), Some(secs(1)), "at least 1 s");
    assert_eq!(wait(Some(0)), Some(secs(0)), "never after expiry");
    assert_eq!(wait(None), Some(secs(30)));
}

// ---- static tokens --------------------------------------------------------------------------

fn in_an_hour() -> SystemTime {
    SystemTime::now() + Duration::from_secs(3600)
}

fn seconds_only(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[tokio::test]
async fn a_static_jwt_names_its_subject_and_expiry() -> Result<()> {
    let expires_at = in_an_hour();
    let provider = TokenProvider::new(TokenSource::Static(Secret::new(jwt::unsecured(
        "sms-worker",
        expires_at,
    ))));
    let token = provider.token().await?;
    assert_eq!(token.principal, "sms-worker");
    assert_eq!(
        token.expires_at.map(seconds_only),
        Some(seconds_only(expires_at))
    );
    assert_eq!(provider.token_blocking()?.value, token.value);
    Ok(())
}

#[tokio::test]
async fn an_opaque_static_token_names_nobody_and_never_expires() -> Result<()> {
    let provider = TokenProvider::new(TokenSource::Static(Secret::new("2YotnFZFEjr1zCsicMWpAA")));
    let token = provider.token().await?;
    assert_eq!(token.principal, "unknown");
    assert_eq!(token.expires_at, None);
    assert_eq!(token.value.expose(), "2YotnFZFEjr1zCsicMWpAA");
    Ok(())
}

#[test]
fn an_expired_static_token_is_an_error_that_does_not_show_it() {
    let token = jwt::unsecured("w", SystemTime::now() - Duration::from_secs(10));
    let provider = TokenProvider::new(TokenSource::Static(Secret::new(token.clone())));
    let Err(err) = provider.token_blocking() else {
        panic!("an expired token was handed out");
    };
    assert_eq!(err.kind(), ErrorKind::Authentication);
    assert!(
        err.to_string()
            .contains("the static OAUTHBEARER token expired at"),
        "{err}"
    );
    assert!(!err.to_string().contains(&token));
}

// ---- token files ----------------------------------------------------------------------------

/// A directory of its own for one test, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> std::io::Result<Self> {
        let dir = std::env::temp_dir().join(format!(
            "share-worker-token-{name}-{}-{}",
            std::process::id(),
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        std::fs::create_dir_all(&dir)?;
        Ok(Self(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes `content` to `path` and sets its modification time to `modified`.
fn write(path: &Path, content: &str, modified: SystemTime) -> std::io::Result<()> {
    std::fs::write(path, content)?;
    File::options()
        .write(true)
        .open(path)?
        .set_modified(modified)
}

#[tokio::test]
async fn a_token_file_is_read_again_when_it_changes()
-> std::result::Result<(), Box<dyn std::error::Error>> {
    let dir = TempDir::new("rotate")?;
    let path = dir.0.join("token");
    let t0 = SystemTime::now() - Duration::from_secs(600);
    let first = jwt::unsecured("first", in_an_hour());
    write(&path, &format!("{first}\n"), t0)?;
    let provider = TokenProvider::new(TokenSource::File(path.clone()));
    let token = provider.token().await?;
    assert_eq!(token.value.expose(), first, "trailing newline removed");
    assert_eq!(token.principal, "first");

    // Same length and modification time: not read again (the new content is not seen).
    let same_size = "x".repeat(first.len());
    write(&path, &format!("{same_size}\n"), t0)?;
    assert_eq!(provider.token().await?.value.expose(), first);

    // A new length.
    write(&path, "opaque-token-two\r\n", t0)?;
    let token = provider.token_blocking()?;
    assert_eq!(token.value.expose(), "opaque-token-two");
    assert_eq!(
        (token.principal.as_str(), token.expires_at),
        ("unknown", None)
    );

    // The same length, a new modification time.
    write(&path, "opaque-token-TWO\n", t0 + Duration::from_secs(1))?;
    assert_eq!(provider.token().await?.value.expose(), "opaque-token-TWO");
    Ok(())
}

#[tokio::test]
async fn a_missing_or_empty_token_file_is_an_error_naming_it()
-> std::result::Result<(), Box<dyn std::error::Error>> {
    let dir = TempDir::new("bad")?;
    let path = dir.0.join("token");
    let provider = TokenProvider::new(TokenSource::File(path.clone()));
    let Err(err) = provider.token().await else {
        panic!("a missing file gave a token");
    };
    assert_eq!(err.kind(), ErrorKind::Config);
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
    assert!(err.to_string().contains("cannot be opened"), "{err}");

    write(&path, "\n\n", SystemTime::now())?;
    let Err(err) = provider.token().await else {
        panic!("an empty file gave a token");
    };
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
    assert!(err.to_string().contains("is empty"), "{err}");

    std::fs::write(&path, b"secret-part\xff")?;
    let Err(err) = provider.token().await else {
        panic!("a binary file gave a token");
    };
    assert!(
        err.to_string().contains("not UTF-8") && !err.to_string().contains("secret-part"),
        "{err}"
    );
    Ok(())
}

#[tokio::test]
async fn a_token_file_emptied_while_its_token_is_valid_keeps_the_token()
-> std::result::Result<(), Box<dyn std::error::Error>> {
    let dir = TempDir::new("emptied")?;
    let path = dir.0.join("token");
    let t0 = SystemTime::now() - Duration::from_secs(600);
    write(&path, "valid-token", t0)?;
    let provider = TokenProvider::new(TokenSource::File(path.clone()));
    assert_eq!(provider.token().await?.value.expose(), "valid-token");
    // A sidecar half-way through rewriting it.
    write(&path, "", t0 + Duration::from_secs(1))?;
    assert_eq!(provider.token().await?.value.expose(), "valid-token");
    write(&path, "next-token", t0 + Duration::from_secs(2))?;
    assert_eq!(provider.token().await?.value.expose(), "next-token");
    Ok(())
}

// ---- the client-credentials grant against a fake token endpoint -----------------------------

/// What the fake endpoint answers.
#[derive(Clone)]
enum Answer {
    /// `token-<n>` for the n-th request, expiring in this many seconds.
    Opaque { expires_in: u64 },
    /// An unsecured JWT naming this subject, expiring in an hour.
    Jwt { sub: &'static str },
    /// This status and body.
    Status(u16, &'static str),
}

/// One request the endpoint received.
#[derive(Clone, Debug)]
struct Seen {
    authorization: Option<String>,
    content_type: Option<String>,
    form: Vec<(String, String)>,
}

struct Endpoint {
    seen: Mutex<Vec<Seen>>,
    answer: Mutex<Answer>,
    delay: Mutex<Duration>,
}

/// A token endpoint on 127.0.0.1 (plain http) answering `answer` after `delay`, and its URL.
async fn endpoint(answer: Answer, delay: Duration) -> std::io::Result<(Arc<Endpoint>, String)> {
    let state = Arc::new(Endpoint {
        seen: Mutex::new(Vec::new()),
        answer: Mutex::new(answer),
        delay: Mutex::new(delay),
    });
    let app = Router::new()
        .route("/oauth2/token", post(issue))
        .with_state(Arc::clone(&state));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/oauth2/token", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((state, url))
}

async fn issue(
    State(endpoint): State<Arc<Endpoint>>,
    headers: HeaderMap,
    body: String,
) -> (StatusCode, String) {
    let text = |name| {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned)
    };
    let n = {
        let mut seen = lock(&endpoint.seen);
        seen.push(Seen {
            authorization: text(header::AUTHORIZATION),
            content_type: text(header::CONTENT_TYPE),
            form: form_urlencoded::parse(body.as_bytes())
                .into_owned()
                .collect(),
        });
        seen.len()
    };
    let delay = *lock(&endpoint.delay);
    tokio::time::sleep(delay).await;
    let answer = lock(&endpoint.answer).clone();
    match answer {
        Answer::Opaque { expires_in } => (
            StatusCode::OK,
            serde_json::json!({
                "access_token": format!("token-{n}"),
                "token_type": "Bearer",
                "expires_in": expires_in,
            })
            .to_string(),
        ),
        Answer::Jwt { sub } => (
            StatusCode::OK,
            serde_json::json!({
                "access_token": jwt::unsecured(sub, in_an_hour()),
                "token_type": "bearer",
            })
            .to_string(),
        ),
        Answer::Status(status, body) => (
            StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            body.to_owned(),
        ),
    }
}

const CLIENT_ID: &str = "sms worker";
const CLIENT_SECRET: &str = "s3cr:et&pw";

fn grant(url: &str) -> TokenSource {
    TokenSource::ClientCredentials(
        OidcClientCredentials::new(url, CLIENT_ID, CLIENT_SECRET).scope("kafka produce"),
    )
}

fn requests(endpoint: &Endpoint) -> usize {
    lock(&endpoint.seen).len()
}

/// Calls `token()` until `done` holds for its result, for at most 10 s.
async fn until(
    provider: &TokenProvider,
    mut done: impl FnMut(&Result<Token>) -> bool,
) -> Result<Token> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let result = provider.token().await;
        if done(&result) || Instant::now() > deadline {
            return result;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn the_grant_sends_basic_auth_and_the_form_and_caches_the_token()
-> std::result::Result<(), Box<dyn std::error::Error>> {
    let (endpoint, url) = endpoint(Answer::Opaque { expires_in: 3600 }, Duration::ZERO).await?;
    let provider = Arc::new(TokenProvider::new(grant(&url)));
    let before = SystemTime::now();
    let token = provider.token().await?;
    assert_eq!(token.value.expose(), "token-1");
    assert_eq!(
        token.principal, CLIENT_ID,
        "an opaque token names the client"
    );
    let expires_at = token.expires_at.ok_or("no expiry")?;
    assert!(expires_at >= before + Duration::from_secs(3600));
    assert!(expires_at <= SystemTime::now() + Duration::from_secs(3600));

    let seen = lock(&endpoint.seen).clone();
    assert_eq!(seen.len(), 1);
    let credentials = base64::engine::general_purpose::STANDARD.encode("sms+worker:s3cr%3Aet%26pw");
    assert_eq!(seen[0].authorization, Some(format!("Basic {credentials}")));
    assert_eq!(
        seen[0].content_type.as_deref(),
        Some("application/x-www-form-urlencoded")
    );
    assert_eq!(
        seen[0].form,
        [
            ("grant_type".to_owned(), "client_credentials".to_owned()),
            ("scope".to_owned(), "kafka produce".to_owned()),
        ]
    );

    // Reused, from async callers and blocking ones alike.
    assert_eq!(provider.token().await?.value.expose(), "token-1");
    let blocking = Arc::clone(&provider);
    let token = tokio::task::spawn_blocking(move || blocking.token_blocking()).await??;
    assert_eq!(token.value.expose(), "token-1");
    assert_eq!(requests(&endpoint), 1);
    Ok(())
}

#[tokio::test]
async fn a_jwt_from_the_endpoint_names_its_subject()
-> std::result::Result<(), Box<dyn std::error::Error>> {
    let (_endpoint, url) = endpoint(Answer::Jwt { sub: "svc-sms" }, Duration::ZERO).await?;
    let provider = TokenProvider::new(TokenSource::ClientCredentials(OidcClientCredentials::new(
        url, "client", "secret",
    )));
    let token = provider.token().await?;
    assert_eq!(token.principal, "svc-sms");
    assert!(token.expires_at.is_some(), "exp is used without expires_in");
    Ok(())
}

#[tokio::test]
async fn concurrent_callers_share_one_request()
-> std::result::Result<(), Box<dyn std::error::Error>> {
    let (endpoint, url) = endpoint(
        Answer::Opaque { expires_in: 3600 },
        Duration::from_millis(200),
    )
    .await?;
    let provider = TokenProvider::new(grant(&url));
    let tokens = futures::future::join_all((0..8).map(|_| provider.token())).await;
    for token in tokens {
        assert_eq!(token?.value.expose(), "token-1");
    }
    assert_eq!(requests(&endpoint), 1);
    Ok(())
}

#[tokio::test]
async fn a_token_near_expiry_is_renewed() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let (endpoint, url) = endpoint(Answer::Opaque { expires_in: 2 }, Duration::ZERO).await?;
    let provider = TokenProvider::new(grant(&url));
    let start = Instant::now();
    assert_eq!(provider.token().await?.value.expose(), "token-1");
    // Due for renewal after half of its 2 s.
    let renewed = until(&provider, |t| {
        t.as_ref().is_ok_and(|t| t.value.expose() != "token-1")
    })
    .await?;
    assert_eq!(renewed.value.expose(), "token-2");
    assert!(
        start.elapsed() >= Duration::from_millis(900),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(requests(&endpoint), 2);
    Ok(())
}

#[tokio::test]
async fn a_slow_renewal_holds_up_no_one_while_the_token_is_valid()
-> std::result::Result<(), Box<dyn std::error::Error>> {
    let (endpoint, url) = endpoint(Answer::Opaque { expires_in: 4 }, Duration::ZERO).await?;
    let provider = Arc::new(TokenProvider::new(grant(&url)));
    assert_eq!(provider.token().await?.value.expose(), "token-1");
    *lock(&endpoint.delay) = Duration::from_secs(2);
    *lock(&endpoint.answer) = Answer::Opaque { expires_in: 3600 };
    // Due for renewal after 2 s; the renewal takes 2 s more, the token expires at 4 s.
    let renewing = {
        let provider = Arc::clone(&provider);
        tokio::spawn(async move {
            until(&provider, |t| {
                t.as_ref().is_ok_and(|t| t.value.expose() != "token-1")
            })
            .await
        })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while requests(&endpoint) < 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let asked = Instant::now();
    assert_eq!(provider.token().await?.value.expose(), "token-1");
    assert!(
        asked.elapsed() < Duration::from_secs(1),
        "{:?}",
        asked.elapsed()
    );
    assert_eq!(renewing.await??.value.expose(), "token-2");
    assert_eq!(provider.token().await?.value.expose(), "token-2");
    assert_eq!(requests(&endpoint), 2);
    Ok(())
}

#[tokio::test]
async fn a_failed_renewal_keeps_the_valid_token_then_fails()
-> std::result::Result<(), Box<dyn std::error::Error>> {
    let (endpoint, url) = endpoint(Answer::Opaque { expires_in: 2 }, Duration::ZERO).await?;
    let provider = TokenProvider::new(grant(&url));
    assert_eq!(provider.token().await?.value.expose(), "token-1");
    *lock(&endpoint.answer) = Answer::Status(503, r#"{"error":"temporarily_unavailable"}"#);
    // Renewal attempts fail, the token still works...
    let kept = until(&provider, |_| requests(&endpoint) >= 2).await?;
    assert_eq!(kept.value.expose(), "token-1");
    // ...until it expires.
    let Err(err) = until(&provider, Result::is_err).await else {
        panic!("an expired token was handed out");
    };
    let message = err.to_string();
    assert!(
        message.contains(&url) && message.contains("503"),
        "{message}"
    );
    assert!(message.contains("temporarily_unavailable"), "{message}");
    Ok(())
}

#[tokio::test]
async fn an_error_status_is_reported_with_the_endpoints_reasons_but_no_secret()
-> std::result::Result<(), Box<dyn std::error::Error>> {
    let (_endpoint, url) = endpoint(
        Answer::Status(
            401,
            r#"{"error":"invalid_client","error_description":"client secret s3cr:et&pw is wrong"}"#,
        ),
        Duration::ZERO,
    )
    .await?;
    let provider = TokenProvider::new(grant(&url));
    let Err(err) = provider.token().await else {
        panic!("a refused grant gave a token");
    };
    assert_eq!(err.kind(), ErrorKind::Authentication);
    assert_eq!(
        err.to_string(),
        format!(
            "the OAUTHBEARER token endpoint {url} refused the client credentials grant with \
             401 Unauthorized: \"invalid_client\" (\"client secret *** is wrong\")"
        )
    );
    Ok(())
}

#[tokio::test]
async fn an_answer_without_a_token_is_an_error()
-> std::result::Result<(), Box<dyn std::error::Error>> {
    let (_endpoint, url) =
        endpoint(Answer::Status(200, "<html>login</html>"), Duration::ZERO).await?;
    let provider = TokenProvider::new(grant(&url));
    let Err(err) = provider.token().await else {
        panic!("an HTML page gave a token");
    };
    assert!(err.to_string().contains("not a JSON object"), "{err}");
    Ok(())
}

#[tokio::test]
async fn an_unreachable_endpoint_is_an_io_error()
-> std::result::Result<(), Box<dyn std::error::Error>> {
    // A port that was free a moment ago.
    let url = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        format!("http://{}/token", listener.local_addr()?)
    };
    let provider = TokenProvider::new(grant(&url));
    let Err(err) = provider.token().await else {
        panic!("no endpoint gave a token");
    };
    assert_eq!(err.kind(), ErrorKind::Io);
    assert!(err.to_string().contains(&url), "{err}");
    Ok(())
}

#[tokio::test]
async fn https_is_spoken_and_a_server_without_tls_fails_the_handshake()
-> std::result::Result<(), Box<dyn std::error::Error>> {
    let (endpoint, url) = endpoint(Answer::Opaque { expires_in: 3600 }, Duration::ZERO).await?;
    let url = url.replace("http://", "https://");
    let provider = TokenProvider::new(grant(&url));
    let Err(err) = provider.token().await else {
        panic!("a token over a failed handshake");
    };
    assert_eq!(err.kind(), ErrorKind::Io, "{err}");
    assert_eq!(requests(&endpoint), 0, "nothing was sent in the clear");
    Ok(())
}

#[tokio::test]
async fn debug_output_never_shows_a_secret() -> std::result::Result<(), Box<dyn std::error::Error>>
{
    let (_endpoint, url) = endpoint(Answer::Opaque { expires_in: 3600 }, Duration::ZERO).await?;
    let with_user = url.replace("http://", "http://admin:hunter2@");
    let provider = TokenProvider::new(grant(&with_user));
    let config = SaslConfig::oauthbearer(grant(&url));
    let token = provider.token().await?;
    let printed = format!(
        "{provider:?} {config:?} {:?} {token:?} {:?}",
        grant(&url),
        SaslConfig::oauthbearer(TokenSource::Static(Secret::new("static-token")))
    );
    for secret in [CLIENT_SECRET, "hunter2", "token-1", "static-token"] {
        assert!(!printed.contains(secret), "{secret} in {printed}");
    }
    assert!(
        printed.contains(CLIENT_ID) && printed.contains("expires_at"),
        "{printed}"
    );
    Ok(())
}
