//! The same [`Security`] for librdkafka's clients (the dead-letter sink, and the binary's
//! producers and consumers): the settings librdkafka takes by name, and one client context that
//! hands out OAUTHBEARER tokens from the same [`TokenProvider`] as the native client and keeps
//! the broker's refusals, so that a wrong password is an error in the broker's words instead of a
//! timeout.
//!
//! Every client is made the same way:
//!
//! ```no_run
//! # fn run() -> worker_core::Result<()> {
//! use rdkafka::producer::FutureProducer;
//! use worker_core::security::{RdkafkaSecurity, SaslConfig, Security, TlsConfig};
//!
//! let security = Security::sasl_ssl(
//!     SaslConfig::plain("worker", "secret"),
//!     TlsConfig::ca_file("/etc/kafka/ca.pem"),
//! );
//! let context = security.rdkafka_context();
//! let producer: FutureProducer<_> = security
//!     .rdkafka_client_config("broker-1:9093")?
//!     .set("acks", "all")
//!     .create_with_context(context.clone())
//!     .map_err(|err| worker_core::Error::new(worker_core::ErrorKind::Config, err.to_string()))?;
//! // Later, when a write takes too long: did the broker refuse us?
//! if let Some(refusal) = context.refusal() {
//!     eprintln!("the broker refused the producer: {refusal}");
//! }
//! # Ok(()) }
//! ```

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::ClientConfig;
use rdkafka::client::{ClientContext, OAuthToken};
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use tokio::sync::watch;

use super::{Security, TokenProvider};
use crate::{Error, ErrorKind, Result};

/// How long a refusal counts as the current state of the connection: librdkafka reports an
/// identical error again at most every 30 s while it keeps failing (and reconnects at most 10 s
/// apart), so a refusal older than this may have been followed by a connection that worked.
const CURRENT: Duration = Duration::from_secs(45);

/// The lifetime given to librdkafka for a token whose expiry is unknown: it asks for a new one
/// after 80 % of it, so a rotated token file is picked up within minutes.
const UNKNOWN_EXPIRY_LIFETIME: Duration = Duration::from_secs(10 * 60);

/// What librdkafka prefixes to the error of a token refresh that failed on our side: that is not
/// the broker refusing us, and it may pass (a token endpoint down for a moment).
const TOKEN_FAILURE: &str = "Failed to acquire SASL OAUTHBEARER token";

/// A [`Security`] as librdkafka's clients take it.
pub trait RdkafkaSecurity {
    /// A librdkafka configuration for the brokers at `bootstrap` (comma-separated `host:port`),
    /// secured by this setting: `security.protocol`; for TLS `ssl.ca.location` (the CA file, or
    /// `probe` for the system roots), `ssl.endpoint.identification.algorithm=https` and, for mutual
    /// TLS, `ssl.certificate.location` and `ssl.key.location`; for SASL `sasl.mechanism` and, for
    /// PLAIN and SCRAM, `sasl.username` and `sasl.password`. OAUTHBEARER tokens come from the
    /// context: create the client with [`rdkafka_context`](Self::rdkafka_context).
    ///
    /// `ClientConfig`'s `Debug` leaves the password out. Fails only for a file path that is not
    /// UTF-8 (librdkafka takes paths as text).
    fn rdkafka_client_config(&self, bootstrap: &str) -> Result<ClientConfig>;

    /// A new context for one librdkafka client of this setting (producer or consumer): it serves
    /// OAUTHBEARER tokens from the setting's token source and keeps what the broker says when it
    /// refuses the client. Each client gets its own context; keep a clone to ask it.
    fn rdkafka_context(&self) -> KafkaContext;
}

impl RdkafkaSecurity for Security {
    fn rdkafka_client_config(&self, bootstrap: &str) -> Result<ClientConfig> {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", bootstrap)
            .set("security.protocol", self.protocol().as_str());
        if let Some(tls) = self.tls() {
            let ca = match tls.ca_path() {
                Some(path) => utf8(path, "tls.ca-file")?,
                None => "probe",
            };
            config
                .set("ssl.ca.location", ca)
                .set("ssl.endpoint.identification.algorithm", "https");
            if let Some((cert, key)) = tls.client_paths() {
                config
                    .set("ssl.certificate.location", utf8(cert, "tls.cert-file")?)
                    .set("ssl.key.location", utf8(key, "tls.key-file")?);
            }
        }
        if let Some(sasl) = self.sasl() {
            config.set("sasl.mechanism", sasl.mechanism_name());
            if let (Some(username), Some(password)) = (sasl.username(), sasl.password()) {
                config
                    .set("sasl.username", username)
                    .set("sasl.password", password.expose());
            }
        }
        Ok(config)
    }

