//! `share-worker pause`, `resume` and `cancel`: fleet-wide commands on the group's control topic,
//! obeyed by every worker of the group that follows it (`[control]`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use crate::config::Config;
use crate::topics;

#[derive(Debug, Args)]
pub(crate) struct PauseArgs {
    /// The TOML configuration file.
    #[arg(long, short)]
    pub(crate) config: PathBuf,
    /// The route's topic.
    #[arg(long)]
    topic: String,
    /// End the pause by itself after this long (e.g. "10m"); without it, until `resume`.
    #[arg(long = "for", value_parser = crate::parse_duration)]
    for_: Option<Duration>,
    /// Why (shown in `status`, the dashboard and every worker's log).
    #[arg(long)]
    reason: String,
    /// Who asks (default `$USER@$HOSTNAME`).
    #[arg(long)]
    by: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct ResumeArgs {
    /// The TOML configuration file.
    #[arg(long, short)]
    pub(crate) config: PathBuf,
    /// The route's topic.
    #[arg(long)]
    topic: String,
    /// Why.
    #[arg(long, default_value = "")]
    reason: String,
    /// Who asks (default `$USER@$HOSTNAME`).
    #[arg(long)]
    by: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct CancelArgs {
    /// The TOML configuration file.
    #[arg(long, short)]
    pub(crate) config: PathBuf,
    /// The job's id (its `share.job-id` header; `produce` prints it).
    #[arg(long)]
    job_id: String,
    /// How long the cancellation stays in force (default 7 days): it must outlast the job's
    /// delay.
    #[arg(long = "for", value_parser = crate::parse_duration)]
    for_: Option<Duration>,
    /// Why (shown in every worker's log).
    #[arg(long, default_value = "")]
    reason: String,
    /// Who asks (default `$USER@$HOSTNAME`).
    #[arg(long)]
    by: Option<String>,
}

pub(crate) async fn pause(config: &Config, args: &PauseArgs) -> anyhow::Result<()> {
    let topic = writable(config, &args.topic).await?;
    let by = who(args.by.as_deref());
    let pause = match args.for_ {
        Some(duration) => {
            topic
                .pause_for(&args.topic, duration, &args.reason, &by)
                .await?
        }
        None => topic.pause(&args.topic, None, &args.reason, &by).await?,
    };
    println!(
        "{} paused for group {} ({}): control topic {}",
        args.topic,
        config.worker.group,
        pause.until_text(),
        topic.name()
    );
    Ok(())
}

pub(crate) async fn resume(config: &Config, args: &ResumeArgs) -> anyhow::Result<()> {
    let topic = writable(config, &args.topic).await?;
    topic
        .resume(&args.topic, &args.reason, &who(args.by.as_deref()))
        .await?;
    println!(
        "{} resumed for group {}: control topic {}",
        args.topic,
        config.worker.group,
        topic.name()
    );
    Ok(())
}

pub(crate) async fn cancel(config: &Config, args: &CancelArgs) -> anyhow::Result<()> {
    worker_core::checks::job_id(&args.job_id)
        .map_err(|why| anyhow::anyhow!("--job-id {:?}: {why}", args.job_id))?;
    let topic = existing(config).await?;
    let cancel = topic
        .cancel(
            &args.job_id,
            args.for_.unwrap_or(worker_core::defaults::CANCEL_TTL),
            &args.reason,
            &who(args.by.as_deref()),
        )
        .await?;
    println!(
        "job {} cancelled for group {} (until {}): control topic {}",
        args.job_id,
        config.worker.group,
        humantime::format_rfc3339_seconds(cancel.until),
        topic.name()
    );
    Ok(())
}

/// The control topic, once `route` is known to be a route of the file and the topic to exist:
/// a typo fails here instead of pausing nothing.
async fn writable(
    config: &Config,
    route: &str,
) -> anyhow::Result<worker_core::control::ControlTopic> {
    if !config.topics().any(|t| t == route) {
        anyhow::bail!(
            "{route} is not a route topic of this file (routes: {})",
            config.topics().collect::<Vec<_>>().join(", ")
        );
    }
    existing(config).await
}

/// The group's control topic, once it is known to exist.
async fn existing(config: &Config) -> anyhow::Result<worker_core::control::ControlTopic> {
    let topic = config.control_topic()?;
    let bootstrap = &config.kafka.bootstrap;
    let existing = topics::existing(bootstrap, &config.security()?)
        .await
        .with_context(|| format!("reading the topics of {bootstrap}"))?;
    anyhow::ensure!(
        existing.contains_key(topic.name()),
        "control topic {} does not exist on {bootstrap}: create it with `share-worker setup` and a [control] table",
        topic.name()
    );
    Ok(topic)
}

/// `$USER@$HOSTNAME`, or what is known of it.
fn who(by: Option<&str>) -> String {
    if let Some(by) = by {
        return by.to_owned();
    }
    let user = std::env::var("USER").unwrap_or_else(|_| "unknown".to_owned());
    match std::env::var("HOSTNAME") {
        Ok(host) if !host.is_empty() => format!("{user}@{host}"),
        _ => user,
    }
}
