//! OAUTHBEARER tokens: where they come from ([`TokenSource`]), how long one is reused, and how it
//! is renewed.
//!
//! A [`TokenProvider`] hands out the token it holds until it is due for renewal: after 80% of its
//! lifetime, or 30 s before it expires when that is earlier — but never before half its lifetime,
//! so a short-lived token is still reused for a while. Tokens without an expiry are reused until
//! their source changes (a token file is checked on every call). Concurrent callers share one
//! renewal; a renewal that fails while the current token is still valid keeps it (and logs a
//! warning), so an identity provider's hiccup costs nothing until the token really runs out.

mod client_credentials;
mod jwt;

use std::fmt;
use std::fs::{File, Metadata};
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::{Duration, SystemTime};

use super::Secret;
use crate::{Error, ErrorKind, Result};

#[cfg(feature = "test-util")]
pub(crate) use jwt::unsecured as unsecured_jwt;

/// Where OAUTHBEARER tokens come from.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum TokenSource {
    /// One token, used until it expires (its JWT `exp`, when it is a JWT).
    Static(Secret),
    /// A file holding the token, read again whenever it changes (as a sidecar rotates it).
    File(PathBuf),
    /// The OIDC client-credentials grant against a token endpoint.
    ClientCredentials(OidcClientCredentials),
}

/// The OIDC client-credentials grant (RFC 6749 §4.4): a token endpoint, a client id and secret,
/// and an optional scope. The id and secret go in HTTP basic auth; `Debug` shows no secret.
#[derive(Clone)]
pub struct OidcClientCredentials {
    /// The token endpoint URL (https; plain http is meant for a local sidecar).
    pub token_endpoint: String,
    /// The client id.
    pub client_id: String,
    /// The client secret.
    pub client_secret: Secret,
    /// The scope asked for, if any.
    pub scope: Option<String>,
}

impl OidcClientCredentials {
    /// The grant against `token_endpoint` for `client_id`, with no scope.
    pub fn new(
        token_endpoint: impl Into<String>,
        client_id: impl Into<String>,
        client_secret: impl Into<Secret>,
    ) -> Self {
        Self {
            token_endpoint: token_endpoint.into(),
            client_id: client_id.into(),
            client_secret: client_secret.into(),
            scope: None,
        }
    }

    /// Asks for `scope` (space-separated scopes, as the endpoint names them).
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.scope = Some(scope.into());
        self
    }
}

impl fmt::Debug for OidcClientCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OidcClientCredentials")
            // A URL may carry a user and password of its own.
            .field(
                "token_endpoint",
                &client_credentials::display_endpoint(&self.token_endpoint),
            )
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret)
            .field("scope", &self.scope)
            .finish()
    }
}

/// An OAUTHBEARER token and what is known of it.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Token {
    /// The token itself.
    pub value: Secret,
    /// The principal it names (its JWT `sub`, else the client id), which librdkafka's token
    /// callback reports.
    pub principal: String,
    /// When it expires, if known.
    pub expires_at: Option<SystemTime>,
}

/// The principal of a token that names none (neither a JWT `sub` nor a client id).
const UNKNOWN_PRINCIPAL: &str = "unknown";

impl Token {
    /// `value` with the principal and expiry its JWT claims give; `principal` and `expires_at`
    /// when they are missing (the endpoint's `expires_in` takes precedence over `exp`).
    fn new(value: Secret, principal: &str, expires_at: Option<SystemTime>) -> Self {
        let claims = jwt::Claims::of(value.expose()).unwrap_or_default();
        Self {
            principal: claims.subject.unwrap_or_else(|| principal.to_owned()),
            expires_at: expires_at.or(claims.expires_at),
            value,
        }
    }

    fn valid_at(&self, now: SystemTime) -> bool {
        self.expires_at.is_none_or(|expires_at| now < expires_at)
    }
}

/// When a token obtained at `obtained` and expiring at `expires_at` is due for renewal: after
/// 80% of its lifetime or 30 s before expiry, whichever is earlier, but not before half of it.
fn renew_at(obtained: SystemTime, expires_at: Option<SystemTime>) -> Option<SystemTime> {
    const BUFFER: Duration = Duration::from_secs(30);
    let expires_at = expires_at?;
    let lifetime = expires_at.duration_since(obtained).unwrap_or_default();
    let early = (lifetime / 5).max(BUFFER.min(lifetime / 2));
    Some(expires_at.checked_sub(early).unwrap_or(obtained))
}

