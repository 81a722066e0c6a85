//! `share-worker run`: the configured routes over a Kafka share group until a signal or idle.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::time::Instant;
use worker_core::config::Config;
use worker_core::{ShutdownHandle, Worker};

use crate::activity::Activity;
use crate::handlers;
use crate::stats::Stats;
use crate::telemetry::{self, Telemetry};

pub(crate) async fn run(
    config: Config,
    exit_when_idle: Option<Duration>,
    stats_json: Option<PathBuf>,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let listener = match config.telemetry.listen {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .with_context(|| format!("telemetry.listen: cannot listen on {addr}"))?,
        ),
        None => None,
    };
    let source = config.source_builder().build().await.with_context(|| {
        format!(
            "joining share group {} at {}",
            config.worker.group, config.kafka.bootstrap
        )
    })?;
    let activity = Arc::new(Activity::new(config.backoff()));
    let mut builder = config.configure(Worker::builder(source.clone()));
    if let Some(sink) = config.dlq_sink()? {
        builder = builder.dlq(sink);
    }
    for route in &config.routes {
        builder = builder.route(
            route.topic.clone(),
            handlers::service(route, activity.clone())?,
        );
    }
    let worker = builder.build()?;
    let server = listener.map(|listener| {
        let telemetry = Telemetry {
            activity: activity.clone(),
            source,
            bootstrap: config.kafka.bootstrap.clone(),
            dlq_topics: config.dlq_topics(),
            shutdown: worker.shutdown_handle(),
        };
        tokio::spawn(telemetry::serve(listener, Arc::new(telemetry)))
    });
    let watcher = exit_when_idle
        .map(|idle| tokio::spawn(watch_idle(activity.clone(), idle, worker.shutdown_handle())));
    tracing::info!(group = %config.worker.group, topics = ?config.topics().collect::<Vec<_>>(), "worker started");
    let result = worker.run_until_signal().await;
    for task in [watcher, server].into_iter().flatten() {
        task.abort();
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