    fn rdkafka_context(&self) -> KafkaContext {
        KafkaContext {
            shared: Arc::new(Shared {
                tokens: self.sasl().and_then(|s| s.token_provider().cloned()),
                refusal: watch::Sender::new(None),
            }),
        }
    }
}

/// A file path as the text librdkafka takes.
fn utf8<'a>(path: &'a Path, key: &str) -> Result<&'a str> {
    path.to_str().ok_or_else(|| {
        Error::new(
            ErrorKind::Config,
            format!("{key} {}: librdkafka needs a UTF-8 path", path.display()),
        )
    })
}

/// The context of a librdkafka client made by [`RdkafkaSecurity::rdkafka_context`]: OAUTHBEARER tokens
/// from the setting's token source, and the broker's refusals (a SASL authentication that failed,
/// a TLS handshake that failed) kept for the code waiting on the client. Cheap to clone; clones
/// share the state.
#[derive(Clone)]
pub struct KafkaContext {
    shared: Arc<Shared>,
}

struct Shared {
    tokens: Option<Arc<TokenProvider>>,
    refusal: watch::Sender<Option<Refusal>>,
}

#[derive(Clone)]
struct Refusal {
    said: Arc<str>,
    at: Instant,
}

impl Refusal {
    fn current(this: &Option<Refusal>) -> Option<String> {
        this.as_ref()
            .filter(|r| r.at.elapsed() < CURRENT)
            .map(|r| r.said.to_string())
    }
}

impl KafkaContext {
    /// What the broker said when it last refused this client (librdkafka's words, naming the
    /// broker: "sasl_ssl://127.0.0.1:9094/bootstrap: SASL authentication error: Authentication
    /// failed: Invalid username or password ..."), if that is recent and nothing went through
    /// since ([`accepted`](Self::accepted)).
    pub fn refusal(&self) -> Option<String> {
        Refusal::current(&self.shared.refusal.borrow())
    }

    /// Waits until the broker refuses this client (at once if [`refusal`](Self::refusal) has
    /// one): its words. Race it against a delivery to fail in seconds instead of at the delivery
    /// timeout.
    pub async fn refused(&self) -> String {
        let mut changes = self.shared.refusal.subscribe();
        loop {
            if let Some(said) = Refusal::current(&changes.borrow_and_update()) {
                return said;
            }
            // The sender lives as long as `self`: `changed` never fails here.
            if changes.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Something went through (a delivery, an answer): earlier refusals are over.
    pub fn accepted(&self) {
        self.shared
            .refusal
            .send_if_modified(|refusal| refusal.take().is_some());
    }
}

impl fmt::Debug for KafkaContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaContext")
            .field("oauthbearer", &self.shared.tokens.is_some())
            .field("refusal", &self.refusal())
            .finish()
    }
}

impl ClientContext for KafkaContext {
    // Without a token source librdkafka never asks (the mechanism is not OAUTHBEARER).
    const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

    fn error(&self, error: KafkaError, reason: &str) {
        let refused = matches!(
            error.rdkafka_error_code(),
            Some(RDKafkaErrorCode::Authentication | RDKafkaErrorCode::SSL)
        ) && !reason.contains(TOKEN_FAILURE);
        if refused {
            self.shared.refusal.send_replace(Some(Refusal {
                said: Arc::from(reason),
                at: Instant::now(),
            }));
        }
        tracing::error!(target: "librdkafka", "{error}: {reason}");
    }

