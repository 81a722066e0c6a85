//! The serde model of the TOML file: one struct per table, kebab-case keys, unknown keys refused.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{duration, rate};
use worker_core::defaults;
pub use worker_core::kafka::OffsetReset;
use worker_core::runtime::RateLimit;
use worker_core::security::{Protocol, Secret};

/// The whole file. See `worker-cli/reference.toml` for every key with its default.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct Config {
    /// `[kafka]`: where the brokers are.
    pub kafka: KafkaSection,
    /// `[worker]`: the share group and the runtime's settings.
    pub worker: WorkerSection,
    /// `[retry]`: attempts and backoff.
    #[serde(default)]
    pub retry: RetrySection,
    /// `[dlq]`: who writes dead letters, and where; without this table no sink is configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dlq: Option<DlqSection>,
    /// `[delay]`: the delay topics; without this table every wait is held in the worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay: Option<DelaySection>,
    /// `[control]`: the group's control topic (fleet-wide pauses); without this table the worker
    /// follows no controls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control: Option<ControlSection>,
    /// `[telemetry]`: logs and the HTTP listener.
    #[serde(default)]
    pub telemetry: TelemetrySection,
    /// `[ui]`: the web dashboard (`share-worker ui`, and `/ui` with `telemetry.ui`).
    #[serde(default)]
    pub ui: UiSection,
    /// `[[route]]`: one per topic, at least one.
    #[serde(rename = "route")]
    pub routes: Vec<RouteSection>,
    /// `[[cron]]`: periodic jobs the group enqueues, each tick once across the fleet.
    #[serde(default, rename = "cron", skip_serializing_if = "Vec::is_empty")]
    pub crons: Vec<CronSection>,
}

/// One `[[cron]]`: a periodic job.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct CronSection {
    /// Its name (1 to 32 of a-z A-Z 0-9 . _ -): its job ids are `cron:{name}:{tick}`. Required.
    pub name: String,
    /// Every this long (ticks on its multiples since the Unix epoch). This or `schedule`.
    #[serde(
        default,
        with = "duration::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub every: Option<Duration>,
    /// A cron expression (5 fields, or 6 with seconds first). This or `every`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    /// The IANA time zone `schedule` is evaluated in (default UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// Where each firing's record goes. Required.
    pub topic: String,
    /// The record's payload (default: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<String>,
    /// The record's key (default: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The record's headers (default: none besides `share.job-id`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Ticks missed while no worker ran: `once` fires the latest of them (default), `skip` none.
    #[serde(default)]
    pub catch_up: CatchUpSetting,
}

/// `catch-up` of a `[[cron]]`.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum CatchUpSetting {
    /// Fire the latest missed tick once.
    #[default]
    Once,
    /// Skip missed ticks.
    Skip,
}

impl CronSection {
    /// The library's job these settings describe, or what is wrong with them.
    pub fn job(&self) -> worker_core::Result<worker_core::cron::CronJob> {
        use worker_core::cron::{CatchUp, CronJob, Schedule};
        let schedule = match (&self.every, &self.schedule) {
            (Some(every), None) => Schedule::every(*every)?,
            (None, Some(expression)) => {
                Schedule::cron(expression, self.timezone.as_deref().unwrap_or("UTC"))?
            }
            _ => {
                return Err(worker_core::Error::new(
                    worker_core::ErrorKind::Config,
                    "expected `every` or `schedule`, one of them",
                ));
            }
        };
        let mut job = CronJob::new(self.name.clone(), schedule, self.topic.clone()).catch_up(
            match self.catch_up {
                CatchUpSetting::Once => CatchUp::Once,
                CatchUpSetting::Skip => CatchUp::Skip,
            },
        );
        if let Some(payload) = &self.payload {
            job = job.payload(payload.clone().into_bytes());
        }
        if let Some(key) = &self.key {
            job = job.key(key.clone().into_bytes());
        }
        for (key, value) in &self.headers {
            job = job.header(key.clone(), value.clone().into_bytes());
        }
        job.check()?;
        Ok(job)
    }
}

