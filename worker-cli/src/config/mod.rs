//! The worker's TOML configuration: one model for the `share-worker` binary and for programs that
//! want a file instead of builder calls.
//!
//! [`Config::load`] reads the file, applies environment overrides (`SHARE_WORKER__WORKER__CONCURRENCY=64`
//! sets `worker.concurrency`; see [`ENV_PREFIX`]), and validates everything once. Keys are
//! kebab-case, durations are humantime strings (`"30s"`, `"250ms"`), unknown keys are errors, and
//! every [`ConfigError`] names the file and line (or the environment variable), the key and what
//! was expected. The validated config then drives the same builders a program would call:
//! [`Config::source_builder`] ([`KafkaSource`](worker_core::kafka::KafkaSource)),
//! [`Config::configure`] ([`WorkerBuilder`]) and [`Config::dlq_sink`] ([`KafkaDlqSink`]), all
//! secured by [`Config::security`] (`kafka.security-protocol`, `[kafka.tls]`, `[kafka.sasl]`).
//!
//! Secrets (`password`, `client-secret`, `token`) show as `***` in `Debug` and in
//! [`Config::to_toml`]; the values themselves stay in the loaded config.
//!
//! Every key, with its default, is in `worker-cli/reference.toml`, which a test parses:
//!
//! ```toml
#![doc = include_str!("../../reference.toml")]
//! ```
//!
//! ```
//! use worker_cli::config::Config;
//!
//! let config = Config::from_toml(
//!     r#"
//!     [kafka]
//!     bootstrap = "127.0.0.1:9092"
//!     [worker]
//!     group = "sms-senders"
//!     [[route]]
//!     topic = "sms"
//!     handler = "noop"
//!     "#,
//!     None,
//!     [("SHARE_WORKER__WORKER__CONCURRENCY".to_owned(), "8".to_owned())],
//! )?;
//! assert_eq!(config.worker.concurrency, 8);
//! # Ok::<(), worker_cli::config::ConfigError>(())
//! ```

mod duration;
mod env;
mod error;
mod locate;
mod model;
mod rate;
mod validate;

#[cfg(test)]
mod tests;

use std::path::Path;
use std::sync::Arc;

use figment::Figment;
use figment::providers::{Format, Toml};

use std::convert::Infallible;
use worker_core::delay::DelayTopic;
use worker_core::dlq::{DlqTopic, KafkaDlqSink};
use worker_core::kafka::{DelayTopics, KafkaSourceBuilder};
use worker_core::policy::Backoff;
use worker_core::produce::JobProducer;
use worker_core::security::{
    OidcClientCredentials, Protocol, SaslConfig, Secret, Security, TlsConfig, TokenSource,
};
use worker_core::source::ShareSource;

use tower::Service;
use worker_core::runtime::{RateLimit, Route};
use worker_core::{Error, ErrorKind, Job, Outcome, Result, WorkerBuilder};

pub use env::ENV_PREFIX;
pub use error::ConfigError;
pub use model::{
    BatchFormat, BatchSection, BreakerSection, CatchUpSetting, Config, ControlSection, CronSection,
    DEFAULT_DLQ_TOPIC, DEFAULT_ENV_PASS, DEFAULT_ROUTE_TIMEOUT, DelaySection, DlqMode, DlqSection,
    HandlerKind, KafkaSection, LogFormat, MIN_UI_TOKEN_CHARS, OauthSection, OffsetReset,
    OnRedirect, OnUnreadable, RECORD_ENV_PREFIX, RetrySection, RouteSection, SaslMechanism,
    SaslSection, TelemetrySection, TlsSection, UiSection, WorkerSection,
};

use env::EnvOverride;
use error::Source;

