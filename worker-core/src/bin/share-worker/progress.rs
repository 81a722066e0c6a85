//! A one-line progress bar on stderr, redrawn at most ten times a second; on a terminal only
//! (elsewhere one plain line every five seconds).

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Progress towards `total` items (unknown: `None`).
#[derive(Debug)]
pub(crate) struct Progress {
    what: &'static str,
    total: Option<u64>,
    started: Instant,
    drawn: Instant,
    terminal: bool,
}

impl Progress {
    pub(crate) fn new(what: &'static str, total: Option<u64>) -> Self {
        let now = Instant::now();
        Self {
            what,
            total,
            started: now,
            drawn: now,
            terminal: std::io::stderr().is_terminal(),
        }
    }

    /// `done` items are finished.
    pub(crate) fn update(&mut self, done: u64) {
        let every = if self.terminal {
            Duration::from_millis(100)
        } else {
            Duration::from_secs(5)
        };
        if self.drawn.elapsed() < every {
            return;
        }
        self.drawn = Instant::now();
        let line = self.line(done);
        let mut err = std::io::stderr().lock();
        let _ = if self.terminal {
            write!(err, "\r{line}\x1b[K")
        } else {
            writeln!(err, "{line}")
        };
        let _ = err.flush();
    }

    /// Clears the bar.
    pub(crate) fn finish(&self) {
        if self.terminal {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
        }
    }

    fn line(&self, done: u64) -> String {
        let secs = self.started.elapsed().as_secs_f64();
        let rate = if secs > 0.0 { done as f64 / secs } else { 0.0 };
        match self.total {
            Some(total) if total > 0 => {
                let width = 30u64;
                let filled = (done.min(total) * width / total) as usize;
                format!(
                    "[{}{}] {done}/{total} {} ({rate:.0}/s)",
                    "#".repeat(filled),
                    ".".repeat(width as usize - filled),
                    self.what
                )
            }
            _ => format!("{done} {} ({rate:.0}/s)", self.what),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bar_fills_with_the_count() {
        let progress = Progress::new("records", Some(10));
        let line = progress.line(5);
        assert!(
            line.starts_with("[###############...............] 5/10 records"),
            "{line}"
        );
        assert!(
            Progress::new("records", None)
                .line(3)
                .starts_with("3 records")
        );
    }
}
