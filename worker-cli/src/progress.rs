//! Progress of `produce` and `dlq replay`: an indicatif bar on a terminal (redrawn at most ten
//! times a second); elsewhere (CI, a pipe, a log file) one plain line every five seconds, which
//! a bar cannot be.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How often the plain line is written where there is no terminal.
const PLAIN_EVERY: Duration = Duration::from_secs(5);

/// Progress towards `total` items (unknown: `None`).
#[derive(Debug)]
pub(crate) struct Progress {
    what: &'static str,
    total: Option<u64>,
    started: Instant,
    /// On a terminal: the bar. Elsewhere: `None`, and plain lines.
    bar: Option<ProgressBar>,
    written: Instant,
}

impl Progress {
    pub(crate) fn new(what: &'static str, total: Option<u64>) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| bar(what, total));
        let now = Instant::now();
        Self {
            what,
            total,
            started: now,
            bar,
            written: now,
        }
    }

    /// `done` items are finished.
    pub(crate) fn update(&mut self, done: u64) {
        if let Some(bar) = &self.bar {
            bar.set_position(done);
            return;
        }
        if self.written.elapsed() >= PLAIN_EVERY {
            self.written = Instant::now();
            eprintln!("{}", self.line(done));
        }
    }

    /// Clears the bar.
    pub(crate) fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }

    /// The plain line: `5/10 records (123/s)`.
    fn line(&self, done: u64) -> String {
        let secs = self.started.elapsed().as_secs_f64();
        let rate = if secs > 0.0 { done as f64 / secs } else { 0.0 };
        match self.total {
            Some(total) if total > 0 => format!("{done}/{total} {} ({rate:.0}/s)", self.what),
            _ => format!("{done} {} ({rate:.0}/s)", self.what),
        }
    }
}

/// A bar to `total` (a spinner with a count when it is unknown) on stderr.
fn bar(what: &'static str, total: Option<u64>) -> ProgressBar {
    let (bar, template) = match total {
        Some(total) if total > 0 => (
            ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr_with_hz(10)),
            "[{bar:30}] {pos}/{len} {msg} ({per_sec}, {eta} left)",
        ),
        _ => (
            ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(10)),
            "{spinner} {pos} {msg} ({per_sec})",
        ),
    };
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("#>."));
    }
    bar.set_message(what);
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plain_line_counts_towards_the_total() {
        let progress = Progress {
            bar: None,
            ..Progress::new("records", Some(10))
        };
        assert!(
            progress.line(5).starts_with("5/10 records ("),
            "{}",
            progress.line(5)
        );
        let unknown = Progress::new("records", None);
        assert!(unknown.line(3).starts_with("3 records ("));
    }

    #[test]
    fn a_bar_tracks_its_position() {
        let known = bar("records", Some(10));
        known.set_position(4);
        assert_eq!((known.position(), known.length()), (4, Some(10)));
        assert!(bar("records", None).length().is_none());
    }
}
