//! `share-worker run`: the configured routes over a Kafka share group until a signal or idle.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use opentelemetry::metrics::Meter;
use tokio::net::TcpListener;
use tokio::time::Instant;
use worker_core::config::Config;
use worker_core::kafka::Admin;
use worker_core::security::Security;
use worker_core::telemetry::LagMonitor;
use worker_core::{ShutdownHandle, Worker};

use crate::activity::Activity;
use crate::handlers;
use crate::otel::Otel;
use crate::stats::Stats;
use crate::telemetry::TelemetryServer;

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
        .map(|route| Ok((route.topic.clone(), handlers::handler(route)?)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let telemetry = match config.telemetry.listen {
        Some(addr) => {
            let listener = TcpListener::bind(addr)
                .await
                .with_context(|| format!("telemetry.listen: cannot listen on {addr}"))?;
            Some(TelemetryServer::start(
                listener,
                otel.registry(),
                config.kafka.bootstrap.clone(),
                security.clone(),
                config.dlq_topics(),
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
    let _lag = match (&config.telemetry.listen, &config.telemetry.otlp_endpoint) {
        (None, None) => None,
        _ => lag_monitor(&config, &security, &meter).await,
    };
    let activity = Arc::new(Activity::new(config.backoff()));
    let mut builder = config
        .configure(Worker::builder(source.clone()))
        .meter(meter);
    if let Some(sink) = config.dlq_sink()? {
        builder = builder.dlq(sink);
    }
    for (topic, handler) in routes {
        builder = builder.route(topic, handler.into_service(activity.clone()));
    }
    let worker = builder.build()?;
    if let Some(telemetry) = &telemetry {
        telemetry.attach(worker.health(), source);
    }
    let watcher = exit_when_idle
        .map(|idle| tokio::spawn(watch_idle(activity.clone(), idle, worker.shutdown_handle())));
    tracing::info!(group = %config.worker.group, topics = ?config.topics().collect::<Vec<_>>(), "worker started");
    let result = worker.run_until_signal().await;
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

/// Shuts the worker down once no handler has run for `idle`.
async fn watch_idle(activity: Arc<Activity>, idle: Duration, shutdown: ShutdownHandle) {
    let tick = (idle / 4).clamp(Duration::from_millis(10), Duration::from_millis(250));
    loop {
        tokio::time::sleep(tick).await;
        if activity.idle_for().is_some_and(|for_| for_ >= idle) {
            tracing::info!(?idle, "idle: shutting down");
            shutdown.shutdown();
            return;
        }
    }
}