/// `[kafka]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct KafkaSection {
    /// Comma-separated `host:port` list. Required.
    pub bootstrap: String,
    /// The client id sent to the brokers (default `share-worker`).
    #[serde(default = "default_client_id")]
    pub client_id: String,
    /// How long one fetch may wait for records (default 500ms, at most 60s).
    #[serde(default = "default_max_wait", with = "duration")]
    pub max_wait: Duration,
    /// How long a broker may take to answer (default 30s).
    #[serde(default = "default_request_timeout", with = "duration")]
    pub request_timeout: Duration,
    /// `plaintext` (default), `ssl`, `sasl_plaintext` or `sasl_ssl`: every Kafka connection of
    /// the worker (share client, admin, dead-letter producer, replay, produce) uses it.
    #[serde(default)]
    pub security_protocol: Protocol,
    /// `[kafka.tls]`: what to trust and, for mutual TLS, who to be (`ssl` and `sasl_ssl` only;
    /// default: the system roots, no client certificate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSection>,
    /// `[kafka.sasl]`: the mechanism and its credentials (required for `sasl_plaintext` and
    /// `sasl_ssl`, refused otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sasl: Option<SaslSection>,
}

/// `[kafka.tls]`: PEM files.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct TlsSection {
    /// The certificate authorities to trust, only those (default: the system roots).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// The client certificate (chain), for mutual TLS; with `key-file`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<PathBuf>,
    /// The client certificate's private key (PKCS#8, PKCS#1 or SEC1); with `cert-file`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
}

/// `[kafka.sasl]`. `Debug` and the printed configuration show no secret.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct SaslSection {
    /// `PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512` or `OAUTHBEARER`. Required.
    pub mechanism: SaslMechanism,
    /// PLAIN and SCRAM: the user. Required for them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// PLAIN and SCRAM: the password (or `password-file`). Printed as `***`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<Secret>,
    /// PLAIN and SCRAM: a file holding the password (trailing line breaks ignored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_file: Option<PathBuf>,
    /// `[kafka.sasl.oauth]`: where OAUTHBEARER tokens come from (OAUTHBEARER only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth: Option<OauthSection>,
}

/// A SASL mechanism, as brokers name it.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[non_exhaustive]
pub enum SaslMechanism {
    /// Username and password in the clear (over TLS only, in practice).
    #[serde(rename = "PLAIN")]
    Plain,
    /// SCRAM with SHA-256: the password never crosses the wire.
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    /// SCRAM with SHA-512.
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
    /// OAuth 2 bearer tokens, from `[kafka.sasl.oauth]`.
    #[serde(rename = "OAUTHBEARER")]
    OAuthBearer,
}

impl SaslMechanism {
    /// The broker's name of it.
    pub fn as_str(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
            SaslMechanism::OAuthBearer => "OAUTHBEARER",
        }
    }
}

/// `[kafka.sasl.oauth]`: exactly one of `token`, `token-file` or `token-endpoint` (the OIDC
/// client-credentials grant, with `client-id` and `client-secret` or `client-secret-file`).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct OauthSection {
    /// One token, used until it expires. Printed as `***`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<Secret>,
    /// A file holding the token, read again when it changes (a sidecar rotating it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
    /// The OIDC token endpoint (http:// or https:// URL) of the client-credentials grant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_endpoint: Option<String>,
    /// With `token-endpoint`: the client id. Required for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// With `token-endpoint`: the client secret (or `client-secret-file`). Printed as `***`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<Secret>,
    /// With `token-endpoint`: a file holding the client secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret_file: Option<PathBuf>,
    /// With `token-endpoint`: the scope asked for (default: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

