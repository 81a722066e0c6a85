//! Range and consistency checks that serde cannot express; each names the key it is about.

use std::collections::HashSet;
use std::time::Duration;

use super::model::{Config, DlqMode, DlqSection, HandlerKind, RECORD_ENV_PREFIX, RouteSection};
use worker_core::checks::{self, BackoffPart};
use worker_core::dlq::DlqTopic;
use worker_core::runtime::Route;

mod listeners;
mod security;

pub(crate) use listeners::ui_token_strength;

/// A failed check: the key path (TOML segments) and what was expected.
pub(crate) type Invalid = (Vec<String>, String);

/// [`bad`] for `path` as a `map_err` function, for the rules of `worker_core::checks`.
fn at<'a>(path: &'a [&'a str]) -> impl FnOnce(String) -> Invalid + 'a {
    move |why| bad(path, why)
}

fn bad(path: &[&str], message: impl Into<String>) -> Invalid {
    (
        path.iter().map(|s| (*s).to_owned()).collect(),
        message.into(),
    )
}

/// Checks the whole file; the first problem found is returned.
pub(crate) fn check(config: &Config) -> Result<(), Invalid> {
    let kafka = &config.kafka;
    if kafka.bootstrap.split(',').all(|s| s.trim().is_empty()) {
        return Err(bad(
            &["kafka", "bootstrap"],
            "expected at least one host:port",
        ));
    }
    if kafka.max_wait > Duration::from_secs(60) {
        return Err(bad(&["kafka", "max-wait"], "expected at most 60s"));
    }
    if kafka.request_timeout.is_zero() {
        return Err(bad(
            &["kafka", "request-timeout"],
            "expected a duration above 0",
        ));
    }
    security::check(kafka)?;
    let worker = &config.worker;
    if worker.group.trim().is_empty() {
        return Err(bad(
            &["worker", "group"],
            "expected a non-empty share group id",
        ));
    }
    checks::concurrency(worker.concurrency).map_err(at(&["worker", "concurrency"]))?;
    checks::max_poll_records(worker.max_poll_records)
        .map_err(at(&["worker", "max-poll-records"]))?;
    checks::renew_at(worker.renew_at).map_err(at(&["worker", "renew-at"]))?;
    checks::above_zero(worker.max_delay).map_err(at(&["worker", "max-delay"]))?;
    checks::above_zero(worker.job_timeout).map_err(at(&["worker", "job-timeout"]))?;
    if worker
        .lock_duration
        .is_some_and(|d| d < Duration::from_millis(1))
    {
        return Err(bad(&["worker", "lock-duration"], "expected at least 1ms"));
    }
    let retry = &config.retry;
    if let Some(attempts) = retry.max_attempts {
        checks::max_attempts(attempts).map_err(at(&["retry", "max-attempts"]))?;
    }
    if let Some(limit) = retry.assume_delivery_limit {
        checks::assumed_delivery_limit(limit).map_err(at(&["retry", "assume-delivery-limit"]))?;
    }
    checks::backoff(
        retry.backoff_initial,
        retry.backoff_max,
        f64::from(retry.backoff_multiplier),
    )
    .map_err(|(part, why)| {
        let key = match part {
            BackoffPart::Initial => "backoff-initial",
            BackoffPart::Max => "backoff-max",
            BackoffPart::Factor => "backoff-multiplier",
        };
        bad(&["retry", key], why)
    })?;
    if let Some(dlq) = &config.dlq {
        check_dlq(dlq)?;
    }
    if let Some(delay) = &config.delay {
        if let Err(err) = worker_core::delay::DelayTopic::new(&delay.topic) {
            return Err(bad(&["delay", "topic"], err.message()));
        }
        checks::above_zero(delay.max_hold).map_err(at(&["delay", "max-hold"]))?;
    }
    if let Some(control) = &config.control {
        let topic = config.control_topic_name();
        // `{group}` is replaced by now: any other brace fails as a character Kafka refuses.
        if let Err(why) = checks::topic_name(&topic) {
            return Err(bad(
                &["control", "topic"],
                format!("{:?} is not a control topic name: {why}", control.topic),
            ));
        }
        let taken = if config.topics().any(|t| t == topic) {
            Some("a route topic")
        } else if config.dlq_topics().contains(&topic) {
            Some("a dead-letter topic")
        } else if config.delay_topics().contains(&topic) {
            Some("a delay topic")
        } else {
            None
        };
        if let Some(what) = taken {
            return Err(bad(
                &["control", "topic"],
                format!("{topic} is {what}: the control topic needs a topic of its own"),
            ));
        }
        checks::above_zero(control.read_timeout).map_err(at(&["control", "read-timeout"]))?;
    }
    check_rate(&["worker"], "rate", worker.rate, "burst", worker.burst)?;
    check_telemetry(config)?;
    if config.routes.is_empty() {
        return Err(bad(&["route"], "expected at least one [[route]]"));
    }
    let mut names = HashSet::new();
    for (index, cron) in config.crons.iter().enumerate() {
        let at = |key: &str| vec!["cron".to_owned(), index.to_string(), key.to_owned()];
        if cron.timezone.is_some() && cron.schedule.is_none() {
            return Err((at("timezone"), "applies with `schedule` only".to_owned()));
        }
        if let Err(err) = cron.job() {
            let message = err.message();
            let key = ["name", "topic", "every", "schedule", "timezone"]
                .into_iter()
                .find(|key| message.contains(&format!("`{key}`")))
                .unwrap_or("name");
            let why = message
                .split_once(&format!("`{key}`: "))
                .map_or(message, |(_, why)| why);
            return Err((at(key), why.to_owned()));
        }
        if !names.insert(cron.name.as_str()) {
            return Err((
                at("name"),
                format!("{:?}: two [[cron]] have this name", cron.name),
            ));
        }
    }
    let mut topics = HashSet::new();
    for (index, route) in config.routes.iter().enumerate() {
        check_route(route).map_err(|(key, message)| {
            let mut path = vec!["route".to_owned(), index.to_string()];
            path.extend(key);
            (path, message)
        })?;
        if config.control.is_none() && (route.breaker.is_some() || route.cool_down) {
            let key = if route.breaker.is_some() {
                "breaker"
            } else {
                "cool-down"
            };
            return Err(bad(
                &["route", &index.to_string(), key],
                "pauses the route for the whole group through the control topic: add a [control] table",
            ));
        }
        if let Some(batch) = &route.batch
            && batch.max > config.worker.concurrency
        {
            return Err(bad(
                &["route", &index.to_string(), "batch", "max"],
                format!(
                    "a batch fills only with records the worker holds: expected at most worker.concurrency ({}), found {}",
                    config.worker.concurrency, batch.max
                ),
            ));
        }
        if !topics.insert(route.topic.as_str()) {
            return Err((
                vec!["route".to_owned(), index.to_string(), "topic".to_owned()],
                format!("topic {:?} has two routes; expected one", route.topic),
            ));
        }
    }
    Ok(())
}

/// `[dlq]`: a valid topic template in worker mode; in broker mode no topic (the broker's group
/// config names it) and no plain rejects (the broker dead-letters every REJECT).
fn check_dlq(dlq: &DlqSection) -> Result<(), Invalid> {
    match dlq.mode {
        DlqMode::Broker if dlq.topic.is_some() => Err(bad(
            &["dlq", "topic"],
            "not with mode = \"broker\": the broker writes to the group's errors.deadletterqueue.topic.name; remove this key, or set mode = \"worker\"",
        )),
        DlqMode::Broker if !dlq.on_reject => Err(bad(
            &["dlq", "on-reject"],
            "expected true with mode = \"broker\": the broker dead-letters every REJECT, so a plain reject cannot be had",
        )),
        DlqMode::Broker => Ok(()),
        DlqMode::Worker => DlqTopic::new(dlq.topic_template())
            .map(|_| ())
            .map_err(|err| bad(&["dlq", "topic"], err.message())),
    }
}

fn check_telemetry(config: &Config) -> Result<(), Invalid> {
    let telemetry = &config.telemetry;
    if let Some(endpoint) = &telemetry.otlp_endpoint {
        let rest = endpoint
            .strip_prefix("http://")
            .or_else(|| endpoint.strip_prefix("https://"));
        if rest.is_none_or(|host| host.is_empty() || host.starts_with('/')) {
            return Err(bad(
                &["telemetry", "otlp-endpoint"],
                format!(
                    "expected an http:// or https:// URL of an OTLP/HTTP collector, found {endpoint:?}"
                ),
            ));
        }
    }
    if let Some(path) = &telemetry.otlp_ca_file {
        let key = ["telemetry", "otlp-ca-file"];
        if path.as_os_str().is_empty() {
            return Err(bad(&key, "expected the path of a PEM file"));
        }
        match &telemetry.otlp_endpoint {
            Some(endpoint) if endpoint.starts_with("https://") => {}
            Some(endpoint) => {
                return Err(bad(
                    &key,
                    format!("applies to an https:// `otlp-endpoint` only, found {endpoint:?}"),
                ));
            }
            None => {
                return Err(bad(
                    &key,
                    "applies to an https:// `otlp-endpoint` only, and none is set",
                ));
            }
        }
    }
    if telemetry.otlp_interval < Duration::from_millis(100) {
        return Err(bad(
            &["telemetry", "otlp-interval"],
            "expected at least 100ms",
        ));
    }
    if telemetry.lag_interval < Duration::from_millis(100) {
        return Err(bad(
            &["telemetry", "lag-interval"],
            "expected at least 100ms",
        ));
    }
    if telemetry.service_name.trim().is_empty() {
        return Err(bad(
            &["telemetry", "service-name"],
            "expected a non-empty service name",
        ));
    }
    if telemetry.report_every < Duration::from_millis(100) {
        return Err(bad(
            &["telemetry", "report-every"],
            "expected at least 100ms",
        ));
    }
    if telemetry.ui && telemetry.listen.is_none() {
        return Err(bad(
            &["telemetry", "ui"],
            "the dashboard is served on `telemetry.listen`, and none is set",
        ));
    }
    check_ui(config)
}

/// `[ui]`: one token source at most, then the listeners' keys ([`listeners`]).
fn check_ui(config: &Config) -> Result<(), Invalid> {
    let ui = &config.ui;
    match (&ui.token, &ui.token_file) {
        (Some(_), Some(_)) => {
            return Err(bad(
                &["ui", "token-file"],
                "set `token` or `token-file`, not both",
            ));
        }
        (None, Some(path)) if path.as_os_str().is_empty() => {
            return Err(bad(&["ui", "token-file"], "expected the path of a file"));
        }
        _ => {}
    }
    if ui.sample_every < Duration::from_millis(500) {
        return Err(bad(&["ui", "sample-every"], "expected at least 500ms"));
    }
    listeners::check(config)
}

/// Checks one route; the path is relative to the route.
fn check_route(route: &RouteSection) -> Result<(), Invalid> {
    if route.topic.trim().is_empty() {
        return Err(bad(&["topic"], "expected a non-empty topic name"));
    }
    if route.concurrency == Some(0) {
        return Err(bad(&["concurrency"], "expected at least 1, found 0"));
    }
    if route.timeout.is_some_and(|t| t.is_zero()) {
        return Err(bad(&["timeout"], "expected a duration above 0"));
    }
    check_rate(&[], "rate", route.rate, "burst", route.burst)?;
    check_rate(
        &[],
        "rate-per-key",
        route.rate_per_key,
        "burst-per-key",
        route.burst_per_key,
    )?;
    if route.key_concurrency == Some(0) {
        return Err(bad(&["key-concurrency"], "expected at least 1, found 0"));
    }
    if let Some(batch) = &route.batch {
        batch.batch().check().map_err(|err| {
            bad(
                &["batch", "max"],
                err.message().trim_start_matches("`batch.max`: "),
            )
        })?;
    }
    if let Some(weight) = route.weight
        && !(1..=Route::MAX_WEIGHT).contains(&weight)
    {
        return Err(bad(
            &["weight"],
            format!("expected 1 to {}, found {weight}", Route::MAX_WEIGHT),
        ));
    }
    if let Some(breaker) = &route.breaker {
        breaker.breaker().check().map_err(|err| {
            bad(
                &["breaker"],
                err.message().trim_start_matches("`breaker`: "),
            )
        })?;
    }
    let kind = route.handler;
    let only = |key: &str, present: bool, allowed: HandlerKind| {
        if present && kind != allowed {
            Err(bad(
                &[key],
                format!(
                    "applies to handler = {:?} only, this route's handler is {:?}",
                    name(allowed),
                    name(kind)
                ),
            ))
        } else {
            Ok(())
        }
    };
    only("url", route.url.is_some(), HandlerKind::Http)?;
    only("method", route.method.is_some(), HandlerKind::Http)?;
    only(
        "on-redirect",
        route.on_redirect.is_some(),
        HandlerKind::Http,
    )?;
    only("ca-file", route.ca_file.is_some(), HandlerKind::Http)?;
    only("cert-file", route.cert_file.is_some(), HandlerKind::Http)?;
    only("key-file", route.key_file.is_some(), HandlerKind::Http)?;
    only("batch", route.batch.is_some(), HandlerKind::Http)?;
    only("command", route.command.is_some(), HandlerKind::Exec)?;
    only(
        "reject-exit-codes",
        route.reject_exit_codes.is_some(),
        HandlerKind::Exec,
    )?;
    only("env-pass", route.env_pass.is_some(), HandlerKind::Exec)?;
    for name in route.env_pass.iter().flatten() {
        check_env_name(name).map_err(|message| bad(&["env-pass"], message))?;
    }
    only("delay", route.delay.is_some(), HandlerKind::Noop)?;
    match kind {
        HandlerKind::Http => {
            let Some(url) = &route.url else {
                return Err(bad(
                    &["url"],
                    "missing required key `url` for handler = \"http\"",
                ));
            };
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(bad(
                    &["url"],
                    // Only the scheme: the rest of a webhook URL may hold its credentials.
                    match url.split_once("://") {
                        Some((scheme, _)) => format!(
                            "expected an http:// or https:// URL, found the scheme {scheme:?}"
                        ),
                        None => "expected an http:// or https:// URL, found no scheme".to_owned(),
                    },
                ));
            }
            check_tls_files(route, url)?;
            if let Some(method) = &route.method
                && (method.is_empty() || !method.bytes().all(|b| b.is_ascii_alphabetic()))
            {
                return Err(bad(
                    &["method"],
                    format!("expected an HTTP method like \"POST\", found {method:?}"),
                ));
            }
        }
        HandlerKind::Exec => match &route.command {
            None => {
                return Err(bad(
                    &["command"],
                    "missing required key `command` for handler = \"exec\"",
                ));
            }
            Some(command) if command.first().is_none_or(|p| p.is_empty()) => {
                return Err(bad(
                    &["command"],
                    "expected a non-empty argv list like [\"/bin/send\", \"--stdin\"]",
                ));
            }
            // The process could never start: every record would end in the DLQ.
            Some(command) if command.iter().any(|arg| arg.contains('\0')) => {
                return Err(bad(
                    &["command"],
                    "expected arguments without NUL characters",
                ));
            }
            Some(_) => {}
        },
        HandlerKind::Noop => {
            if route.timeout.is_some() {
                return Err(bad(&["timeout"], "applies to http and exec routes only"));
            }
        }
    }
    Ok(())
}

