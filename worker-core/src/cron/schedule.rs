//! [`Schedule`]: when a periodic job's ticks fall, and [`due`]: which tick to fire now.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds};

use crate::{Error, ErrorKind, Result};

/// The shortest interval: a firing is a transaction on the cluster, not a timer.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// When a periodic job's ticks fall: every fixed interval (ticks on its multiples since the Unix
/// epoch, so every worker agrees on them), or a cron expression in a time zone (5 fields, or 6
/// with seconds first).
#[derive(Clone)]
pub enum Schedule {
    /// Every `interval`.
    Every(Duration),
    /// A cron expression, evaluated in `zone`.
    Cron {
        /// The expression as written.
        expression: String,
        /// Parsed.
        cron: Box<Cron>,
        /// The IANA time zone it is evaluated in.
        zone: Tz,
    },
}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Schedule::Every(interval) => {
                write!(f, "every {}", humantime::format_duration(*interval))
            }
            Schedule::Cron {
                expression, zone, ..
            } => write!(f, "{expression:?} in {zone}"),
        }
    }
}

impl PartialEq for Schedule {
    fn eq(&self, other: &Self) -> bool {
        format!("{self:?}") == format!("{other:?}")
    }
}

impl Schedule {
    /// Every `interval` (at least [`MIN_INTERVAL`], in whole milliseconds).
    pub fn every(interval: Duration) -> Result<Self> {
        if interval < MIN_INTERVAL {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "`every`: expected at least {}, found {}",
                    humantime::format_duration(MIN_INTERVAL),
                    humantime::format_duration(interval)
                ),
            ));
        }
        Ok(Schedule::Every(Duration::from_millis(
            interval.as_millis() as u64
        )))
    }

    /// A cron expression (`"0 9 * * 1-5"`, or with seconds first `"*/10 * * * * *"`) evaluated
    /// in the IANA time zone `zone` (`"UTC"`, `"Europe/Berlin"`).
    pub fn cron(expression: &str, zone: &str) -> Result<Self> {
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .build()
            .parse(expression)
            .map_err(|err| {
                Error::new(
                    ErrorKind::Config,
                    format!("`schedule`: {expression:?} is not a cron expression: {err}"),
                )
            })?;
        let zone = Tz::from_str(zone).map_err(|_| {
            Error::new(
                ErrorKind::Config,
                format!("`timezone`: {zone:?} is not an IANA time zone (like \"Europe/Berlin\")"),
            )
        })?;
        let from = zone.from_utc_datetime(&Utc::now().naive_utc());
        if cron.find_next_occurrence(&from, false).is_err() {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "`schedule`: {expression:?} never matches a time (like the 30th of February)"
                ),
            ));
        }
        Ok(Schedule::Cron {
            expression: expression.to_owned(),
            cron: Box::new(cron),
            zone,
        })
    }

    /// The latest tick at or before `now`, in milliseconds since the epoch.
    pub fn latest(&self, now: SystemTime) -> Option<i64> {
        let now = millis(now);
        match self {
            Schedule::Every(interval) => {
                let step = interval.as_millis() as i64;
                Some(now - now.rem_euclid(step))
            }
            Schedule::Cron { cron, zone, .. } => {
                let at = zone.from_utc_datetime(&utc(now)?.naive_utc());
                let tick = cron.find_previous_occurrence(&at, true).ok()?;
                Some(tick.timestamp_millis())
            }
        }
    }

    /// The first tick after `tick`, in milliseconds since the epoch (`None` past the end of
    /// time: a tick read from the cron topic may be anything).
    pub fn next_after(&self, tick: i64) -> Option<i64> {
        match self {
            Schedule::Every(interval) => {
                let step = interval.as_millis() as i64;
                tick.checked_sub(tick.rem_euclid(step))?.checked_add(step)
            }
            Schedule::Cron { cron, zone, .. } => {
                let at = zone.from_utc_datetime(&utc(tick)?.naive_utc());
                let next = cron.find_next_occurrence(&at, false).ok()?;
                Some(next.timestamp_millis())
            }
        }
    }

    /// Whether a mark of `tick` read at `reference` (the broker's time, in ms) comes from the
    /// future: later than the first tick after `reference`. A firer whose clock runs a little ahead
    /// may write the next tick early; a mark further ahead (forged, or from a clock far off) would
    /// keep the schedule from firing until then.
    pub fn is_ahead(&self, tick: i64, reference: i64) -> bool {
        self.next_after(reference).is_none_or(|next| tick > next)
    }

    /// Whether this schedule, last fired at `last`, has missed
    /// two ticks by `now`: the tick after the next one is due and the next one was never fired.
    pub fn is_overdue(&self, last: i64, now: SystemTime) -> bool {
        self.next_after(last)
            .and_then(|next| self.next_after(next))
            .is_some_and(|second| millis(now) >= second)
    }
}

/// What to do with ticks that passed while no worker fired them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CatchUp {
    /// Fire the latest missed tick once (the default): a nightly report still runs after an
    /// outage, once.
    #[default]
    Once,
    /// Fire a tick only when it is the one right after the last fired: ticks missed while no
    /// worker ran are skipped, and the schedule goes on from the next one.
    Skip,
}