/// `[worker]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct WorkerSection {
    /// The share group. Required.
    pub group: String,
    /// Handlers running at most (default 64).
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    /// The most records one fetch asks for (default 500).
    #[serde(default = "default_max_poll_records")]
    pub max_poll_records: u32,
    /// When a lock is renewed, as a fraction of the lock duration (default 0.5, in (0, 1)).
    #[serde(default = "default_renew_at")]
    pub renew_at: f64,
    /// How long one handler may run (default 5m).
    #[serde(default = "default_job_timeout", with = "duration")]
    pub job_timeout: Duration,
    /// How long shutdown waits for running handlers (default 30s).
    #[serde(default = "default_shutdown_grace", with = "duration")]
    pub shutdown_grace: Duration,
    /// The furthest ahead a record's `share.not-before` may be (default 30 days); one due later
    /// is dead-lettered at once (reason `not_before`).
    #[serde(default = "default_max_delay", with = "duration")]
    pub max_delay: Duration,
    /// The group's record lock duration, set by `share-worker setup` (default: the broker's).
    #[serde(
        default,
        with = "duration::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub lock_duration: Option<Duration>,
    /// Where a new group starts reading, set by `share-worker setup` (default `earliest`).
    #[serde(default)]
    pub auto_offset_reset: OffsetReset,
    /// How often records may start over all routes, in the whole group, e.g. `"1000/s"`: each
    /// worker takes its share (default: no limit).
    #[serde(
        default,
        with = "rate::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub rate: Option<RateLimit>,
    /// With `rate`: how many may start at once after a quiet spell (default: the rate's count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
}

/// `[retry]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct RetrySection {
    /// Handler attempts per record at most (default: the group's delivery-count limit − 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u16>,
    /// The delay after the first failed attempt (default 1s).
    #[serde(default = "default_backoff_initial", with = "duration")]
    pub backoff_initial: Duration,
    /// The largest delay (default 5m).
    #[serde(default = "default_backoff_max", with = "duration")]
    pub backoff_max: Duration,
    /// The factor between two delays (default 2.0, at least 1).
    #[serde(default = "default_backoff_multiplier")]
    pub backoff_multiplier: f32,
    /// Whether a random extra of up to the delay is added (default true).
    #[serde(default = "yes")]
    pub jitter: bool,
    /// The group's delivery-count limit to assume when the worker cannot read it (default: none,
    /// and such a worker does not start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assume_delivery_limit: Option<u16>,
}

impl Default for RetrySection {
    fn default() -> Self {
        Self {
            assume_delivery_limit: None,
            max_attempts: None,
            backoff_initial: default_backoff_initial(),
            backoff_max: default_backoff_max(),
            backoff_multiplier: default_backoff_multiplier(),
            jitter: true,
        }
    }
}

/// `[dlq]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct DlqSection {
    /// Who writes the dead letters: the worker (default) or the broker (Kafka 4.4+, KIP-1191).
    #[serde(default)]
    pub mode: DlqMode,
    /// Worker mode: the dead-letter topic template, `{topic}` and `{group}` replaced (default
    /// `{topic}.dlq`, filled in when the file is loaded). Not with broker mode, where the group's
    /// `errors.deadletterqueue.topic.name` names the topic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
    /// Whether an explicit reject is dead-lettered before its REJECT (default true; broker mode
    /// needs true: the broker dead-letters every REJECT).
    #[serde(default = "yes")]
    pub on_reject: bool,
}

/// `[delay]`: where records wait that must not run yet for longer than `max-hold`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct DelaySection {
    /// The delay topic template: `{topic}` (required) and `{group}` are replaced (default
    /// `{topic}.delay`).
    #[serde(default = "default_delay_topic")]
    pub topic: String,
    /// The longest wait held in the worker, lock renewed (default 5m); longer waits move to the
    /// delay topic.
    #[serde(default = "default_max_hold", with = "duration")]
    pub max_hold: Duration,
}

/// `[control]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct ControlSection {
    /// The control topic (default `{group}.control`; `{group}` is replaced).
    #[serde(default = "default_control_topic")]
    pub topic: String,
    /// What a worker does when it cannot read the control topic at start: `refuse` to start
    /// (the default) or `start-without` controls.
    #[serde(default)]
    pub on_unreadable: OnUnreadable,
    /// How long reading the control topic at start may take (default 10s).
    #[serde(default = "default_control_read_timeout", with = "duration")]
    pub read_timeout: Duration,
}

