//! `share-worker dlq replay`: dead letters back to their topics, each exactly once per marker.
//!
//! The dead-letter topic is read by offset ([`scan`]), never through a group, so letters that are
//! not replayed (another reason, over the limit, refused, a dry run) are left exactly as they were.
//! Each selected letter ([`select`]) is republished and then marked replayed in the topic itself
//! ([`republish`]); later runs see the marker and leave it alone.

mod republish;
mod scan;
mod select;

use std::time::Duration;

use anyhow::Context;
use clap::Args;
use tokio::task::JoinSet;
use worker_core::config::Config;
use worker_core::dlq::headers::{self, MarkerKind};

use crate::progress::Progress;
use republish::{ReplayError, Replayer};
use scan::{DlqScan, Letter, ScanPass};
use select::{Decision, Selection};

/// How many letters may wait between the reader and the replayer.
const QUEUED: usize = 64;
/// How many replays (republish + marker) may be in flight at once.
const IN_FLIGHT: usize = 32;

/// `dlq replay` options.
#[derive(Debug, Args)]
pub(crate) struct ReplayArgs {
    /// The TOML configuration file (for the brokers and the route topics).
    #[arg(long, short)]
    config: std::path::PathBuf,
    /// The dead-letter topic to replay.
    #[arg(long)]
    topic: String,
    /// Replay only dead letters with this reason (e.g. `handler_error`, `rejected`).
    #[arg(long)]
    reason: Option<String>,
    /// Send every selected letter to this topic. Without it, a letter goes to the topic its
    /// `share.dlq.topic` header names, which must be one of the configured routes' topics.
    #[arg(long, value_name = "TOPIC")]
    to: Option<String>,
    /// Replay at most this many.
    #[arg(long)]
    limit: Option<u64>,
    /// Print what would be replayed; write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Deprecated and ignored: a replay reads the topic up to its end as of the start.
    #[arg(long, hide = true, value_parser = crate::parse_duration)]
    idle: Option<Duration>,
}

impl ReplayArgs {
    pub(crate) fn config(&self) -> &std::path::Path {
        &self.config
    }
}

/// What became of the letters of one run.
#[derive(Debug, Default)]
struct Tally {
    /// Replayed (or, in a dry run, selected for replay).
    replayed: u64,
    other_reason: u64,
    over_limit: u64,
    marked_skipped: u64,
    refused: u64,
    already_replayed: u64,
    failed: u64,
}

impl Tally {
    fn summary(&self, dry_run: bool, topic: &str) -> String {
        let verb = if dry_run { "would replay" } else { "replayed" };
        format!(
            "{verb} {}, skipped {} (other reason {}, over the limit {}, marked skipped {}), refused {}, already replayed {}, failed {} from {topic}",
            self.replayed,
            self.other_reason + self.over_limit + self.marked_skipped,
            self.other_reason,
            self.over_limit,
            self.marked_skipped,
            self.refused,
            self.already_replayed,
            self.failed,
        )
    }
}

