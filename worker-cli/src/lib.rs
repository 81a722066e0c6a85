//! `share-worker`: a Kafka share-group worker configured by a TOML file, as a library the
//! binary (`src/main.rs`) calls: [`main`] runs the command line, [`config`] is the TOML model,
//! and [`dashboard`] mounts the operator's dashboard (with dead-letter replay) in an axum
//! application of your own.
//!
//! `run` processes records with http, exec or noop handlers; `setup` creates topics and sets the
//! group's configs; `check` validates a file against the cluster; `status` describes the group and
//! its lag; `produce` enqueues test jobs; `dlq replay` republishes dead letters; `ui` serves the
//! web dashboard.

// Header names that are not UTF-8 are read under `catch_unwind` (replay/scan.rs), and handler
// panics are retried: with `panic = "abort"` one hostile record would end the process.
#[cfg(panic = "abort")]
compile_error!("share-worker needs panic = \"unwind\": it catches panics on untrusted input");

mod activity;
mod check;
pub mod config;
mod control;
mod handlers;
mod librdkafka;
mod otel;
mod produce;
mod progress;
mod replay;
mod report;
mod run;
mod scaler;
mod setup;
mod stats;
mod status;
mod telemetry;
mod tls;
mod topics;
mod ui;

pub use ui::dashboard;

/// docs/dashboard.md's example, compiled as a doc test so that it cannot drift.
#[cfg(doctest)]
#[doc = include_str!("../../docs/dashboard.md")]
struct DashboardGuide;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::config::{Config, LogFormat};
use clap::{Args, Parser, Subcommand};

/// A Kafka share-group (KIP-932) worker configured by a TOML file.
#[derive(Debug, Parser)]
#[command(name = "share-worker", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Process records until ctrl-c / SIGTERM (or until idle).
    Run(RunArgs),
    /// Create missing route and dead-letter topics; set the group's offset reset and lock duration.
    Setup(SetupArgs),
    /// Validate the file, connect, check share-group support and the topics; print the config.
    Check(ConfigArg),
    /// The group's state, members and assignments, and start offset and lag per route partition.
    Status(status::StatusArgs),
    /// Enqueue jobs: generated ones or one per line of a file.
    Produce(produce::ProduceArgs),
    /// The web dashboard: the group, its lag, and the dead letters (replay and skip with
    /// `ui.allow-actions`), on `ui.listen` until ctrl-c / SIGTERM.
    Ui(ConfigArg),
    /// Dead-letter topic tools.
    #[command(subcommand)]
    Dlq(DlqCommand),
    /// Pause a route fleet-wide: no worker of the group fetches its records until `resume` (or
    /// `--for` ends); running handlers finish.
    Pause(control::PauseArgs),
    /// Resume a route paused fleet-wide.
    Resume(control::ResumeArgs),
    /// Cancel a job fleet-wide by its id (`share.job-id`): no worker of the group runs it (it is
    /// acknowledged without running), and a running one has its cancellation token fired.
    Cancel(control::CancelArgs),
    /// KEDA's external scaler (gRPC) for the file's cluster: the backlog of the share group and
    /// topics each scaled object names, so KEDA scales workers on it, from zero.
    Scaler(scaler::ScalerArgs),
}

#[derive(Debug, Subcommand)]
enum DlqCommand {
    /// Republish dead letters to their route topics (or `--to`), each once: read by offset,
    /// marked replayed in the dead-letter topic; letters not replayed are left untouched.
    Replay(replay::ReplayArgs),
}

#[derive(Debug, Args)]
struct ConfigArg {
    /// The TOML configuration file.
    #[arg(long, short)]
    config: PathBuf,
}

#[derive(Debug, Args)]
struct RunArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Shut down gracefully once nothing was handled and nothing ran for this long (e.g. "5s").
    #[arg(long, value_parser = parse_duration)]
    exit_when_idle: Option<Duration>,
    /// Write the run's statistics as JSON to this file on exit.
    #[arg(long)]
    stats_json: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct SetupArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Partitions of each topic created.
    #[arg(long, default_value_t = 3)]
    partitions: i32,
    /// Replication factor of each topic created.
    #[arg(long, default_value_t = 1)]
    replication_factor: i16,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|err| format!("expected a duration like \"5s\": {err}"))
}

/// Runs the `share-worker` command line: parses the arguments, runs the command, and says how it
/// ended.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("share-worker: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        Command::Run(args) => run_command(&runtime, args),
        Command::Setup(args) => runtime.block_on(async {
            let config = load(&args.config.config)?;
            setup::setup(&config, args.partitions, args.replication_factor).await
        }),
        Command::Check(args) => runtime.block_on(async {
            let config = load(&args.config)?;
            check::check(&config).await
        }),
        Command::Status(args) => runtime.block_on(async {
            let config = load(&args.config.config)?;
            status::status(&config, &args).await
        }),
        Command::Ui(args) => runtime.block_on(async {
            let config = load(&args.config)?;
            ui::serve_standalone(config).await
        }),
        Command::Dlq(DlqCommand::Replay(args)) => runtime.block_on(async {
            let config = load(args.config())?;
            replay::replay(&config, &args).await
        }),
        Command::Pause(args) => runtime.block_on(async {
            let config = load(&args.config)?;
            control::pause(&config, &args).await
        }),
        Command::Resume(args) => runtime.block_on(async {
            let config = load(&args.config)?;
            control::resume(&config, &args).await
        }),
        Command::Cancel(args) => runtime.block_on(async {
            let config = load(&args.config)?;
            control::cancel(&config, &args).await
        }),
        Command::Scaler(args) => runtime.block_on(async {
            let config = load(&args.config.config)?;
            scaler::scaler(&config, &args).await
        }),
        Command::Produce(args) => {
            init_logs(LogFormat::Pretty);
            runtime.block_on(produce::produce(args))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("share-worker: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// `run`: its telemetry is set up and flushed outside the async runtime (the OTLP exporters use
/// blocking HTTP clients on their own threads).
fn run_command(runtime: &tokio::runtime::Runtime, args: RunArgs) -> anyhow::Result<()> {
    let config = Config::load(&args.config.config)?;
    let otel = otel::Otel::install(&config.telemetry)?;
    let result = runtime.block_on(run::run(
        config,
        args.exit_when_idle,
        args.stats_json,
        &otel,
    ));
    otel.shutdown();
    result
}

/// Loads and validates the file, then starts logging as it says.
/// Resolves at ctrl-c or SIGTERM (what Kubernetes sends).
pub(crate) async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

fn load(path: &std::path::Path) -> anyhow::Result<Config> {
    let config = Config::load(path)?;
    init_logs(config.telemetry.log_format);
    Ok(config)
}

fn init_logs(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        _ => builder.try_init(),
    };
}