/// What a worker does when it cannot read its control topic at start (`control.on-unreadable`).
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum OnUnreadable {
    /// It does not start: a worker that cannot see a pause would fetch a paused route.
    #[default]
    Refuse,
    /// It starts with no controls, and says so.
    StartWithout,
}

impl DlqSection {
    /// The dead-letter topic template of worker mode (the default when none is given).
    pub fn topic_template(&self) -> &str {
        self.topic.as_deref().unwrap_or(DEFAULT_DLQ_TOPIC)
    }
}

/// Who writes the dead letters (`dlq.mode`).
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum DlqMode {
    /// The worker writes each letter to `dlq.topic` and REJECTs the record once the write is
    /// confirmed.
    #[default]
    Worker,
    /// The broker writes them (Kafka 4.4+, KIP-1191): the worker REJECTs the record, logs its
    /// reason and error, and the broker writes the letter to the group's
    /// `errors.deadletterqueue.topic.name`.
    Broker,
}

/// `[telemetry]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct TelemetrySection {
    /// Address of the HTTP listener for health and metrics (default: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<SocketAddr>,
    /// `pretty` (default) or `json` logs on stderr.
    #[serde(default)]
    pub log_format: LogFormat,
    /// OTLP/HTTP collector base URL (e.g. `http://127.0.0.1:4318`); spans and metrics go to
    /// `/v1/traces` and `/v1/metrics` under it (default: no export).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub otlp_endpoint: Option<String>,
    /// PEM file of CA certificates trusted for an `https://` `otlp-endpoint` in addition to the
    /// system's roots (default: the system's roots only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub otlp_ca_file: Option<PathBuf>,
    /// How often metrics are pushed to the OTLP endpoint (default 10s).
    #[serde(default = "default_otlp_interval", with = "duration")]
    pub otlp_interval: Duration,
    /// The `service.name` resource attribute of the exported telemetry (default `share-worker`).
    #[serde(default = "default_service_name")]
    pub service_name: String,
    /// How often the share group's lag is sampled for the lag gauge (default 15s).
    #[serde(default = "default_lag_interval", with = "duration")]
    pub lag_interval: Duration,
    /// How often `run` logs its status line at INFO (default 10s).
    #[serde(default = "default_report_every", with = "duration")]
    pub report_every: Duration,
    /// Whether the listener also serves the dashboard under `/ui` (default false; needs `listen`).
    #[serde(default)]
    pub ui: bool,
    /// PEM certificate (chain) the listener serves HTTPS with, with `tls-key-file` (default:
    /// plain HTTP). Read again when it changes, so a rotated certificate needs no restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_cert_file: Option<PathBuf>,
    /// The PEM private key of `tls-cert-file` (PKCS#8, PKCS#1 or SEC1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_key_file: Option<PathBuf>,
    /// Whether a TLS proxy in front of the listener serves it as HTTPS (default false): the
    /// dashboard's session cookie is then marked `Secure`.
    #[serde(default)]
    pub behind_tls_proxy: bool,
    /// Host names (no port) the listener answers besides IP literals and `localhost` (default
    /// none): a request for any other `Host` is refused, against DNS rebinding.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
}