impl Config {
    /// Reads `path`, applies the `SHARE_WORKER__…` environment overrides and validates.
    pub fn load(path: &Path) -> std::result::Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|err| {
            let source = Source {
                text: "",
                file: Some(path),
                env: &[],
            };
            ConfigError::at(&source, &[], format!("cannot read the file: {err}"))
        })?;
        // `vars_os`: a variable that is not UTF-8 is skipped, where `vars` would panic.
        let env = std::env::vars_os()
            .filter_map(|(key, value)| Some((key.into_string().ok()?, value.into_string().ok()?)));
        Self::from_toml(&text, Some(path), env)
    }

    /// Parses `text` (from `file`, named in errors), applies overrides from `env` (pairs of
    /// variable name and value; those without [`ENV_PREFIX`] are ignored) and validates.
    pub fn from_toml(
        text: &str,
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> std::result::Result<Self, ConfigError> {
        let overrides: Vec<EnvOverride> = env
            .into_iter()
            .filter_map(|(var, value)| EnvOverride::parse(&var, &value))
            .collect();
        let env_paths: Vec<(Vec<String>, String)> = overrides
            .iter()
            .map(|o| (o.path.clone(), o.var.clone()))
            .collect();
        let source = Source {
            text,
            file,
            env: &env_paths,
        };
        if let Err(err) = toml_edit::ImDocument::parse(text) {
            return Err(ConfigError::syntax(&source, &err));
        }
        let mut figment = Figment::new().merge(Toml::string(text));
        for o in overrides {
            figment = figment.merge(o);
        }
        let mut config: Config = figment
            .extract()
            .map_err(|err| ConfigError::from_figment(&source, err))?;
        validate::check(&config)
            .map_err(|(path, message)| ConfigError::at(&source, &path, message))?;
        // The effective configuration names the default dead-letter topic of worker mode.
        if let Some(dlq) = &mut config.dlq
            && dlq.mode == DlqMode::Worker
            && dlq.topic.is_none()
        {
            dlq.topic = Some(DEFAULT_DLQ_TOPIC.to_owned());
        }
        Ok(config)
    }

    /// The effective configuration as TOML (defaults filled in, overrides applied), secrets as
    /// `***`.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self)
            .unwrap_or_else(|err| format!("# cannot print the configuration: {err}\n"))
    }

    /// The route topics.
    pub fn topics(&self) -> impl Iterator<Item = &str> {
        self.routes.iter().map(|r| r.topic.as_str())
    }

    /// Who writes the dead letters: `None` without a `[dlq]` table (nobody: records for the
    /// dead-letter path are REJECTed and only logged).
    pub fn dlq_mode(&self) -> Option<DlqMode> {
        self.dlq.as_ref().map(|d| d.mode)
    }

    /// The worker's dead-letter topics of the routes (empty without `[dlq]` and in broker mode),
    /// deduplicated.
    pub fn dlq_topics(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(template) = self.dlq_template() {
            for topic in self.topics() {
                let dlq = template.render(topic, &self.worker.group);
                if !out.contains(&dlq) {
                    out.push(dlq);
                }
            }
        }
        out
    }

    /// The group's periodic jobs (`[[cron]]`), secured by [`Config::security`]; `None` without
    /// any.
    pub fn cron_scheduler(&self) -> Result<Option<worker_core::cron::CronScheduler>> {
        if self.crons.is_empty() {
            return Ok(None);
        }
        let mut scheduler = worker_core::cron::CronScheduler::new(
            self.kafka.bootstrap.clone(),
            self.worker.group.clone(),
        )
        .security(self.security()?)
        .client_id(self.kafka.client_id.clone());
        for cron in &self.crons {
            scheduler = scheduler.job(cron.job()?);
        }
        Ok(Some(scheduler))
    }

    /// The group's control topic: `control.topic` with `{group}` replaced, or `{group}.control`
    /// without a `[control]` table (what `pause` and `resume` write to either way).
    pub fn control_topic_name(&self) -> String {
        let template = self
            .control
            .as_ref()
            .map_or("{group}.control", |c| c.topic.as_str());
        template.replace("{group}", &self.worker.group)
    }

    /// The group's control topic on these brokers, secured by [`Config::security`].
    pub fn control_topic(&self) -> Result<worker_core::control::ControlTopic> {
        Ok(worker_core::control::ControlTopic::new(
            self.kafka.bootstrap.clone(),
            self.control_topic_name(),
        )
        .client_id(format!("{}-control", self.kafka.client_id))
        .security(self.security()?))
    }

    /// The delay topics of the routes, every tier of each (empty without `[delay]`).
    pub fn delay_topics(&self) -> Vec<String> {
        let Some(template) = self.delay_template() else {
            return Vec::new();
        };
        self.topics()
            .flat_map(|topic| template.tiers(topic, &self.worker.group))
            .collect()
    }

    fn delay_template(&self) -> Option<DelayTopic> {
        // Validated at load time.
        self.delay
            .as_ref()
            .and_then(|d| DelayTopic::new(&d.topic).ok())
    }

    /// A [`JobProducer`] for these brokers, secured by [`Config::security`]: what `produce` and
    /// the worker's moves to the delay topics write with.
    pub fn job_producer(&self) -> Result<JobProducer> {
        JobProducer::builder(self.kafka.bootstrap.clone())
            .client_id(self.kafka.client_id.clone())
            .security(self.security()?)
            .build()
    }

    fn dlq_template(&self) -> Option<DlqTopic> {
        // Validated at load time; a template that fails here is skipped.
        self.dlq
            .as_ref()
            .filter(|d| d.mode == DlqMode::Worker)
            .and_then(|d| DlqTopic::new(d.topic_template()).ok())
    }

    /// A [`KafkaSource`](worker_core::kafka::KafkaSource) builder subscribed to every route topic,
    /// secured by [`Config::security`].
    pub fn source_builder(&self) -> Result<KafkaSourceBuilder> {
        let mut builder =
            KafkaSourceBuilder::new(self.kafka.bootstrap.clone(), self.worker.group.clone())
                .client_id(self.kafka.client_id.clone())
                .max_wait(self.kafka.max_wait)
                .request_timeout(self.kafka.request_timeout)
                .security(self.security()?);
        for topic in self.topics() {
            builder = builder.topic(topic);
        }
        if let Some(delay) = self.delay_template() {
            builder = builder.delay_topics(delay);
        }
        Ok(builder)
    }

    /// How every Kafka connection is secured (`kafka.security-protocol`, `[kafka.tls]`,
    /// `[kafka.sasl]`), the `*-file` secrets read now. Each call makes a new setting (with its own
    /// OAUTHBEARER token cache): make one and clone it.
    pub fn security(&self) -> Result<Security> {
        let kafka = &self.kafka;
        let tls = || {
            let section = kafka.tls.clone().unwrap_or_default();
            let tls = match section.ca_file {
                Some(ca) => TlsConfig::ca_file(ca),
                None => TlsConfig::system_roots(),
            };
            match (section.cert_file, section.key_file) {
                (Some(cert), Some(key)) => tls.client_cert(cert, key),
                _ => tls,
            }
        };
        Ok(match kafka.security_protocol {
            Protocol::Plaintext => Security::plaintext(),
            Protocol::Ssl => Security::ssl(tls()),
            Protocol::SaslPlaintext => Security::sasl_plaintext(self.sasl()?),
            Protocol::SaslSsl => Security::sasl_ssl(self.sasl()?, tls()),
        })
    }

    /// `[kafka.sasl]` as a [`SaslConfig`]; validated at load, so an error here is a file that
    /// changed since (a secret file gone).
    fn sasl(&self) -> Result<SaslConfig> {
        let missing = |key: &str| {
            Error::new(
                ErrorKind::Config,
                format!("`{key}`: missing (the configuration was not validated)"),
            )
        };
        let sasl = self
            .kafka
            .sasl
            .as_ref()
            .ok_or_else(|| missing("kafka.sasl"))?;
        let secret = |value: &Option<Secret>, file: &Option<std::path::PathBuf>, key: &str| match (
            value, file,
        ) {
            (Some(value), _) => Ok(value.clone()),
            (None, Some(file)) => Ok(Secret::from_file(file)?),
            (None, None) => Err(missing(key)),
        };
        let password = || secret(&sasl.password, &sasl.password_file, "kafka.sasl.password");
        let username = || {
            sasl.username
                .clone()
                .ok_or_else(|| missing("kafka.sasl.username"))
        };
        Ok(match sasl.mechanism {
            SaslMechanism::Plain => SaslConfig::plain(username()?, password()?),
            SaslMechanism::ScramSha256 => SaslConfig::scram_sha256(username()?, password()?),
            SaslMechanism::ScramSha512 => SaslConfig::scram_sha512(username()?, password()?),
            SaslMechanism::OAuthBearer => {
                let oauth = sasl
                    .oauth
                    .as_ref()
                    .ok_or_else(|| missing("kafka.sasl.oauth"))?;
                let source = match (&oauth.token, &oauth.token_file, &oauth.token_endpoint) {
                    (Some(token), _, _) => TokenSource::Static(token.clone()),
                    (None, Some(file), _) => TokenSource::File(file.clone()),
                    (None, None, Some(endpoint)) => {
                        TokenSource::ClientCredentials(OidcClientCredentials {
                            token_endpoint: endpoint.clone(),
                            client_id: oauth
                                .client_id
                                .clone()
                                .ok_or_else(|| missing("kafka.sasl.oauth.client-id"))?,
                            client_secret: secret(
                                &oauth.client_secret,
                                &oauth.client_secret_file,
                                "kafka.sasl.oauth.client-secret",
                            )?,
                            scope: oauth.scope.clone(),
                        })
                    }
                    (None, None, None) => return Err(missing("kafka.sasl.oauth.token")),
                };
                SaslConfig::oauthbearer(source)
            }
        })
    }

    /// The dashboard's bearer token (`ui.token`, or read from `ui.token-file`), if one is set.
    pub fn ui_token(&self) -> Result<Option<Secret>> {
        match (&self.ui.token, &self.ui.token_file) {
            (Some(token), _) => Ok(Some(token.clone())),
            (None, Some(file)) => {
                // Checked at load too; read again here, so a file changed since is checked.
                let token = Secret::from_file(file)?;
                if let Err(why) = validate::ui_token_strength(token.expose()) {
                    return Err(Error::new(
                        ErrorKind::Config,
                        format!("`ui.token-file`: {}: {why}", file.display()),
                    ));
                }
                Ok(Some(token))
            }
            (None, None) => Ok(None),
        }
    }

    /// The `[retry]` backoff.
    pub fn backoff(&self) -> Backoff {
        Backoff::exponential(self.retry.backoff_initial, self.retry.backoff_max)
            .factor(self.retry.backoff_multiplier)
            .jitter(self.retry.jitter)
    }

    /// Applies `[worker]` and `[retry]` (and `dlq.mode`, `dlq.on-reject`), the rate limits and
    /// key concurrency of the routes, and `[delay]`'s `max-hold` and topics to a worker builder.
    /// Routes, the dead-letter sink and the delay sink are the caller's: see
    /// [`Config::dlq_sink`] and [`Config::job_producer`].
    pub fn configure<S: ShareSource>(&self, builder: WorkerBuilder<S>) -> WorkerBuilder<S> {
        let w = &self.worker;
        let mut builder = builder
            .concurrency(w.concurrency)
            .max_poll_records(w.max_poll_records)
            .renew_at(w.renew_at)
            .job_timeout(w.job_timeout)
            .shutdown_grace(w.shutdown_grace)
            .max_delay(w.max_delay)
            .backoff(self.backoff());
        if let Some(max) = self.retry.max_attempts {
            builder = builder.max_attempts(max);
        }
        if let Some(limit) = self.retry.assume_delivery_limit {
            builder = builder.assume_delivery_limit(limit);
        }
        if let Some(dlq) = &self.dlq {
            builder = builder.dlq_on_reject(dlq.on_reject);
            if dlq.mode == DlqMode::Broker {
                builder = builder.broker_dlq();
            }
        }
        if let Some(rate) = w.rate {
            builder = builder.rate_limit(with_burst(rate, w.burst));
        }
        if let (Some(delay), Some(template)) = (&self.delay, self.delay_template()) {
            builder = builder.max_hold(delay.max_hold).delay_topic(template);
        }
        builder
    }

    /// `section`'s route with `service`, with its settings (see [`Config::configure_route`]).
    pub fn route<T>(&self, section: &RouteSection, service: T) -> Route
    where
        T: Service<Job, Response = Outcome, Error = Infallible> + Send + 'static,
        T::Future: Send + 'static,
    {
        self.configure_route(section, Route::new(section.topic.as_str(), service))
    }

    /// `section`'s batch route (its `batch` table) with the batch service `service`, with its
    /// settings (see [`Config::configure_route`]).
    pub fn batched_route<T>(
        &self,
        section: &RouteSection,
        batch: &BatchSection,
        service: T,
    ) -> Route
    where
        T: Service<Vec<Job>, Response = Vec<Outcome>, Error = Infallible> + Clone + Send + 'static,
        T::Future: Send + 'static,
    {
        let route = Route::batched(section.topic.as_str(), batch.batch(), service);
        self.configure_route(section, route)
    }

    /// `route` with `section`'s rates, per-key concurrency, breaker, cool-down and lane.
    pub fn configure_route(&self, section: &RouteSection, mut route: Route) -> Route {
        if let Some(rate) = section.rate {
            route = route.rate_limit(with_burst(rate, section.burst));
        }
        if let Some(rate) = section.rate_per_key {
            route = route.key_rate_limit(with_burst(rate, section.burst_per_key));
        }
        if let Some(n) = section.key_concurrency {
            route = route.key_concurrency(n);
        }
        if let Some(breaker) = &section.breaker {
            route = route.breaker(breaker.breaker());
        }
        if section.cool_down {
            route = route.cool_down();
        }
        if let Some(priority) = section.priority {
            route = route.priority(priority);
        }
        if let Some(weight) = section.weight {
            route = route.weight(weight);
        }
        route
    }

    /// The `[dlq]` sink, secured by [`Config::security`], or `None` without a `[dlq]` table and in
    /// broker mode.
    pub fn dlq_sink(&self) -> Result<Option<Arc<KafkaDlqSink>>> {
        let Some(template) = self.dlq_template() else {
            if self.dlq_mode() == Some(DlqMode::Worker) {
                return Err(Error::new(
                    ErrorKind::Config,
                    "`dlq.topic`: invalid template",
                ));
            }
            return Ok(None);
        };
        let sink = KafkaDlqSink::builder(self.kafka.bootstrap.clone(), self.worker.group.clone())
            .topic(template)
            .worker(self.kafka.client_id.clone())
            .security(self.security()?)
            .build()?;
        Ok(Some(Arc::new(sink)))
    }
}

/// `rate` with `burst`, if one is set.
fn with_burst(rate: RateLimit, burst: Option<u32>) -> RateLimit {
    match burst {
        Some(burst) => rate.burst(burst),
        None => rate,
    }
}
