//! A notification worker on a secured cluster, configured from environment variables: the
//! variables a deployment sets (and `scripts/kafka.sh env` prints for the local broker) become one
//! [`Security`] that the share source and the dead-letter sink both use.
//!
//! | variable | meaning |
//! |---|---|
//! | `KAFKA_BOOTSTRAP` | the secured listener, `host:port[,host:port…]` (required) |
//! | `KAFKA_SECURITY_PROTOCOL` | `sasl_ssl` (default), `ssl` or `plaintext` |
//! | `KAFKA_TLS_CA_FILE` | PEM CA bundle (default: the system roots) |
//! | `KAFKA_TLS_CERT_FILE`, `KAFKA_TLS_KEY_FILE` | client certificate and key, for mutual TLS |
//! | `KAFKA_SASL_MECHANISM` | `PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512` (default) |
//! | `KAFKA_SASL_USERNAME`, `KAFKA_SASL_PASSWORD` | the SASL user (required with `sasl_ssl`) |

use std::convert::Infallible;

use tower::service_fn;
use worker_core::dlq::KafkaDlqSink;
use worker_core::kafka::{KafkaSource, OffsetReset};
use worker_core::security::{SaslConfig, Security, TlsConfig};
use worker_core::{Job, Outcome, Worker};

/// Where to connect and how.
#[derive(Clone, Debug)]
pub struct Connection {
    /// The bootstrap servers.
    pub bootstrap: String,
    /// TLS and SASL for every connection.
    pub security: Security,
}

impl Connection {
    /// From the process environment.
    pub fn from_env() -> Result<Self, String> {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    /// From `var`, which looks a variable up by name (the table in the module docs).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let required = |name: &str| {
            var(name)
                .filter(|v| !v.is_empty())
                .ok_or(format!("{name} is not set"))
        };
        let bootstrap = required("KAFKA_BOOTSTRAP")?;
        let tls = || {
            let tls = match var("KAFKA_TLS_CA_FILE") {
                Some(ca) => TlsConfig::ca_file(ca),
                None => TlsConfig::system_roots(),
            };
            match (var("KAFKA_TLS_CERT_FILE"), var("KAFKA_TLS_KEY_FILE")) {
                (Some(cert), Some(key)) => Ok(tls.client_cert(cert, key)),
                (None, None) => Ok(tls),
                _ => Err("KAFKA_TLS_CERT_FILE and KAFKA_TLS_KEY_FILE come together".to_owned()),
            }
        };
        let protocol = var("KAFKA_SECURITY_PROTOCOL").unwrap_or_else(|| "sasl_ssl".to_owned());
        let security = match protocol.as_str() {
            "plaintext" => Security::plaintext(),
            "ssl" => Security::ssl(tls()?),
            "sasl_ssl" => {
                let username = required("KAFKA_SASL_USERNAME")?;
                let password = required("KAFKA_SASL_PASSWORD")?;
                let mechanism =
                    var("KAFKA_SASL_MECHANISM").unwrap_or_else(|| "SCRAM-SHA-512".to_owned());
                let sasl = match mechanism.as_str() {
                    "PLAIN" => SaslConfig::plain(username, password),
                    "SCRAM-SHA-256" => SaslConfig::scram_sha256(username, password),
                    "SCRAM-SHA-512" => SaslConfig::scram_sha512(username, password),
                    other => {
                        return Err(format!(
                            "KAFKA_SASL_MECHANISM: {other:?} is not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"
                        ));
                    }
                };
                Security::sasl_ssl(sasl, tls()?)
            }
            other => {
                return Err(format!(
                    "KAFKA_SECURITY_PROTOCOL: {other:?} is not sasl_ssl, ssl or plaintext"
                ));
            }
        };
        Ok(Self {
            bootstrap,
            security,
        })
    }
}

/// A worker for `topic` in `group` over `connection`: each notification is sent (here: accepted),
/// and one whose payload is `undeliverable` is rejected into `{topic}.dlq`, written over the same
/// secured connection.
pub async fn worker(
    connection: &Connection,
    group: &str,
    topic: &str,
) -> worker_core::Result<Worker<KafkaSource>> {
    let source = KafkaSource::builder(&connection.bootstrap, group)
        .topic(topic)
        .offset_reset(OffsetReset::Earliest)
        .security(connection.security.clone())
        .build()
        .await?;
    let dlq = KafkaDlqSink::builder(&connection.bootstrap, group)
        .worker("secured-notifier")
        .security(connection.security.clone())
        .build()?;
    Worker::builder(source)
        .route(
            topic,
            service_fn(|job: Job| async move {
                if job
                    .payload()
                    .is_some_and(|p| p.as_ref() == b"undeliverable")
                {
                    return Ok::<_, Infallible>(Outcome::reject("no route to the recipient"));
                }
                Ok(Outcome::Accept)
            }),
        )
        .concurrency(64)
        .dlq(dlq)
        .build()
}