/// `[ui]`: the web dashboard. Read-only unless `allow-actions`; `Debug` shows no token.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct UiSection {
    /// Where `share-worker ui` listens (default `127.0.0.1:9400`); the worker's `/ui` is on
    /// `telemetry.listen`.
    #[serde(default = "default_ui_listen")]
    pub listen: SocketAddr,
    /// Whether the dashboard may replay and skip dead letters (default false: read-only).
    #[serde(default)]
    pub allow_actions: bool,
    /// The bearer token every dashboard request must carry (or `token-file`); required for
    /// actions on a listener that is not on loopback. Printed as `***`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<Secret>,
    /// A file holding the token (trailing line breaks ignored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
    /// How often the dashboard samples the group, its lag and the dead-letter topics, and how
    /// often its pages refresh (default 5s).
    #[serde(default = "default_ui_sample_every", with = "duration")]
    pub sample_every: Duration,
    /// `ui.listen`: PEM certificate (chain) for HTTPS, with `tls-key-file` (default: plain
    /// HTTP); read again when it changes. The worker's `/ui` takes `telemetry.tls-cert-file`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_cert_file: Option<PathBuf>,
    /// `ui.listen`: the PEM private key of `tls-cert-file`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_key_file: Option<PathBuf>,
    /// `ui.listen`: whether a TLS proxy in front serves it as HTTPS (default false).
    #[serde(default)]
    pub behind_tls_proxy: bool,
    /// `ui.listen`: host names answered besides IP literals and `localhost` (default none).
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// Address ranges of the proxies in front of the dashboard (`"10.0.0.0/8"`, `"::1/128"`;
    /// default none): a request from one of them is the client its `X-Forwarded-For` names, for
    /// the sign-in throttle, audit lines and connection slots. Applies wherever the dashboard is
    /// served (`ui.listen`, or `telemetry.listen` with `telemetry.ui`).
    #[serde(default)]
    pub trusted_proxies: Vec<String>,
    /// Whether a dashboard off loopback may be served over plain HTTP, its token and session
    /// cookie in the clear (default false: it does not start without HTTPS, its own TLS files
    /// or `behind-tls-proxy`).
    #[serde(default)]
    pub allow_plain_http: bool,
}

impl Default for UiSection {
    fn default() -> Self {
        Self {
            listen: default_ui_listen(),
            allow_actions: false,
            token: None,
            token_file: None,
            sample_every: default_ui_sample_every(),
            tls_cert_file: None,
            tls_key_file: None,
            behind_tls_proxy: false,
            allowed_hosts: Vec::new(),
            trusted_proxies: Vec::new(),
            allow_plain_http: false,
        }
    }
}

impl Default for TelemetrySection {
    fn default() -> Self {
        Self {
            listen: None,
            log_format: LogFormat::default(),
            otlp_endpoint: None,
            otlp_ca_file: None,
            otlp_interval: default_otlp_interval(),
            service_name: default_service_name(),
            lag_interval: default_lag_interval(),
            report_every: default_report_every(),
            ui: false,
            tls_cert_file: None,
            tls_key_file: None,
            behind_tls_proxy: false,
            allowed_hosts: Vec::new(),
        }
    }
}

/// How logs are written.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Pretty,
    /// One JSON object per line.
    Json,
}

/// What a route runs for each record.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum HandlerKind {
    /// Send the payload to `url`.
    Http,
    /// Run `command` with the payload on stdin.
    Exec,
    /// Accept after an optional `delay`.
    Noop,
}