/// The tick to fire now, if any: the latest tick at or before `now` when it was not fired yet
/// (`last`), following `catch_up`. A schedule never fired fires no tick older than `since` (when
/// its first worker started): a new schedule has missed nothing.
pub fn due(
    schedule: &Schedule,
    catch_up: CatchUp,
    last: Option<i64>,
    since: SystemTime,
    now: SystemTime,
) -> Option<i64> {
    let latest = schedule.latest(now)?;
    match last {
        Some(last) if latest <= last => None,
        Some(last) => match catch_up {
            CatchUp::Once => Some(latest),
            CatchUp::Skip => (schedule.next_after(last) == Some(latest)).then_some(latest),
        },
        None => (latest >= millis(since)).then_some(latest),
    }
}

/// `at` in milliseconds since the epoch.
pub fn millis(at: SystemTime) -> i64 {
    match at.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_millis()).unwrap_or(i64::MAX),
        Err(before) => -i64::try_from(before.duration().as_millis()).unwrap_or(i64::MAX),
    }
}

fn utc(millis: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_millis(millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(millis: i64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(millis as u64)
    }

    #[test]
    fn intervals_tick_on_their_multiples() {
        let every = Schedule::every(Duration::from_secs(10)).unwrap();
        assert_eq!(every.latest(at(1_700_000_004_321)), Some(1_700_000_000_000));
        assert_eq!(every.latest(at(1_700_000_010_000)), Some(1_700_000_010_000));
        assert_eq!(every.next_after(1_700_000_000_000), Some(1_700_000_010_000));
        assert_eq!(every.next_after(1_700_000_003_000), Some(1_700_000_010_000));
        assert!(Schedule::every(Duration::from_millis(999)).is_err());
        assert_eq!(
            every.next_after(i64::MAX),
            None,
            "a hostile mark: no overflow"
        );
    }

    #[test]
    fn cron_expressions_tick_in_their_zone() {
        // 09:00 on weekdays in Berlin (UTC+1 in November): 08:00 UTC.
        let nine = Schedule::cron("0 9 * * 1-5", "Europe/Berlin").unwrap();
        let friday_noon_utc = 1_700_222_400_000; // 2023-11-17 12:00 UTC, a Friday
        let friday_nine_berlin = 1_700_208_000_000; // 2023-11-17 08:00 UTC
        assert_eq!(nine.latest(at(friday_noon_utc)), Some(friday_nine_berlin));
        let monday_nine_berlin = friday_nine_berlin + 3 * 86_400_000;
        assert_eq!(
            nine.next_after(friday_nine_berlin),
            Some(monday_nine_berlin)
        );
        let seconds = Schedule::cron("*/10 * * * * *", "UTC").unwrap();
        assert_eq!(
            seconds.latest(at(1_700_000_004_321)),
            Some(1_700_000_000_000)
        );
        let bad = Schedule::cron("every day", "UTC").unwrap_err().to_string();
        assert!(
            bad.contains("`schedule`: \"every day\" is not a cron expression"),
            "{bad}"
        );
        let zone = Schedule::cron("0 9 * * *", "Mars/Olympus")
            .unwrap_err()
            .to_string();
        assert!(zone.contains("`timezone`: \"Mars/Olympus\""), "{zone}");
    }

    #[test]
    fn a_mark_more_than_a_tick_ahead_is_from_the_future_and_two_missed_ticks_are_overdue() {
        let every = Schedule::every(Duration::from_secs(10)).unwrap();
        let now = 1_700_000_004_000;
        assert!(!every.is_ahead(1_700_000_000_000, now), "the latest tick");
        assert!(
            !every.is_ahead(1_700_000_010_000, now),
            "the next: a clock a little ahead"
        );
        assert!(every.is_ahead(1_700_000_020_000, now), "two ticks ahead");
        assert!(every.is_ahead(i64::MAX, now));
        let last = 1_700_000_000_000;
        assert!(
            !every.is_overdue(last, at(1_700_000_019_999)),
            "one tick late"
        );
        assert!(every.is_overdue(last, at(1_700_000_020_000)), "two");
        assert!(!every.is_overdue(i64::MAX, at(now)), "past the end of time");
    }

    #[test]
    fn a_cron_expression_that_never_matches_is_refused() {
        for never in ["0 0 30 2 *", "0 0 31 4 *", "0 0 0 31 11 *"] {
            let err = Schedule::cron(never, "UTC").unwrap_err().to_string();
            assert!(err.contains("never matches"), "{never}: {err}");
        }
        let leap_day = Schedule::cron("0 0 29 2 *", "UTC").expect("every four years");
        assert!(leap_day.next_after(1_700_000_000_000).is_some());
    }

    #[test]
    fn the_due_tick_follows_the_catch_up_rule() {
        let every = Schedule::every(Duration::from_secs(10)).unwrap();
        let start = at(1_700_000_000_000);
        let now = at(1_700_000_054_000); // latest tick ...050_000
        let latest = Some(1_700_000_050_000);
        assert_eq!(
            due(&every, CatchUp::Once, Some(1_700_000_050_000), start, now),
            None
        );
        assert_eq!(
            due(&every, CatchUp::Once, Some(1_700_000_040_000), start, now),
            latest
        );
        assert_eq!(
            due(&every, CatchUp::Skip, Some(1_700_000_040_000), start, now),
            latest
        );
        assert_eq!(
            due(&every, CatchUp::Once, Some(1_700_000_010_000), start, now),
            latest,
            "several missed: the latest, once"
        );
        assert_eq!(
            due(&every, CatchUp::Skip, Some(1_700_000_010_000), start, now),
            None,
            "several missed: skipped until the next tick"
        );
        assert_eq!(due(&every, CatchUp::Once, None, start, now), latest);
        assert_eq!(
            due(&every, CatchUp::Once, None, at(1_700_000_051_000), now),
            None,
            "a new schedule fires nothing from before its first worker"
        );
    }
}
