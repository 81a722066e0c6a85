//! How `run` tells the operator how it is going: one INFO status line every
//! `telemetry.report-every` (processed, accepted, retried, dead-lettered, in flight, held,
//! records/s, lag), or on a terminal a live status line (cut to the terminal's width) redrawn
//! every second in place of those lines. Per-record messages are DEBUG; warnings and errors
//! still print, above the live line.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};
use tracing_subscriber::fmt::MakeWriter;
use worker_core::runtime::{WorkerHealth, WorkerProgress};

use crate::activity::Activity;

/// How often the live line is redrawn with new counts.
const LIVE_EVERY: Duration = Duration::from_secs(1);

/// The live line while one is shown; log lines are written above it.
static LIVE: Mutex<Option<ProgressBar>> = Mutex::new(None);

/// The group's lag, as the last sample says (`None` while unknown).
pub(crate) type LagProbe = Box<dyn Fn() -> Option<i64> + Send + Sync>;

/// One status line's numbers.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Status {
    pub(crate) processed: u64,
    pub(crate) progress: WorkerProgress,
    /// Handler calls per second since the previous line.
    pub(crate) rate: f64,
    pub(crate) lag: Option<i64>,
}

impl Status {
    pub(crate) fn line(&self) -> String {
        let s = &self.progress.summary;
        let lag = self
            .lag
            .map_or_else(|| "?".to_owned(), |lag| lag.to_string());
        format!(
            "processed {}, accepted {}, retried {}, dead-lettered {}, in flight {}, held {}, {:.0} records/s, lag {lag}",
            self.processed,
            s.accepted,
            s.retried,
            s.dead_letters.total(),
            self.progress.in_flight,
            self.progress.held,
            self.rate,
        )
    }
}

/// The running reporter; [`finish`](Self::finish) it before the final summary.
#[derive(Debug)]
pub(crate) struct Reporter {
    task: JoinHandle<()>,
}

impl Reporter {
    /// Reports every `every` (live every second when `live`) until finished.
    pub(crate) fn start(
        every: Duration,
        live: bool,
        activity: Arc<Activity>,
        health: WorkerHealth,
        lag: LagProbe,
    ) -> Self {
        let bar = live.then(live_bar);
        if let Some(bar) = &bar {
            *LIVE.lock().unwrap_or_else(PoisonError::into_inner) = Some(bar.clone());
        }
        let tick = if live { LIVE_EVERY } else { every };
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval_at(Instant::now() + tick, tick);
            ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
            let mut last = (Instant::now(), 0u64);
            loop {
                ticks.tick().await;
                let processed = activity.calls.load(std::sync::atomic::Ordering::Relaxed);
                let now = Instant::now();
                let secs = now.duration_since(last.0).as_secs_f64();
                let status = Status {
                    processed,
                    progress: health.progress(),
                    rate: if secs > 0.0 {
                        processed.saturating_sub(last.1) as f64 / secs
                    } else {
                        0.0
                    },
                    lag: lag(),
                };
                last = (now, processed);
                match &bar {
                    Some(bar) => bar.set_message(status.line()),
                    None => tracing::info!("status: {}", status.line()),
                }
            }
        });
        Self { task }
    }

    /// Stops reporting and clears the live line.
    pub(crate) fn finish(self) {
        self.task.abort();
        if let Some(bar) = LIVE.lock().unwrap_or_else(PoisonError::into_inner).take() {
            bar.finish_and_clear();
        }
    }
}

/// Whether `run` shows a live line: stderr is a terminal and the logs are for people.
pub(crate) fn live_wanted(pretty_logs: bool) -> bool {
    pretty_logs && std::io::stderr().is_terminal()
}

fn live_bar() -> ProgressBar {
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(4));
    if let Ok(style) = ProgressStyle::with_template("{spinner} {elapsed} {wide_msg}") {
        bar.set_style(style);
    }
    bar.set_message("starting");
    bar.enable_steady_tick(Duration::from_millis(250));
    bar
}

/// The log writer of `run`: stderr, with the live line (if any) lifted while a line is written.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LogWriter;

impl<'a> MakeWriter<'a> for LogWriter {
    type Writer = LogWriter;

    fn make_writer(&'a self) -> Self::Writer {
        LogWriter
    }
}

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let live = LIVE.lock().unwrap_or_else(PoisonError::into_inner).clone();
        match live {
            Some(bar) => bar.suspend(|| std::io::stderr().write(buf)),
            None => std::io::stderr().write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

#[cfg(test)]
mod tests {
    use worker_core::Summary;

    use super::*;

    #[test]
    fn the_status_line_names_every_count() {
        let mut summary = Summary::default();
        summary.accepted = 90;
        summary.retried = 7;
        let mut progress = WorkerProgress::default();
        progress.summary = summary;
        progress.in_flight = 12;
        progress.held = 3;
        let status = Status {
            processed: 97,
            progress,
            rate: 48.6,
            lag: Some(1500),
        };
        assert_eq!(
            status.line(),
            "processed 97, accepted 90, retried 7, dead-lettered 0, in flight 12, held 3, 49 records/s, lag 1500"
        );
        let unknown = Status {
            lag: None,
            ..status
        };
        assert!(unknown.line().ends_with("lag ?"), "{}", unknown.line());
    }
}