/// One `[[route]]`: a topic and its handler. Which keys apply depends on `handler`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct RouteSection {
    /// The topic whose records this route handles. Required.
    pub topic: String,
    /// `http`, `exec` or `noop`. Required.
    pub handler: HandlerKind,
    /// Handlers of this route running at most; of a batch route, requests in flight (default:
    /// the worker's concurrency).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<usize>,
    /// How often this route's records may start in the whole group, e.g. `"100/s"`: each worker
    /// assigned the route takes its share (default: no limit).
    #[serde(
        default,
        with = "rate::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub rate: Option<RateLimit>,
    /// With `rate`: how many may start at once (default: the rate's count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
    /// How often the records of one key may start in one worker, e.g. `"1/s"` (default: no
    /// limit).
    #[serde(
        default,
        with = "rate::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub rate_per_key: Option<RateLimit>,
    /// With `rate-per-key`: how many of one key may start at once (default: its count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst_per_key: Option<u32>,
    /// How many records of one key may run at once in this worker (default: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_concurrency: Option<usize>,
    /// A circuit breaker: too many failed calls pause the route for the whole group, then one
    /// worker probes it (needs `[control]`; default: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaker: Option<BreakerSection>,
    /// A handler's retry-after (an HTTP 429's `Retry-After`) pauses the route for the whole
    /// group for that long (needs `[control]`; default false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cool_down: bool,
    /// Makes the route a lane of this strict priority (0 first): while a route of a higher
    /// priority has records, this one holds no more than its floor of the slots (default: not a
    /// lane).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u8>,
    /// Makes the route a weighted lane: the busy lanes of one priority split the slots by
    /// weight, 1 to 1000 (default: not a lane).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
    /// http: send the records in batches, a request per batch (several when its record ids pass
    /// 6 KiB), and read one result per record from the answer (default: one request per record).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<BatchSection>,
    /// How long one call may take (http, exec; default 30s).
    #[serde(
        default,
        with = "duration::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub timeout: Option<Duration>,
    /// http: where to send the payload, an `http://` or `https://` URL. Required for http.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// http: the method (default `POST`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// http: what a 3xx answer does; redirects are never followed, since a POST that becomes a GET
    /// to a login page would accept a record that was never delivered (default `retry`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_redirect: Option<OnRedirect>,
    /// http, `https://` URLs: PEM file of CA certificates trusted in addition to the system's
    /// roots (default: the system's roots only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// http, `https://` URLs: PEM file of the client certificate (chain) presented to the server,
    /// for mutual TLS; needs `key-file` (default: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<PathBuf>,
    /// http, `https://` URLs: PEM file of the private key of `cert-file` (default: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
    /// exec: the program and its arguments. Required for exec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// exec: exit codes that reject the record instead of retrying it (default none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reject_exit_codes: Option<Vec<i32>>,
    /// exec: the worker's environment variables the command sees; every other one (credentials
    /// included) is withheld (default [`DEFAULT_ENV_PASS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_pass: Option<Vec<String>>,
    /// noop: how long to wait before accepting (default 0).
    #[serde(
        default,
        with = "duration::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub delay: Option<Duration>,
}

/// A route's `batch = { max = 100, linger = "200ms", format = "json" }`.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct BatchSection {
    /// The most records per request. Required.
    pub max: usize,
    /// How long a batch waits to fill after its first record (default 200ms).
    #[serde(default = "default_linger", with = "duration")]
    pub linger: Duration,
    /// How the request body carries the payloads (default `json`).
    #[serde(default)]
    pub format: BatchFormat,
    /// One batch per record key (default false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub by_key: bool,
}

impl BatchSection {
    /// The library's batching these settings describe.
    pub fn batch(&self) -> worker_core::Batch {
        let batch = worker_core::Batch::new(self.max, self.linger);
        if self.by_key { batch.by_key() } else { batch }
    }
}

fn default_linger() -> Duration {
    Duration::from_millis(200)
}

/// How a batch request carries its payloads (each one JSON value).
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum BatchFormat {
    /// A JSON array of the payloads (`Content-Type: application/json`).
    #[default]
    Json,
    /// One payload per line (`Content-Type: application/x-ndjson`).
    Ndjson,
}

/// A route's `breaker = { failure-ratio = 0.5, min-calls = 20, window = "30s", open-for = "30s" }`.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct BreakerSection {
    /// The share of failed calls (retries, timeouts, panics) that opens it (default 0.5).
    #[serde(default = "default_failure_ratio")]
    pub failure_ratio: f64,
    /// The fewest calls within `window` before it may open (default 20).
    #[serde(default = "default_min_calls")]
    pub min_calls: u32,
    /// How far back calls are counted (default 30s).
    #[serde(default = "default_breaker_window", with = "duration")]
    pub window: Duration,
    /// How long the route stays paused before one worker probes it (default 30s).
    #[serde(default = "default_open_for", with = "duration")]
    pub open_for: Duration,
}

impl BreakerSection {
    /// The breaker these settings describe.
    pub fn breaker(&self) -> worker_core::Breaker {
        worker_core::Breaker::new(
            self.failure_ratio,
            self.min_calls,
            self.window,
            self.open_for,
        )
    }
}