/// When to try again after a failed renewal, the current token still valid until `expires_at`:
/// after a tenth of the time it has left (1 s to 30 s), and no later than its expiry.
fn retry_at(now: SystemTime, expires_at: Option<SystemTime>) -> SystemTime {
    const SOONEST: Duration = Duration::from_secs(1);
    const LATEST: Duration = Duration::from_secs(30);
    let left = expires_at.and_then(|at| at.duration_since(now).ok());
    let wait = left.map_or(LATEST, |left| (left / 10).clamp(SOONEST, LATEST));
    let retry_at = now.checked_add(wait).unwrap_or(now);
    expires_at.map_or(retry_at, |at| retry_at.min(at))
}

/// Hands out current tokens from a [`TokenSource`], renewing them before they expire; shared by
/// every connection of one [`SaslConfig`](super::SaslConfig) (and by the librdkafka clients a
/// `worker-core` worker secures the same way). `Debug` shows the source, never a token.
pub struct TokenProvider {
    inner: Arc<Inner>,
}

struct Inner {
    source: TokenSource,
    /// The last token obtained. Held only to read or replace it, never across I/O.
    current: Mutex<Option<Current>>,
    /// Held for a whole renewal (a file read, an HTTP request), so that concurrent callers wait
    /// for one renewal instead of each making their own. Holds the HTTP client, made on first use.
    renewal: Mutex<Option<reqwest::blocking::Client>>,
}

#[derive(Clone)]
struct Current {
    token: Token,
    renew_at: Option<SystemTime>,
    /// For a token file: the file it was read from, as it was then.
    stamp: Option<Stamp>,
}

/// What tells that a file changed without reading it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    #[cfg(unix)]
    inode: u64,
}

impl Stamp {
    fn of(meta: &Metadata) -> Self {
        Self {
            modified: meta.modified().ok(),
            len: meta.len(),
            #[cfg(unix)]
            inode: std::os::unix::fs::MetadataExt::ino(meta),
        }
    }
}

/// `t` as an RFC 3339 timestamp to the second, for messages.
fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The data is replaced whole, never left half-written: a panic elsewhere cannot corrupt it.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl TokenProvider {
    pub(crate) fn new(source: TokenSource) -> Self {
        Self {
            inner: Arc::new(Inner {
                source,
                current: Mutex::new(None),
                renewal: Mutex::new(None),
            }),
        }
    }

    /// A token valid for a while yet. The file read or HTTP request of a renewal runs in
    /// `spawn_blocking`, never on the runtime's workers.
    pub async fn token(&self) -> Result<Token> {
        // Only a token file needs I/O (a stat) to tell whether the current token will do.
        if !matches!(self.inner.source, TokenSource::File(_))
            && let Some(token) = self.inner.reusable(SystemTime::now())
        {
            return Ok(token);
        }
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || inner.token())
            .await
            .map_err(|err| {
                Error::new(
                    ErrorKind::Closed,
                    "the OAUTHBEARER token renewal was cancelled",
                )
                .with_source(err)
            })?
    }

    /// A token valid for a while yet, from a thread that may block (librdkafka's callbacks).
    pub fn token_blocking(&self) -> Result<Token> {
        self.inner.token()
    }
}

impl Inner {
    fn token(&self) -> Result<Token> {
        let now = SystemTime::now();
        if let Some(token) = self.reusable(now) {
            return Ok(token);
        }
        let mut client = match self.renewal.try_lock() {
            Ok(client) => client,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            // Someone else is renewing it: while the current token is valid, it will do.
            Err(TryLockError::WouldBlock) => match self.valid(now) {
                Some(token) => return Ok(token),
                None => lock(&self.renewal),
            },
        };
        // Someone else may have renewed it while we waited.
        let now = SystemTime::now();
        if let Some(token) = self.reusable(now) {
            return Ok(token);
        }
        match self.obtain(&mut client, now) {
            Ok(current) => {
                let token = current.token.clone();
                *lock(&self.current) = Some(current);
                Ok(token)
            }
            Err(err) => {
                let now = SystemTime::now();
                let mut current = lock(&self.current);
                let Some(kept) = current.as_mut().filter(|c| c.token.valid_at(now)) else {
                    return Err(err);
                };
                // Not again on every call: each would wait for a slow endpoint's timeout.
                kept.renew_at = Some(retry_at(now, kept.token.expires_at));
                tracing::warn!(
                    error = %err,
                    expires_at = ?kept.token.expires_at.map(rfc3339),
                    "renewing the OAUTHBEARER token failed: the current one is used until it expires",
                );
                Ok(kept.token.clone())
            }
        }
    }

    /// The current token, if it has not expired.
    fn valid(&self, now: SystemTime) -> Option<Token> {
        lock(&self.current)
            .as_ref()
            .map(|current| current.token.clone())
            .filter(|token| token.valid_at(now))
    }