pub(crate) async fn replay(config: &Config, args: &ReplayArgs) -> anyhow::Result<()> {
    if args.idle.is_some() {
        tracing::warn!(
            "--idle is deprecated and ignored: a replay reads {} up to its end as of the start",
            args.topic
        );
    }
    let bootstrap = config.kafka.bootstrap.clone();
    let security = config.security()?;
    let client_id = format!("{}-replay", config.kafka.client_id);
    let dlq = args.topic.clone();
    let to = args.to.clone();
    let scan = tokio::task::spawn_blocking({
        let (bootstrap, client_id, dlq) = (bootstrap.clone(), client_id.clone(), dlq.clone());
        let security = security.clone();
        move || -> anyhow::Result<DlqScan> {
            let scan = DlqScan::open(&bootstrap, &security, &client_id, &dlq)?;
            if let Some(to) = &to {
                anyhow::ensure!(
                    *to != dlq,
                    "--to {to}: that is the dead-letter topic being replayed"
                );
                anyhow::ensure!(
                    scan.topic_exists(to)?,
                    "--to {to}: the topic does not exist"
                );
            }
            Ok(scan)
        }
    })
    .await
    .context("the dead-letter reader failed")?
    .with_context(|| format!("opening {dlq}"))?;

    let routes: Vec<String> = config.topics().map(str::to_owned).collect();
    let selection = Selection {
        reason: args.reason.as_deref(),
        to: args.to.as_deref(),
        routes: &routes,
    };
    let replayer = if args.dry_run {
        None
    } else {
        Some(Replayer::new(&bootstrap, &security, &client_id, &dlq)?)
    };
    let (mut letters, scanning) = scan.spawn_letters(QUEUED, progress());
    let limit = args.limit.unwrap_or(u64::MAX);
    let mut selected = 0u64;
    let mut tally = Tally::default();
    let mut in_flight = JoinSet::new();
    while let Some(letter) = letters.recv().await {
        let at = format!("{dlq}/{}@{}", letter.partition, letter.offset);
        match selection.decide(&letter) {
            Decision::Done(MarkerKind::Replayed) => tally.already_replayed += 1,
            Decision::Done(_) => tally.marked_skipped += 1,
            Decision::OtherReason => tally.other_reason += 1,
            Decision::Refused(why) => {
                tally.refused += 1;
                println!("refused {at}: {why}");
            }
            Decision::Replay { .. } if selected >= limit => tally.over_limit += 1,
            Decision::Replay { target } => {
                selected += 1;
                let Some(replayer) = &replayer else {
                    println!("would replay {at} to {target} (reason {})", reason(&letter));
                    tally.replayed += 1;
                    continue;
                };
                while in_flight.len() >= IN_FLIGHT {
                    if let Some(done) = in_flight.join_next().await {
                        settle(&mut tally, done);
                    }
                }
                let replayer = replayer.clone();
                in_flight.spawn(async move { replayer.replay(&letter, &target).await });
            }
        }
    }
    while let Some(done) = in_flight.join_next().await {
        settle(&mut tally, done);
    }
    let scanned = scanning.await.context("the dead-letter reader failed");
    println!("{}", tally.summary(args.dry_run, &dlq));
    scanned?.with_context(|| format!("reading {dlq}"))?;
    anyhow::ensure!(
        tally.failed == 0,
        "{} dead letters could not be replayed",
        tally.failed
    );
    Ok(())
}

/// Counts a finished replay task.
fn settle(tally: &mut Tally, done: Result<Result<(), ReplayError>, tokio::task::JoinError>) {
    match done {
        Ok(Ok(())) => tally.replayed += 1,
        Ok(Err(err)) => {
            tally.failed += 1;
            tracing::error!("{err}");
        }
        Err(err) => {
            tally.failed += 1;
            tracing::error!("a replay task failed: {err}");
        }
    }
}

/// The letter's reason, for people.
fn reason(letter: &Letter) -> String {
    letter
        .header_text(headers::REASON)
        .unwrap_or_else(|| "?".to_owned())
}

/// The progress bar of the two reading passes.
fn progress() -> impl FnMut(ScanPass, u64, u64) + Send + 'static {
    let mut current: Option<(ScanPass, Progress)> = None;
    move |pass, read, total| {
        if current.as_ref().is_none_or(|(p, _)| *p != pass) {
            if let Some((_, bar)) = &current {
                bar.finish();
            }
            let what = match pass {
                ScanPass::Markers => "dead-letter records read for markers",
                ScanPass::Letters => "dead-letter records read",
            };
            current = Some((pass, Progress::new(what, Some(total))));
        }
        if let Some((_, bar)) = &mut current {
            bar.update(read);
            if read >= total {
                bar.finish();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_names_every_count() {
        let tally = Tally {
            replayed: 3,
            other_reason: 2,
            over_limit: 1,
            marked_skipped: 0,
            refused: 4,
            already_replayed: 5,
            failed: 0,
        };
        assert_eq!(
            tally.summary(false, "sms.dlq"),
            "replayed 3, skipped 3 (other reason 2, over the limit 1, marked skipped 0), refused 4, already replayed 5, failed 0 from sms.dlq"
        );
        assert!(
            tally
                .summary(true, "sms.dlq")
                .starts_with("would replay 3, skipped 3")
        );
    }
}
