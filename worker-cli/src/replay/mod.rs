//! `share-worker dlq replay`: dead letters back to their topics, each exactly once per marker.
//!
//! The dead-letter topic is read by offset ([`scan`]), never through a group, so letters that are
//! not replayed (another reason, over the limit, refused, a dry run) are left exactly as they were.
//! Each selected letter ([`select`]) is republished and then marked replayed in the topic itself
//! ([`republish`]); later runs see the marker and leave it alone.

pub(crate) mod markers;
mod original;
pub(crate) mod provenance;
mod republish;
pub(crate) mod scan;
mod select;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::config::Config;
use anyhow::Context;
use clap::Args;
use tokio::task::JoinSet;
use worker_core::dlq::headers::MarkerKind;

use crate::progress::Progress;
use republish::{ReplayError, Replayer};
use scan::DlqScan;
pub(crate) use scan::ScanPass;
pub(crate) use select::BrokerOffsets;
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
    /// Replay only dead letters with this reason (e.g. `handler_error`, `rejected`; letters a
    /// Kafka 4.4 broker wrote: `broker_rejected` or `broker_delivery_limit`).
    #[arg(long)]
    reason: Option<String>,
    /// Send the selected letters to this topic instead of their route topics. Either way only
    /// letters whose source (`share.dlq.topic`, a broker's `__dlq.errors.topic`) is a configured
    /// route topic are replayed.
    #[arg(long, value_name = "TOPIC")]
    to: Option<String>,
    /// Replay at most this many.
    #[arg(long)]
    limit: Option<u64>,
    /// Print what would be replayed; write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Replay a broker's letter without the record (Kafka 4.4 with
    /// `errors.deadletterqueue.copy.record.enable` off) by reading the record its headers point
    /// at. Only headers say where that is, and anyone who can write the dead-letter topic writes
    /// them: pass this only if nobody but the brokers may write it. Without it such letters are
    /// refused.
    #[arg(long)]
    follow_broker_offsets: bool,
    /// Deprecated and ignored: a replay reads the topic up to its end as of the start.
    #[arg(long, hide = true, value_parser = crate::parse_duration)]
    idle: Option<Duration>,
}

impl ReplayArgs {
    pub(crate) fn config(&self) -> &std::path::Path {
        &self.config
    }
}

/// What one run does with the letters it selects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// Republish each and mark it replayed.
    Replay,
    /// Say what would be replayed; write nothing.
    DryRun,
    /// Mark each skipped (handled, never to be replayed); refused letters too.
    Skip,
}

/// One run over a dead-letter topic, from the CLI or the dashboard: the same selection rules,
/// scan and writes for both.
#[derive(Clone, Debug)]
pub(crate) struct Request {
    /// The dead-letter topic.
    pub(crate) dlq: String,
    /// Only letters with this reason.
    pub(crate) reason: Option<String>,
    /// Every replay goes here instead of the topic the letter names.
    pub(crate) to: Option<String>,
    /// At most this many letters are acted on.
    pub(crate) limit: Option<u64>,
    /// Only these letters (partition → offsets); the scan reads only from the first of them.
    pub(crate) letters: Option<BTreeMap<i32, BTreeSet<i64>>>,
    /// Only letters written in this window (ms since the epoch; `since` included).
    pub(crate) since_ms: Option<i64>,
    pub(crate) until_ms: Option<i64>,
    pub(crate) action: Action,
}

/// What became of the letters of one run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    /// Replayed (or, in a dry run, selected for replay; with [`Action::Skip`], marked skipped).
    pub(crate) replayed: u64,
    pub(crate) other_reason: u64,
    /// Not among the letters or in the window asked for.
    pub(crate) unselected: u64,
    pub(crate) over_limit: u64,
    pub(crate) marked_skipped: u64,
    pub(crate) refused: u64,
    pub(crate) already_replayed: u64,
    pub(crate) failed: u64,
}