/// A rate and its burst: a burst needs its rate and is at least 1.
fn check_rate(
    table: &[&str],
    rate_key: &str,
    rate: Option<worker_core::runtime::RateLimit>,
    burst_key: &str,
    burst: Option<u32>,
) -> Result<(), Invalid> {
    let path = |key: &str| {
        let mut path: Vec<&str> = table.to_vec();
        path.push(key);
        path.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>()
    };
    match (rate, burst) {
        (None, Some(_)) => Err((
            path(burst_key),
            format!("applies with `{rate_key}` only, and none is set"),
        )),
        (_, Some(0)) => Err((path(burst_key), "expected at least 1, found 0".to_owned())),
        (Some(rate), burst) => {
            let rate = match burst {
                Some(burst) => rate.burst(burst),
                None => rate,
            };
            rate.check(rate_key)
                .map_err(|err| (path(rate_key), err.message().to_owned()))
        }
        (None, None) => Ok(()),
    }
}

/// `ca-file`, `cert-file` and `key-file` of an http route to `url`: paths (read at start by the
/// binary), for an https:// URL only, the client certificate and its key together.
fn check_tls_files(route: &RouteSection, url: &str) -> Result<(), Invalid> {
    let files = [
        ("ca-file", &route.ca_file),
        ("cert-file", &route.cert_file),
        ("key-file", &route.key_file),
    ];
    for (key, path) in files {
        let Some(path) = path else { continue };
        if path.as_os_str().is_empty() {
            return Err(bad(&[key], "expected the path of a PEM file"));
        }
        if !url.starts_with("https://") {
            return Err(bad(
                &[key],
                "applies to https:// URLs only, this route's url is http://",
            ));
        }
    }
    match (&route.cert_file, &route.key_file) {
        (Some(_), None) => Err(bad(
            &["cert-file"],
            "expected `key-file` too: a client certificate needs its private key",
        )),
        (None, Some(_)) => Err(bad(
            &["key-file"],
            "expected `cert-file` too: a private key needs its client certificate",
        )),
        _ => Ok(()),
    }
}

/// An `env-pass` entry: a variable name the worker may hand on.
fn check_env_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.contains(['=', '\0']) {
        return Err(format!(
            "expected environment variable names (no `=`, no NUL), found {name:?}"
        ));
    }
    if name.starts_with(RECORD_ENV_PREFIX) {
        return Err(format!(
            "{name:?}: the {RECORD_ENV_PREFIX}* variables are the record's, set by the worker"
        ));
    }
    Ok(())
}

fn name(kind: HandlerKind) -> &'static str {
    match kind {
        HandlerKind::Http => "http",
        HandlerKind::Exec => "exec",
        HandlerKind::Noop => "noop",
    }
}
