//! How the worker's connections to Kafka are secured: one [`Security`] setting, used by every
//! Kafka connection the worker makes — the native share client (membership, sessions, fetch,
//! acknowledge, admin; see `worker_kafka::security`, re-exported here) and the librdkafka
//! producers and consumers ([`RdkafkaSecurity`]: dead-letter sink, replay, `produce`, `setup`).
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
//! # async fn run() -> worker_core::Result<()> {
//! use worker_core::dlq::KafkaDlqSink;
//! use worker_core::kafka::KafkaSource;
//! use worker_core::security::{SaslConfig, Secret, Security, TlsConfig};
//!
//! let security = Security::sasl_ssl(
//!     SaslConfig::scram_sha512("worker", Secret::from_env("KAFKA_PASSWORD")?),
//!     TlsConfig::ca_file("/etc/kafka/ca.pem"),
//! );
//! let source = KafkaSource::builder("broker-1:9094", "sms-senders")
//!     .topic("sms")
//!     .security(security.clone())
//!     .build()
//!     .await?;
//! let dlq = KafkaDlqSink::builder("broker-1:9094", "sms-senders").security(security).build()?;
//! # let _ = (source, dlq);
//! # Ok(()) }
//! ```

#[cfg(feature = "rdkafka")]
mod rdkafka;

#[cfg(feature = "rdkafka")]
pub use self::rdkafka::{KafkaContext, RdkafkaSecurity};
pub use worker_kafka::security::*;
