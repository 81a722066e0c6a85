//! [`JobProducerBuilder`]: the settings of a [`JobProducer`].

use std::sync::Arc;
use std::time::Duration;

use super::client::{Producer, producer_config};
use super::producer::{Inner, JobProducer};
use crate::security::Security;
use crate::{Error, ErrorKind, Result};

/// Settings for a [`JobProducer`]: made by [`JobProducer::builder`].
#[derive(Debug)]
pub struct JobProducerBuilder {
    bootstrap: String,
    client_id: String,
    delivery_timeout: Duration,
    security: Security,
    options: Vec<(String, String)>,
}

impl JobProducerBuilder {
    pub(super) fn new(bootstrap: String) -> Self {
        Self {
            bootstrap,
            client_id: "share-worker-producer".to_owned(),
            delivery_timeout: Duration::from_secs(30),
            security: Security::plaintext(),
            options: Vec::new(),
        }
    }

    /// The client id sent to the brokers (default `share-worker-producer`).
    pub fn client_id(mut self, client_id: impl Into<String>) -> Self {
        self.client_id = client_id.into();
        self
    }

    /// How long one enqueue may take before it fails (librdkafka `message.timeout.ms`, default
    /// 30 s). A record that timed out may still have landed.
    pub fn delivery_timeout(mut self, timeout: Duration) -> Self {
        self.delivery_timeout = timeout;
        self
    }

    /// Secures the connections (TLS, SASL) like every other Kafka connection of the worker;
    /// default plain TCP. A broker that refuses the producer fails the enqueue at once, in the
    /// broker's words ([`ErrorKind::Authentication`]).
    pub fn security(mut self, security: Security) -> Self {
        self.security = security;
        self
    }

    /// Any other librdkafka producer setting (`linger.ms`, `compression.type`, ...), applied over
    /// the security settings. Idempotence and `acks=all` cannot be turned off.
    pub fn option(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.options.push((key.into(), value.into()));
        self
    }

    /// Creates the producer (it connects in the background).
    pub fn build(self) -> Result<JobProducer> {
        if self.bootstrap.split(',').all(|s| s.trim().is_empty()) {
            return Err(Error::new(
                ErrorKind::Config,
                "`JobProducer::builder`: expected at least one host:port",
            ));
        }
        let config = producer_config(
            &self.security,
            &self.bootstrap,
            &self.client_id,
            self.delivery_timeout,
            &self.options,
        )?;
        let producer = Producer::new(&config, &self.security).map_err(|err| {
            Error::new(ErrorKind::Config, "creating the job producer").with_source(err)
        })?;
        Ok(JobProducer {
            inner: Arc::new(Inner {
                producer,
                client_id: self.client_id,
            }),
        })
    }
}