    fn generate_oauth_token(
        &self,
        _oauthbearer_config: Option<&str>,
    ) -> std::result::Result<OAuthToken, Box<dyn std::error::Error>> {
        let provider = self.shared.tokens.as_ref().ok_or(
            "no OAUTHBEARER token source is configured (sasl mechanism is not OAUTHBEARER)",
        )?;
        let token = provider.token_blocking()?;
        let expires_at = token
            .expires_at
            .unwrap_or_else(|| SystemTime::now() + UNKNOWN_EXPIRY_LIFETIME);
        let lifetime_ms = expires_at
            .duration_since(UNIX_EPOCH)
            .ok()
            .and_then(|d| i64::try_from(d.as_millis()).ok())
            .ok_or("the OAUTHBEARER token's expiry is not a valid time")?;
        Ok(OAuthToken {
            token: token.value.expose().to_owned(),
            principal_name: token.principal,
            lifetime_ms,
        })
    }
}

impl ConsumerContext for KafkaContext {}

/// A producer whose sends are settled by a flush or a transaction's commit, not one by one (the
/// periodic jobs' transactional producer).
impl rdkafka::producer::ProducerContext for KafkaContext {
    type DeliveryOpaque = ();

    fn delivery(&self, _report: &rdkafka::message::DeliveryResult<'_>, _opaque: ()) {}
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::security::{SaslConfig, Secret, TlsConfig, TokenSource};

    fn settings(config: &ClientConfig) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = [
            "bootstrap.servers",
            "security.protocol",
            "ssl.ca.location",
            "ssl.endpoint.identification.algorithm",
            "ssl.certificate.location",
            "ssl.key.location",
            "sasl.mechanism",
            "sasl.username",
            "sasl.password",
        ]
        .into_iter()
        .filter_map(|key| Some((key.to_owned(), config.get(key)?.to_owned())))
        .collect();
        out.sort();
        out
    }

    fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = expected
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        out.sort();
        out
    }

    #[test]
    fn every_protocol_maps_to_librdkafka_settings() -> Result<()> {
        let plain = Security::plaintext().rdkafka_client_config("b:9092")?;
        assert_eq!(
            settings(&plain),
            pairs(&[
                ("bootstrap.servers", "b:9092"),
                ("security.protocol", "plaintext")
            ])
        );
        let mtls = Security::ssl(TlsConfig::ca_file("/ca.pem").client_cert("/c.pem", "/k.pem"))
            .rdkafka_client_config("b:9093")?;
        assert_eq!(
            settings(&mtls),
            pairs(&[
                ("bootstrap.servers", "b:9093"),
                ("security.protocol", "ssl"),
                ("ssl.ca.location", "/ca.pem"),
                ("ssl.endpoint.identification.algorithm", "https"),
                ("ssl.certificate.location", "/c.pem"),
                ("ssl.key.location", "/k.pem"),
            ])
        );
        let scram = Security::sasl_ssl(
            SaslConfig::scram_sha512("worker", "s3cret"),
            TlsConfig::system_roots(),
        )
        .rdkafka_client_config("b:9094")?;
        assert_eq!(
            settings(&scram),
            pairs(&[
                ("bootstrap.servers", "b:9094"),
                ("security.protocol", "sasl_ssl"),
                ("ssl.ca.location", "probe"),
                ("ssl.endpoint.identification.algorithm", "https"),
                ("sasl.mechanism", "SCRAM-SHA-512"),
                ("sasl.username", "worker"),
                ("sasl.password", "s3cret"),
            ])
        );
        assert!(
            !format!("{scram:?}").contains("s3cret"),
            "ClientConfig's Debug shows the password"
        );
        let plain_sasl = Security::sasl_plaintext(SaslConfig::plain("u", "p"))
            .rdkafka_client_config("b:9095")?;
        assert_eq!(plain_sasl.get("security.protocol"), Some("sasl_plaintext"));
        assert_eq!(plain_sasl.get("sasl.mechanism"), Some("PLAIN"));
        let oauth = Security::sasl_ssl(
            SaslConfig::oauthbearer(TokenSource::File(PathBuf::from("/token"))),
            TlsConfig::system_roots(),
        )
        .rdkafka_client_config("b:9096")?;
        assert_eq!(oauth.get("sasl.mechanism"), Some("OAUTHBEARER"));
        assert_eq!(oauth.get("sasl.username"), None);
        assert_eq!(oauth.get("sasl.password"), None);
        Ok(())
    }

    #[cfg(unix)]
    #[test]
    fn a_path_librdkafka_cannot_take_is_an_error_naming_the_key() {
        use std::ffi::OsStr;
        use std::os::unix::ffi::OsStrExt;
        let path = PathBuf::from(OsStr::from_bytes(b"/ca-\xff.pem"));
        let err = Security::ssl(TlsConfig::ca_file(path))
            .rdkafka_client_config("b:1")
            .unwrap_err();
        assert!(err.message().starts_with("tls.ca-file"), "{err}");
    }

    #[test]
    fn refusals_by_the_broker_are_kept_until_something_goes_through() {
        let context = Security::plaintext().rdkafka_context();
        assert_eq!(context.refusal(), None);
        // Not a refusal: a broker down.
        context.error(
            KafkaError::Global(RDKafkaErrorCode::AllBrokersDown),
            "1/1 brokers are down",
        );
        assert_eq!(context.refusal(), None);
        // Our own token source failing is not the broker's refusal either.
        context.error(
            KafkaError::Global(RDKafkaErrorCode::Authentication),
            "Failed to acquire SASL OAUTHBEARER token: the token file is empty",
        );
        assert_eq!(context.refusal(), None);
        let said = "sasl_ssl://127.0.0.1:9094/bootstrap: SASL authentication error: Authentication failed: Invalid username or password (after 3ms in state AUTH_REQ)";
        context.error(KafkaError::Global(RDKafkaErrorCode::Authentication), said);
        assert_eq!(context.clone().refusal().as_deref(), Some(said));
        context.accepted();
        assert_eq!(context.refusal(), None);
        let tls = "ssl://127.0.0.1:9095/bootstrap: SSL handshake failed: certificate verify failed";
        context.error(KafkaError::Global(RDKafkaErrorCode::SSL), tls);
        assert_eq!(context.refusal().as_deref(), Some(tls));
        assert!(format!("{context:?}").contains("SSL handshake failed"));
    }

    #[tokio::test]
    async fn waiting_for_a_refusal_ends_when_one_comes() {
        let context = Security::plaintext().rdkafka_context();
        let waiting = tokio::spawn({
            let context = context.clone();
            async move { context.refused().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        context.error(
            KafkaError::Global(RDKafkaErrorCode::Authentication),
            "SASL authentication error: no",
        );
        let said = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the waiter wakes up")
            .expect("the waiter does not panic");
        assert_eq!(said, "SASL authentication error: no");
        // Already refused: at once.
        assert_eq!(context.refused().await, "SASL authentication error: no");
    }

    #[test]
    fn tokens_go_to_librdkafka_only_for_oauthbearer() {
        let plain = Security::sasl_ssl(
            SaslConfig::plain("u", Secret::new("p")),
            TlsConfig::system_roots(),
        )
        .rdkafka_context();
        match plain.generate_oauth_token(None) {
            Ok(_) => panic!("a token without a token source"),
            Err(err) => assert!(err.to_string().contains("not OAUTHBEARER"), "{err}"),
        }
    }

    /// `data` in base64url without padding, as JWTs are written.
    fn base64url(data: &[u8]) -> String {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut out = String::new();
        for chunk in data.chunks(3) {
            let n = chunk
                .iter()
                .enumerate()
                .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
            for i in 0..=chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            }
        }
        out
    }

    /// Needs the token providers of the mechanisms branch (a placeholder here).
    #[test]
    fn oauthbearer_tokens_go_to_librdkafka_with_their_principal_and_expiry() {
        assert_eq!(base64url(br#"{"alg":"none"}"#), "eyJhbGciOiJub25lIn0");
        let exp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() + 3600)
            .unwrap_or(4_000_000_000);
        let jwt = format!(
            "{}.{}.",
            base64url(br#"{"alg":"none"}"#),
            base64url(format!(r#"{{"sub":"worker","exp":{exp}}}"#).as_bytes())
        );
        let context = Security::sasl_ssl(
            SaslConfig::oauthbearer(TokenSource::Static(Secret::new(jwt.clone()))),
            TlsConfig::system_roots(),
        )
        .rdkafka_context();
        let token = match context.generate_oauth_token(None) {
            Ok(token) => token,
            Err(err) => panic!(
                "no OAUTHBEARER token for librdkafka (the token providers come with the mechanisms branch): {err}"
            ),
        };
        assert_eq!(token.token, jwt);
        assert_eq!(token.principal_name, "worker");
        assert_eq!(
            token.lifetime_ms,
            i64::try_from(exp * 1000).unwrap_or(i64::MAX)
        );
    }
}