fn default_failure_ratio() -> f64 {
    worker_core::defaults::BREAKER_FAILURE_RATIO
}

fn default_min_calls() -> u32 {
    worker_core::defaults::BREAKER_MIN_CALLS
}

fn default_breaker_window() -> Duration {
    worker_core::defaults::BREAKER_WINDOW
}

fn default_open_for() -> Duration {
    worker_core::defaults::BREAKER_OPEN_FOR
}

impl RouteSection {
    /// exec: the variables passed through to the command (`env-pass` or its default).
    pub fn env_pass(&self) -> Vec<String> {
        match &self.env_pass {
            Some(names) => names.clone(),
            None => DEFAULT_ENV_PASS.iter().map(|&n| n.to_owned()).collect(),
        }
    }
}

/// What an http route does with a 3xx answer (`on-redirect`).
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum OnRedirect {
    /// Retry the record: the endpoint may be moving and come back.
    #[default]
    Retry,
    /// Reject the record (dead-lettered with `dlq.on-reject`).
    Reject,
}

/// The fewest characters a dashboard token (`ui.token`, `ui.token-file`) may have: 32 random
/// characters cannot be guessed, even at the sign-in throttle's pace from many addresses.
pub const MIN_UI_TOKEN_CHARS: usize = 32;

/// The default route timeout for http and exec.
pub const DEFAULT_ROUTE_TIMEOUT: Duration = Duration::from_secs(30);

/// The variables an exec command sees by default: what finds programs and sets the locale, time
/// zone, home and temporary directory; never credentials.
pub const DEFAULT_ENV_PASS: &[&str] = &["PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR"];

/// The prefix of the variables the exec handler sets per record; `env-pass` may not name them.
pub const RECORD_ENV_PREFIX: &str = "SHARE_WORKER_";

fn default_client_id() -> String {
    defaults::CLIENT_ID.to_owned()
}
fn default_max_wait() -> Duration {
    defaults::MAX_WAIT
}
fn default_request_timeout() -> Duration {
    defaults::REQUEST_TIMEOUT
}
fn default_concurrency() -> usize {
    defaults::CONCURRENCY
}
fn default_max_poll_records() -> u32 {
    defaults::MAX_POLL_RECORDS
}
fn default_renew_at() -> f64 {
    defaults::RENEW_AT
}
fn default_job_timeout() -> Duration {
    defaults::JOB_TIMEOUT
}
fn default_shutdown_grace() -> Duration {
    defaults::SHUTDOWN_GRACE
}
fn default_max_delay() -> Duration {
    defaults::MAX_DELAY
}
fn default_backoff_initial() -> Duration {
    defaults::BACKOFF_INITIAL
}
fn default_backoff_max() -> Duration {
    defaults::BACKOFF_MAX
}
fn default_backoff_multiplier() -> f32 {
    defaults::BACKOFF_FACTOR
}
fn default_otlp_interval() -> Duration {
    Duration::from_secs(10)
}
fn default_service_name() -> String {
    "share-worker".to_owned()
}
fn default_lag_interval() -> Duration {
    Duration::from_secs(15)
}
fn default_report_every() -> Duration {
    Duration::from_secs(10)
}
fn default_ui_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 9400))
}
fn default_ui_sample_every() -> Duration {
    Duration::from_secs(5)
}
/// The dead-letter topic template of worker mode when `dlq.topic` is not given.
pub const DEFAULT_DLQ_TOPIC: &str = "{topic}.dlq";
fn default_delay_topic() -> String {
    worker_core::delay::DEFAULT_TEMPLATE.to_owned()
}
fn default_control_topic() -> String {
    "{group}.control".to_owned()
}
fn default_control_read_timeout() -> Duration {
    Duration::from_secs(10)
}
fn default_max_hold() -> Duration {
    defaults::MAX_HOLD
}
fn yes() -> bool {
    true
}