impl Tally {
    pub(crate) fn summary(&self, action: Action, topic: &str) -> String {
        let verb = match action {
            Action::Replay => "replayed",
            Action::DryRun => "would replay",
            Action::Skip => "marked skipped",
        };
        let unselected = if self.unselected > 0 {
            format!(", not selected {}", self.unselected)
        } else {
            String::new()
        };
        format!(
            "{verb} {}, skipped {} (other reason {}, over the limit {}, marked skipped {}{unselected}), refused {}, already replayed {}, failed {} from {topic}",
            self.replayed,
            self.other_reason + self.over_limit + self.marked_skipped + self.unselected,
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
    let request = Request {
        dlq: args.topic.clone(),
        reason: args.reason.clone(),
        to: args.to.clone(),
        limit: args.limit,
        letters: None,
        since_ms: None,
        until_ms: None,
        action: if args.dry_run {
            Action::DryRun
        } else {
            Action::Replay
        },
    };
    let broker_offsets = if args.follow_broker_offsets {
        BrokerOffsets::Followed
    } else {
        BrokerOffsets::Refused
    };
    let tally = execute_with(config, &request, broker_offsets, progress(), |line| {
        println!("{line}")
    })
    .await?;
    anyhow::ensure!(
        tally.failed == 0,
        "{} dead letters could not be replayed",
        tally.failed
    );
    Ok(())
}

/// Runs `request`: reads the topic (`progress` sees each pass), decides each letter, and
/// replays, skips or reports it; `note` gets one line per letter refused or (dry run) selected
/// and the summary line last. The tally is returned once every write is confirmed or failed; a
/// failed read is an error after the summary. A broker's letter without the record is refused
/// (see [`BrokerOffsets`]).
pub(crate) async fn execute(
    config: &Config,
    request: &Request,
    progress: impl FnMut(ScanPass, u64, u64) + Send + 'static,
    note: impl FnMut(String),
) -> anyhow::Result<Tally> {
    execute_with(config, request, BrokerOffsets::Refused, progress, note).await
}

/// [`execute`], with what becomes of a broker's letter without the record.
pub(crate) async fn execute_with(
    config: &Config,
    request: &Request,
    broker_offsets: BrokerOffsets,
    progress: impl FnMut(ScanPass, u64, u64) + Send + 'static,
    mut note: impl FnMut(String),
) -> anyhow::Result<Tally> {
    let bootstrap = config.kafka.bootstrap.clone();
    let security = config.security()?;
    let client_id = format!("{}-replay", config.kafka.client_id);
    let dlq = request.dlq.clone();
    let to = request.to.clone();
    let first: Option<BTreeMap<i32, i64>> = request.letters.as_ref().map(|letters| {
        letters
            .iter()
            .filter_map(|(p, offsets)| Some((*p, *offsets.first()?)))
            .collect()
    });
    let since_ms = request.since_ms;
    let scan = tokio::task::spawn_blocking({
        let (bootstrap, client_id, dlq) = (bootstrap.clone(), client_id.clone(), dlq.clone());
        let security = security.clone();
        move || -> anyhow::Result<DlqScan> {
            let mut scan = DlqScan::open(&bootstrap, &security, &client_id, &dlq)?;
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
            if let Some(first) = &first {
                scan.narrow(first);
            }
            if let Some(since) = since_ms {
                let from = scan.offsets_at(since)?;
                scan.narrow(&from);
            }
            Ok(scan)
        }
    })
    .await
    .context("the dead-letter reader failed")?
    .with_context(|| format!("opening {dlq}"))?;

    let routes: Vec<String> = config.topics().map(str::to_owned).collect();
    let selection = Selection {
        reason: request.reason.as_deref(),
        to: request.to.as_deref(),
        routes: &routes,
        group: &config.worker.group,
        letters: request.letters.as_ref(),
        since_ms: request.since_ms,
        until_ms: request.until_ms,
        broker_offsets,
    };
    let action = request.action;
    let replayer = match action {
        Action::DryRun => None,
        Action::Replay | Action::Skip => Some(Replayer::new(
            &bootstrap,
            &security,
            &client_id,
            &dlq,
            broker_offsets,
        )?),
    };
    let (mut letters, scanning) = scan.spawn_letters(QUEUED, progress);
    let limit = request.limit.unwrap_or(u64::MAX);
    let mut selected = 0u64;
    let mut tally = Tally::default();
    let mut in_flight = JoinSet::new();
    while let Some(letter) = letters.recv().await {
        let at = format!("{dlq}/{}@{}", letter.partition, letter.offset);
        let decision = selection.decide(&letter);
        let target = match (&decision, action) {
            (Decision::Done(MarkerKind::Replayed), _) => {
                tally.already_replayed += 1;
                continue;
            }
            (Decision::Done(_), _) => {
                tally.marked_skipped += 1;
                continue;
            }
            (Decision::OtherReason, _) => {
                tally.other_reason += 1;
                continue;
            }
            (Decision::Unselected, _) => {
                tally.unselected += 1;
                continue;
            }
            (Decision::Refused(_), Action::Skip) => None,
            (Decision::Refused(why), _) => {
                tally.refused += 1;
                note(format!("refused {at}: {why}"));
                continue;
            }
            (Decision::Replay { target }, _) => Some(target.clone()),
        };
        if selected >= limit {
            tally.over_limit += 1;
            continue;
        }
        selected += 1;
        let Some(replayer) = &replayer else {
            let target = target.unwrap_or_default();
            note(format!(
                "would replay {at} to {target} (reason {})",
                letter.provenance().reason_shown()
            ));
            tally.replayed += 1;
            continue;
        };
        while in_flight.len() >= IN_FLIGHT {
            if let Some(done) = in_flight.join_next().await {
                settle(&mut tally, done);
            }
        }
        let replayer = replayer.clone();
        in_flight.spawn(async move {
            match target {
                Some(target) if action == Action::Replay => replayer.replay(&letter, &target).await,
                _ => replayer
                    .mark(letter.partition, letter.offset, MarkerKind::Skipped)
                    .await
                    .map_err(ReplayError::Republish),
            }
        });
    }
    while let Some(done) = in_flight.join_next().await {
        settle(&mut tally, done);
    }
    let scanned = scanning.await.context("the dead-letter reader failed");
    note(tally.summary(action, &dlq));
    scanned?.with_context(|| format!("reading {dlq}"))?;
    Ok(tally)
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
            refused: 4,
            already_replayed: 5,
            ..Tally::default()
        };
        assert_eq!(
            tally.summary(Action::Replay, "sms.dlq"),
            "replayed 3, skipped 3 (other reason 2, over the limit 1, marked skipped 0), refused 4, already replayed 5, failed 0 from sms.dlq"
        );
        assert!(
            tally
                .summary(Action::DryRun, "sms.dlq")
                .starts_with("would replay 3, skipped 3")
        );
        let picked = Tally {
            replayed: 1,
            unselected: 9,
            ..Tally::default()
        };
        assert_eq!(
            picked.summary(Action::Skip, "sms.dlq"),
            "marked skipped 1, skipped 9 (other reason 0, over the limit 0, marked skipped 0, not selected 9), refused 0, already replayed 0, failed 0 from sms.dlq"
        );
    }
}
