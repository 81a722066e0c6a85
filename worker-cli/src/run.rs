//! `share-worker run`: the configured routes over a Kafka share group until a signal or idle.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::config::{Config, LogFormat, OnUnreadable};
use anyhow::Context;
use opentelemetry::metrics::Meter;
use tokio::net::TcpListener;
use tokio::time::Instant;
use worker_core::control::{Controls, FleetPresence};
use worker_core::defaults;
use worker_core::fleet::Fleet;
use worker_core::kafka::Admin;
use worker_core::runtime::WorkerHealth;
use worker_core::security::Security;
use worker_core::telemetry::LagMonitor;
use worker_core::{ShutdownHandle, Worker};

use crate::activity::Activity;
use crate::handlers::{self, RouteServices};
use crate::otel::Otel;
use crate::report::{self, Reporter};
use crate::stats::Stats;
use crate::telemetry::{Serving, TelemetryServer};
use crate::ui::{self, Dashboard, WorkerView};

pub(crate) async fn run(
    config: Config,
    exit_when_idle: Option<Duration>,
    stats_json: Option<PathBuf>,
    otel: &Otel,
) -> anyhow::Result<()> {
    let started = Instant::now();
    // One setting for every connection: clones share the OAUTHBEARER token cache.
    let security = config.security()?;
    // Before joining the group: a route that cannot start (a bad TLS file, say) holds no record.
    let routes = config
        .routes
        .iter()
        .map(|route| Ok((route, handlers::handler(route)?)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let telemetry = match config.telemetry.listen {
        Some(addr) => {
            let serving = Serving::telemetry(&config)?;
            let listener = TcpListener::bind(addr)
                .await
                .with_context(|| format!("telemetry.listen: cannot listen on {addr}"))?;
            let pages = if config.telemetry.ui {
                let health = Arc::new(OnceLock::new());
                let view = WorkerView {
                    registry: otel.registry(),
                    health: health.clone(),
                };
                let bound = listener.local_addr().unwrap_or(addr);
                let topics = ui::dlq_topics(&config, &security).await;
                let dashboard = Dashboard::start(
                    Arc::new(config.clone()),
                    Some(view),
                    bound,
                    serving.https,
                    topics,
                )?;
                tracing::info!("dashboard on {}://{bound}/ui", serving.scheme());
                Some((ui::router(dashboard), health))
            } else {
                None
            };
            Some(TelemetryServer::start(
                listener,
                serving,
                otel.registry(),
                config.kafka.bootstrap.clone(),
                security.clone(),
                config.dlq_topics(),
                pages,
            ))
        }
        None => None,
    };
    let source = config
        .source_builder()?
        .security(security.clone())
        .build()
        .await
        .with_context(|| {
            format!(
                "joining share group {} at {}",
                config.worker.group, config.kafka.bootstrap
            )
        })?;
    let meter = otel.meter();
    let assigned = source.clone();
    let _assigned_gauge = meter
        .u64_observable_gauge("share_worker.partitions.assigned")
        .with_description("Partitions assigned to this member.")
        .with_callback(move |observer| {
            observer.observe(assigned.assignment().len() as u64, &[]);
        })
        .build();
    // The lag gauge, and the lag of the status line.
    let lag = lag_monitor(&config, &security, &meter).await.map(Arc::new);
    let activity = Arc::new(Activity::new(config.backoff()));
    let mut builder = config
        .configure(Worker::builder(source.clone()))
        .meter(meter);
    if let Some(sink) = config.dlq_sink()? {
        builder = builder.dlq(sink);
    }
    if config.delay.is_some() {
        builder = builder.delay(config.job_producer()?);
    } else {
        warn_per_key_without_delay(&config);
    }
    let (controls, presence) = follow_controls(&config).await?;
    if let Some(controls) = controls {
        if let Some(telemetry) = &telemetry {
            telemetry.attach_controls(controls.clone());
        }
        builder = builder.controls(controls);
    }
    let presence = match presence {
        Some((fleet, presence)) => {
            builder = builder.fleet(fleet);
            Some(presence)
        }
        None => {
            if let Some(fleet) = rate_fleet(&config, &security).await? {
                builder = builder.fleet(fleet);
            }
            None
        }
    };
    if let Some(cron) = config.cron_scheduler()? {
        builder = builder.cron(cron);
    }
    for (section, handler) in routes {
        let route = match (handler.into_services(activity.clone()), &section.batch) {
            (RouteServices::Batch(service), Some(batch)) => {
                config.batched_route(section, batch, service)
            }
            (RouteServices::Single(service), _) => config.route(section, service),
            (RouteServices::Batch(_), None) => {
                anyhow::bail!("route {}: a batch handler without `batch`", section.topic)
            }
        };
        builder = builder.add_route(route);
    }
    let worker = builder.build()?;
    if let Some(telemetry) = &telemetry {
        telemetry.attach(worker.health(), source);
    }
    let watcher = exit_when_idle.map(|idle| {
        tokio::spawn(watch_idle(
            activity.clone(),
            idle,
            worker.health(),
            worker.shutdown_handle(),
        ))
    });
    tracing::info!(group = %config.worker.group, topics = ?config.topics().collect::<Vec<_>>(), "worker started");
    let reporter = Reporter::start(
        config.telemetry.report_every,
        report::live_wanted(config.telemetry.log_format == LogFormat::Pretty),
        activity.clone(),
        worker.health(),
        lag_probe(lag.clone()),
    );
    let result = worker.run_until_signal().await;
    if let Some(presence) = presence {
        presence.leave().await;
    }
    reporter.finish();
    if let Some(watcher) = watcher {
        watcher.abort();
    }
    if let Some(telemetry) = telemetry {
        telemetry.stop().await;
    }
    let summary = result.context("the worker stopped with an error")?;
    let stats = Stats::new(&summary, &activity, started.elapsed());
    eprintln!("{}", stats.line());
    if let Some(path) = stats_json {
        std::fs::write(&path, stats.to_json())
            .with_context(|| format!("writing the statistics to {}", path.display()))?;
    }
    Ok(())
}

/// A worker's share of the fleet's rates through the control topic.
type Presence = (Fleet, FleetPresence);

/// The group's total lag on the route topics as last sampled (`None` until a sample has lag).
fn lag_probe(lag: Option<Arc<LagMonitor>>) -> report::LagProbe {
    Box::new(move || {
        let offsets = lag.as_ref()?.latest();
        let known: Vec<i64> = offsets.iter().map(|p| p.lag).filter(|l| *l >= 0).collect();
        (!known.is_empty()).then(|| known.iter().sum())
    })
}

/// The rates this worker takes a share of: the topics of the routes with a rate (or a per-key
/// rate), and `*` for the worker-wide rate.
fn shared_rates(config: &Config) -> Vec<String> {
    let mut rates: Vec<String> = config
        .routes
        .iter()
        .filter(|r| r.rate.is_some() || r.rate_per_key.is_some())
        .map(|r| r.topic.clone())
        .collect();
    if config.worker.rate.is_some() {
        rates.push("*".to_owned());
    }
    rates
}

/// A per-key rate keeps a hot key from taking the other keys' slots only by moving its extra
/// records to a delay topic: without `[delay]`, say so once per such route.
fn warn_per_key_without_delay(config: &Config) {
    for route in config.routes.iter().filter(|r| r.rate_per_key.is_some()) {
        tracing::warn!(
            route = %route.topic,
            "rate-per-key without a [delay] table: records of a key over its rate wait in the worker's slots, so keys that share a partition share its fetches and may run below their rate; add [delay] (docs/jobs.md)"
        );
    }
}

/// Without `[control]`, the fleet the rates are shared with, from the group's described
/// membership, when the file sets a rate: `rate` is the group's total.
async fn rate_fleet(config: &Config, security: &Security) -> anyhow::Result<Option<Fleet>> {
    if shared_rates(config).is_empty() {
        return Ok(None);
    }
    tracing::warn!(
        "the rates are shared from the group's described membership: approximate while workers join or die; with a [control] section they hold exactly (docs/control.md)"
    );
    let admin = Admin::connect_with(config.kafka.bootstrap.clone(), security)
        .await
        .with_context(|| {
            format!(
                "connecting to {} to share the rates",
                config.kafka.bootstrap
            )
        })?;
    Ok(Some(
        Fleet::follow(admin, config.worker.group.clone(), defaults::FLEET_REFRESH).await?,
    ))
}

/// Samples the group's lag on the route topics for the lag gauge; `None` (with a warning) when the
/// cluster cannot be reached for it.
async fn lag_monitor(config: &Config, security: &Security, meter: &Meter) -> Option<LagMonitor> {
    match Admin::connect_with(config.kafka.bootstrap.clone(), security).await {
        Ok(admin) => Some(LagMonitor::start(
            admin,
            config.worker.group.clone(),
            config.topics().map(str::to_owned).collect(),
            config.telemetry.lag_interval,
            meter,
        )),
        Err(err) => {
            tracing::warn!(error = %err, "cannot sample the share group's lag: no lag gauge");
            None
        }
    }
}

/// Shuts the worker down once no handler has run for `idle` since it began taking work (its
/// start-up reads of the group's configs are not idleness).
async fn watch_idle(
    activity: Arc<Activity>,
    idle: Duration,
    health: WorkerHealth,
    shutdown: ShutdownHandle,
) {
    let tick = (idle / 4).clamp(Duration::from_millis(10), Duration::from_millis(250));
    while health.since_last_pass().is_none() {
        tokio::time::sleep(tick).await;
    }
    activity.began();
    loop {
        tokio::time::sleep(tick).await;
        if activity.idle_for().is_some_and(|for_| for_ >= idle) {
            tracing::info!(?idle, "idle: shutting down");
            shutdown.shutdown();
            return;
        }
    }
}

/// The group's controls, with `[control]`: read to the end before the worker starts, so that a
/// route paused fleet-wide is not fetched even once. A control topic that cannot be read stops
/// the start (`control.on-unreadable = "refuse"`) or is said and left out.
/// With a rate to share, the worker also takes part in the fleet's presence on the topic: the
/// fleet its rates follow, and its presence, to leave when it is done.
async fn follow_controls(config: &Config) -> anyhow::Result<(Option<Controls>, Option<Presence>)> {
    let Some(section) = &config.control else {
        return Ok((None, None));
    };
    let topic = config.control_topic()?;
    if !shared_rates(config).is_empty() {
        // Exact rates need the topic: a worker that cannot read it does not start.
        let (controls, fleet, presence) = topic
            .follow_fleet(section.read_timeout)
            .await
            .map_err(anyhow::Error::new)
            .context("the rates are shared through the control topic: not starting without it")?;
        return Ok((Some(controls), Some((fleet, presence))));
    }
    match topic.follow(section.read_timeout).await {
        Ok(controls) => Ok((Some(controls), None)),
        Err(err) if section.on_unreadable == OnUnreadable::Refuse => Err(anyhow::Error::new(err)
            .context(
                "control.on-unreadable = \"refuse\": not starting without the group's controls",
            )),
        Err(err) => {
            tracing::warn!(error = %err, "starting without the group's controls (control.on-unreadable = \"start-without\"): pauses are not obeyed");
            Ok((None, None))
        }
    }
}
