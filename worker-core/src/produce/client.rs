//! The one librdkafka producer the library writes with: the dead-letter sink, [`JobProducer`]
//! (enqueueing jobs) and the worker's moves to the delay topics all make it here, the same way:
//! idempotent, `acks=all`, secured by the one [`Security`], a write confirmed only when the broker
//! acknowledged it, and a broker's refusal (a wrong password, an untrusted certificate) reported in
//! the broker's words as soon as librdkafka says so rather than at the delivery timeout.
//!
//! [`JobProducer`]: super::JobProducer

use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::producer::{FutureProducer, FutureRecord};

use crate::security::{KafkaContext, RdkafkaSecurity, Security};
use crate::{Error, ErrorKind, Result};

/// The librdkafka settings of every producer: `bootstrap` secured by `security`, then `options`
/// (the caller's own), then what cannot be turned off: idempotence, `acks=all`, the client id and
/// the delivery timeout.
pub(crate) fn producer_config(
    security: &Security,
    bootstrap: &str,
    client_id: &str,
    delivery_timeout: Duration,
    options: &[(String, String)],
) -> Result<ClientConfig> {
    let mut config = security.rdkafka_client_config(bootstrap)?;
    for (key, value) in options {
        config.set(key, value);
    }
    let timeout_ms = delivery_timeout.as_millis().clamp(1, i32::MAX as u128);
    config
        .set("bootstrap.servers", bootstrap)
        .set("client.id", client_id)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("message.timeout.ms", timeout_ms.to_string());
    Ok(config)
}

/// A producer and its context (where the broker's refusals are kept).
pub(crate) struct Producer {
    pub(crate) inner: FutureProducer<KafkaContext>,
    pub(crate) context: KafkaContext,
}

/// Why one write failed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The producer did not take it (librdkafka's own checks, such as `message.max.bytes`).
    Queue(KafkaError),
    /// The broker did not confirm it.
    Delivery(KafkaError),
    /// The producer dropped it.
    Dropped,
    /// A broker refused the producer (SASL authentication, TLS handshake): what it said.
    Refused(String),
}

/// Where a confirmed record landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Landed {
    pub(crate) partition: i32,
    pub(crate) offset: i64,
}

impl Producer {
    /// A producer from `config`, its OAUTHBEARER tokens and refusals handled by `security`'s
    /// context.
    pub(crate) fn new(config: &ClientConfig, security: &Security) -> Result<Self, KafkaError> {
        let context = security.rdkafka_context();
        Ok(Self {
            inner: config.create_with_context(context.clone())?,
            context,
        })
    }

    /// Queues `record` without waiting for the broker: librdkafka delivers it in the
    /// background, and its outcome is not looked at. For writes nothing waits on (a control
    /// topic's tombstones), made from a thread that must not block.
    pub(crate) fn enqueue(&self, record: FutureRecord<'_, [u8], [u8]>) -> Result<(), KafkaError> {
        self.inner
            .send_result(record)
            .map(drop)
            .map_err(|(err, _)| err)
    }

    /// Writes `record` once: returns when the broker has confirmed it (`acks=all`), or refused
    /// the producer.
    pub(crate) async fn write(
        &self,
        record: FutureRecord<'_, [u8], [u8]>,
    ) -> Result<Landed, Failure> {
        let queued = self
            .inner
            .send_result(record)
            .map_err(|(err, _)| Failure::Queue(err))?;
        let delivered = tokio::select! {
            delivered = queued => delivered,
            said = self.context.refused() => return Err(Failure::Refused(said)),
        };
        match delivered {
            Ok(Ok(delivery)) => {
                self.context.accepted();
                Ok(Landed {
                    partition: delivery.partition,
                    offset: delivery.offset,
                })
            }
            Ok(Err((err, _))) => Err(Failure::Delivery(err)),
            Err(_) => Err(Failure::Dropped),
        }
    }
}

impl Failure {
    /// The failure as an [`Error`] about `what` (e.g. "writing a job to sms"): a refusal is an
    /// authentication error, a write not allowed an authorization error, anything else I/O.
    pub(crate) fn into_error(self, what: &str) -> Error {
        use rdkafka::error::RDKafkaErrorCode as C;
        match self {
            Failure::Refused(said) => Error::new(
                ErrorKind::Authentication,
                format!("{what}: the broker refused the producer: {said}"),
            ),
            Failure::Dropped => Error::new(
                ErrorKind::Io,
                format!("{what}: the producer dropped the record"),
            ),
            Failure::Queue(err) | Failure::Delivery(err) => {
                let kind = match err.rdkafka_error_code() {
                    Some(
                        C::TopicAuthorizationFailed
                        | C::ClusterAuthorizationFailed
                        | C::TransactionalIdAuthorizationFailed,
                    ) => ErrorKind::Authorization,
                    Some(C::InvalidTopic | C::MessageSizeTooLarge | C::InvalidRecord) => {
                        ErrorKind::Config
                    }
                    Some(C::SaslAuthenticationFailed | C::Authentication) => {
                        ErrorKind::Authentication
                    }
                    _ => ErrorKind::Io,
                };
                Error::new(kind, format!("{what}: {err}")).with_source(err)
            }
        }
    }
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer").finish_non_exhaustive()
    }
}