    /// The current token, if it is not due for renewal (and, for a file, the file is unchanged).
    fn reusable(&self, now: SystemTime) -> Option<Token> {
        let current = lock(&self.current).clone()?;
        if current.renew_at.is_some_and(|at| at <= now) || !current.token.valid_at(now) {
            return None;
        }
        if let TokenSource::File(path) = &self.source {
            let stamp = std::fs::metadata(path).ok().map(|meta| Stamp::of(&meta));
            if stamp != current.stamp {
                return None;
            }
        }
        Some(current.token)
    }

    /// A new token from the source; an error if it has expired already.
    fn obtain(
        &self,
        client: &mut Option<reqwest::blocking::Client>,
        now: SystemTime,
    ) -> Result<Current> {
        let (token, stamp, origin) = match &self.source {
            TokenSource::Static(value) => (
                Token::new(value.clone(), UNKNOWN_PRINCIPAL, None),
                None,
                "the static OAUTHBEARER token".to_owned(),
            ),
            TokenSource::File(path) => {
                let (value, stamp) = read_token_file(path)?;
                (
                    Token::new(value, UNKNOWN_PRINCIPAL, None),
                    Some(stamp),
                    format!("the OAUTHBEARER token in {}", path.display()),
                )
            }
            TokenSource::ClientCredentials(grant) => {
                let client = match client {
                    Some(client) => client,
                    None => {
                        warn_if_plain_http(&grant.token_endpoint);
                        client.insert(client_credentials::client()?)
                    }
                };
                let issued = client_credentials::request(client, grant)?;
                (
                    Token::new(
                        Secret::new(issued.access_token),
                        &grant.client_id,
                        issued.expires_in.and_then(|d| now.checked_add(d)),
                    ),
                    None,
                    format!(
                        "the OAUTHBEARER token from {}",
                        client_credentials::display_endpoint(&grant.token_endpoint)
                    ),
                )
            }
        };
        if let Some(expires_at) = token.expires_at.filter(|_| !token.valid_at(now)) {
            return Err(Error::new(
                ErrorKind::Authentication,
                format!("{origin} expired at {}", rfc3339(expires_at)),
            ));
        }
        Ok(Current {
            renew_at: renew_at(now, token.expires_at),
            token,
            stamp,
        })
    }
}

/// The largest token file read: tokens are a few kilobytes.
const MAX_TOKEN_FILE: u64 = 1 << 20;

/// The token in `path` (trailing line breaks removed) and the file's stamp. Errors name the path,
/// never the content.
fn read_token_file(path: &Path) -> Result<(Secret, Stamp)> {
    let fail = |what: &str| {
        Error::new(
            ErrorKind::Config,
            format!("the OAUTHBEARER token file {} {what}", path.display()),
        )
    };
    let mut file = File::open(path).map_err(|err| fail("cannot be opened").with_source(err))?;
    // The stamp of the file opened, so a file swapped in while we read is read again next time.
    let stamp = file
        .metadata()
        .map(|meta| Stamp::of(&meta))
        .map_err(|err| fail("cannot be read").with_source(err))?;
    let mut bytes = Vec::new();
    (&mut file)
        .take(MAX_TOKEN_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|err| fail("cannot be read").with_source(err))?;
    if bytes.len() as u64 > MAX_TOKEN_FILE {
        return Err(fail("is larger than 1 MiB"));
    }
    let text = String::from_utf8(bytes).map_err(|_| fail("is not UTF-8 text"))?;
    let token = text.trim_end_matches(['\r', '\n']);
    if token.is_empty() {
        return Err(fail("is empty"));
    }
    Ok((Secret::new(token), stamp))
}

/// Client secrets sent over plain http can be read on the way: said once, when the client is
/// made. Loopback (a sidecar) is fine.
fn warn_if_plain_http(endpoint: &str) {
    let Ok(url) = reqwest::Url::parse(endpoint) else {
        return;
    };
    let host = url.host_str().unwrap_or_default();
    let loopback = host == "localhost"
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if url.scheme() == "http" && !loopback {
        tracing::warn!(
            endpoint = %client_credentials::display_endpoint(endpoint),
            "the OAUTHBEARER token endpoint is plain http: the client secret crosses the network unencrypted",
        );
    }
}

impl fmt::Debug for TokenProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let expires_at = lock(&self.inner.current)
            .as_ref()
            .and_then(|current| current.token.expires_at);
        f.debug_struct("TokenProvider")
            .field("source", &self.inner.source)
            .field("expires_at", &expires_at.map(rfc3339))
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests;
