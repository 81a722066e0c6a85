//! How the client's connections to Kafka are secured: one [`Security`] setting, used by every
//! connection it makes (membership, sessions, fetch, acknowledge, admin). `worker-core` secures
//! its librdkafka producers and consumers with the same value.
//!
//! - **TLS** ([`TlsConfig`]) with rustls: a CA bundle (PEM) or the system roots, and optionally a
//!   client certificate and key for mutual TLS. The server name checked is the broker's
//!   advertised host.
//! - **SASL** ([`SaslConfig`]) over plaintext or TLS: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and
//!   OAUTHBEARER (a static token, a token file re-read when it changes, or the OIDC
//!   client-credentials grant, refreshed before expiry). When the broker limits a session's
//!   lifetime (`connections.max.reauth.ms`, KIP-368) the connection re-authenticates before it runs
//!   out, so long-lived share sessions are never dropped for it.
//! - **Secrets** ([`Secret`]) never appear in `Debug` output or logs.
//!
//! ```no_run
//! # async fn run() -> worker_kafka::Result<()> {
//! use worker_kafka::KafkaSource;
//! use worker_kafka::security::{SaslConfig, Secret, Security, TlsConfig};
//!
//! let security = Security::sasl_ssl(
//!     SaslConfig::scram_sha512("worker", Secret::from_env("KAFKA_PASSWORD")?),
//!     TlsConfig::ca_file("/etc/kafka/ca.pem"),
//! );
//! let source = KafkaSource::builder("broker-1:9094", "sms-senders")
//!     .topic("sms")
//!     .security(security)
//!     .build()
//!     .await?;
//! # let _ = source;
//! # Ok(()) }
//! ```

pub(crate) mod sasl;
mod secret;
pub(crate) mod tls;
pub(crate) mod token;
mod untrusted;

use std::fmt;
use std::sync::Arc;

pub use sasl::{SaslConfig, ScramMechanism};
pub use secret::Secret;
pub use tls::{TlsConfig, read_certs, read_key};
pub use token::{OidcClientCredentials, Token, TokenProvider, TokenSource};

/// The security protocol of a connection, as Kafka names them (in lower case, as in the TOML
/// file's `kafka.security-protocol`).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// Neither TLS nor SASL (the default).
    #[default]
    Plaintext,
    /// TLS, optionally with a client certificate (mutual TLS).
    Ssl,
    /// SASL over plain TCP.
    SaslPlaintext,
    /// SASL over TLS.
    SaslSsl,
}

impl Protocol {
    /// Whether connections use TLS (`ssl`, `sasl_ssl`).
    pub fn uses_tls(self) -> bool {
        matches!(self, Protocol::Ssl | Protocol::SaslSsl)
    }

    /// Whether connections authenticate with SASL (`sasl_plaintext`, `sasl_ssl`).
    pub fn uses_sasl(self) -> bool {
        matches!(self, Protocol::SaslPlaintext | Protocol::SaslSsl)
    }

    /// The lower-case name (`plaintext`, `ssl`, `sasl_plaintext`, `sasl_ssl`), as in the TOML
    /// file and librdkafka's `security.protocol`.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Plaintext => "plaintext",
            Protocol::Ssl => "ssl",
            Protocol::SaslPlaintext => "sasl_plaintext",
            Protocol::SaslSsl => "sasl_ssl",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How every Kafka connection of a worker is secured. Cheap to clone. `Debug` shows no secret.
#[derive(Clone, Debug, Default)]
pub struct Security {
    tls: Option<TlsConfig>,
    sasl: Option<SaslConfig>,
}

impl Security {
    /// Plain TCP, no authentication (the default).
    pub fn plaintext() -> Self {
        Self::default()
    }

    /// TLS; with a client certificate in `tls`, mutual TLS.
    pub fn ssl(tls: TlsConfig) -> Self {
        Self {
            tls: Some(tls),
            sasl: None,
        }
    }

    /// SASL over plain TCP (credentials travel unencrypted unless the mechanism protects them:
    /// use [`sasl_ssl`](Self::sasl_ssl) outside a trusted network).
    pub fn sasl_plaintext(sasl: SaslConfig) -> Self {
        Self {
            tls: None,
            sasl: Some(sasl),
        }
    }

    /// SASL over TLS.
    pub fn sasl_ssl(sasl: SaslConfig, tls: TlsConfig) -> Self {
        Self {
            tls: Some(tls),
            sasl: Some(sasl),
        }
    }

    /// The protocol this setting amounts to.
    pub fn protocol(&self) -> Protocol {
        match (&self.tls, &self.sasl) {
            (None, None) => Protocol::Plaintext,
            (Some(_), None) => Protocol::Ssl,
            (None, Some(_)) => Protocol::SaslPlaintext,
            (Some(_), Some(_)) => Protocol::SaslSsl,
        }
    }

    /// The TLS settings, if connections use TLS.
    pub fn tls(&self) -> Option<&TlsConfig> {
        self.tls.as_ref()
    }

    /// The SASL settings, if connections authenticate with SASL.
    pub fn sasl(&self) -> Option<&SaslConfig> {
        self.sasl.as_ref()
    }
}

/// A [`Security`] made ready to connect with: the TLS files read and checked once.
#[derive(Clone, Default)]
pub(crate) struct Prepared {
    pub(crate) tls: Option<Arc<rustls::ClientConfig>>,
    pub(crate) sasl: Option<SaslConfig>,
    pub(crate) protocol: Protocol,
}

impl Prepared {
    /// Reads the TLS files of `security`; an error names the file and what is wrong with it.
    pub(crate) fn new(security: &Security) -> crate::Result<Self> {
        Ok(Self {
            tls: security
                .tls
                .as_ref()
                .map(TlsConfig::rustls_config)
                .transpose()?,
            sasl: security.sasl.clone(),
            protocol: security.protocol(),
        })
    }
}

impl fmt::Debug for Prepared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Prepared")
            .field("protocol", &self.protocol)
            .field("sasl", &self.sasl)
            .finish_non_exhaustive()
    }
}
