//! The controls in force: what the control topic says once every command read so far is applied.

use std::collections::{BTreeMap, HashMap};
use std::time::SystemTime;

use super::command::{Command, Pause, Tally};

/// The most routes paused at once that a worker keeps; a pause of one more route is refused
/// (logged and counted), so a flood of commands cannot grow a worker's memory without bound.
pub(crate) const MAX_PAUSES: usize = 10_000;

/// The most job cancellations a worker keeps. Only the id (at most 64 bytes) and the end of each
/// are kept — its reason and issuer are logged when it is read — so this is about 12 MB at worst.
/// When full, lapsed ones are dropped first; a cancellation beyond it is refused (logged and
/// counted).
pub(crate) const MAX_CANCELS: usize = 100_000;

/// The most breaker tallies a worker keeps (one per route and counting worker). When full,
/// lapsed ones are dropped first; a tally beyond it is refused (logged and counted).
pub(crate) const MAX_TALLIES: usize = 10_000;

/// The controls in force, as the last command of each key on the control topic left them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ControlState {
    pauses: BTreeMap<String, Pause>,
    /// Job id → when its cancellation lapses.
    cancels: HashMap<Box<str>, SystemTime>,
    /// (route, worker) → that worker's breaker tally of the route.
    tallies: BTreeMap<(String, String), Counted>,
}

/// What a tally counts, and while when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Counted {
    calls: u32,
    failed: u32,
    at: SystemTime,
    until: SystemTime,
}

impl ControlState {
    /// The pause of `topic` in force at `now`, if any.
    pub fn paused(&self, topic: &str, now: SystemTime) -> Option<&Pause> {
        self.pauses.get(topic).filter(|pause| pause.in_force(now))
    }

    /// Every pause in force at `now`, by topic.
    pub fn pauses(&self, now: SystemTime) -> impl Iterator<Item = &Pause> {
        self.pauses
            .values()
            .filter(move |pause| pause.in_force(now))
    }

    /// When the cancellation of job `job_id` lapses, if one is in force at `now`.
    pub fn cancelled(&self, job_id: &str, now: SystemTime) -> Option<SystemTime> {
        self.cancels
            .get(job_id)
            .copied()
            .filter(|until| now < *until)
    }

    /// How many cancellations are in force at `now`.
    pub fn cancellations(&self, now: SystemTime) -> usize {
        self.cancels.values().filter(|until| now < **until).count()
    }

    /// The calls and failures of route `topic` that the other workers' tallies count at `now`:
    /// every tally but `me`'s, written at or after `since` and not yet lapsed.
    pub(crate) fn fleet_failures(
        &self,
        topic: &str,
        me: &str,
        since: SystemTime,
        now: SystemTime,
    ) -> (u32, u32) {
        self.tallies
            .range((topic.to_owned(), String::new())..)
            .take_while(|((route, _), _)| route == topic)
            .filter(|((_, worker), counted)| {
                worker != me && counted.at >= since && now < counted.until
            })
            .fold((0, 0), |(calls, failed), (_, counted)| {
                (
                    calls.saturating_add(counted.calls),
                    failed.saturating_add(counted.failed),
                )
            })
    }

    /// When the next timed pause ends after `now`, if one does.
    pub(crate) fn next_expiry(&self, now: SystemTime) -> Option<SystemTime> {
        self.pauses
            .values()
            .flat_map(|pause| [pause.until, pause.probe.as_ref().map(|p| p.until)])
            .flatten()
            .filter(|until| *until > now)
            .min()
    }

    /// The keys of at most `max` commands that lapsed by `now` (timed pauses that ended,
    /// cancellations and tallies past their end): a tombstone for each lets compaction remove them.
    #[cfg_attr(not(feature = "rdkafka"), allow(dead_code))]
    pub(crate) fn lapsed(&self, now: SystemTime, max: usize) -> Vec<String> {
        let pauses = self
            .pauses
            .values()
            .filter(|pause| pause.ends().is_some_and(|end| end <= now))
            .map(|pause| super::command::pause_key(&pause.topic));
        let cancels = self
            .cancels
            .iter()
            .filter(|(_, until)| **until <= now)
            .map(|(job, _)| super::command::cancel_key(job));
        let tallies = self
            .tallies
            .iter()
            .filter(|(_, counted)| counted.until <= now)
            .map(|((topic, worker), _)| super::command::tally_key(topic, worker));
        pauses.chain(cancels).chain(tallies).take(max).collect()
    }

    /// Applies one command; `Err` says why it is refused.
    pub(crate) fn apply(&mut self, command: Command) -> Result<(), String> {
        match command {
            Command::Pause(pause) => {
                if self.pauses.len() >= MAX_PAUSES && !self.pauses.contains_key(&pause.topic) {
                    return Err(format!(
                        "{MAX_PAUSES} routes are paused already: the pause of {} is refused",
                        pause.topic
                    ));
                }
                self.pauses.insert(pause.topic.clone(), pause);
            }
            Command::Resume { topic } => {
                self.pauses.remove(&topic);
            }
            Command::Cancel(cancel) => {
                if self.cancels.len() >= MAX_CANCELS
                    && !self.cancels.contains_key(cancel.job_id.as_str())
                {
                    let now = SystemTime::now();
                    self.cancels.retain(|_, until| now < *until);
                    if self.cancels.len() >= MAX_CANCELS {
                        return Err(format!(
                            "{MAX_CANCELS} jobs are cancelled already: the cancellation of {} is refused",
                            cancel.job_id
                        ));
                    }
                }
                self.cancels.insert(cancel.job_id.into(), cancel.until);
            }
            Command::Uncancel { job_id } => {
                self.cancels.remove(job_id.as_str());
            }
            Command::Tally(tally) => self.tally(tally)?,
            Command::Untally { topic, worker } => {
                self.tallies.remove(&(topic, worker));
            }
        }
        Ok(())
    }

    fn tally(&mut self, tally: Tally) -> Result<(), String> {
        let Tally {
            topic,
            worker,
            calls,
            failed,
            at,
            until,
        } = tally;
        let key = (topic, worker);
        if self.tallies.len() >= MAX_TALLIES && !self.tallies.contains_key(&key) {
            let now = SystemTime::now();
            self.tallies.retain(|_, counted| now < counted.until);
            if self.tallies.len() >= MAX_TALLIES {
                return Err(format!(
                    "{MAX_TALLIES} breaker tallies are kept already: the tally of {} by {} is refused",
                    key.0, key.1
                ));
            }
        }
        self.tallies.insert(
            key,
            Counted {
                calls,
                failed,
                at,
                until,
            },
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::control::Cancel;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn pause(topic: &str, until: Option<u64>) -> Command {
        Command::Pause(Pause {
            topic: topic.to_owned(),
            until: until.map(at),
            reason: String::new(),
            by: String::new(),
            at: at(0),
            probe: None,
        })
    }

    #[test]
    fn the_last_command_of_a_route_wins_and_timed_pauses_end_by_themselves() {
        let mut state = ControlState::default();
        state.apply(pause("sms", None)).expect("applies");
        state.apply(pause("emails", Some(100))).expect("applies");
        assert!(state.paused("sms", at(50)).is_some());
        assert!(state.paused("emails", at(99)).is_some());
        assert!(state.paused("emails", at(100)).is_none());
        assert_eq!(state.next_expiry(at(50)), Some(at(100)));
        assert_eq!(state.next_expiry(at(100)), None);
        state
            .apply(Command::Resume {
                topic: "sms".to_owned(),
            })
            .expect("applies");
        assert!(state.paused("sms", at(50)).is_none());
        assert_eq!(state.pauses(at(50)).count(), 1);
    }

    #[test]
    fn pauses_beyond_the_bound_are_refused_but_known_routes_still_change() {
        let mut state = ControlState::default();
        for n in 0..MAX_PAUSES {
            state
                .apply(pause(&format!("t{n}"), None))
                .expect("within the bound");
        }
        let refused = state
            .apply(pause("one-more", None))
            .expect_err("beyond the bound");
        assert!(refused.contains("refused"), "{refused}");
        state
            .apply(pause("t0", Some(5)))
            .expect("a known route changes");
        assert_eq!(state.paused("t0", at(1)).and_then(|p| p.until), Some(at(5)));
    }

    #[test]
    fn cancellations_lapse_and_lapsed_ones_make_room() {
        let cancel = |id: &str, until: u64| {
            Command::Cancel(Cancel {
                job_id: id.to_owned(),
                until: at(until),
                reason: String::new(),
                by: String::new(),
                at: at(0),
            })
        };
        let mut state = ControlState::default();
        state.apply(cancel("j", 100)).expect("applies");
        assert!(state.cancelled("j", at(99)).is_some());
        assert!(state.cancelled("j", at(100)).is_none(), "lapsed");
        assert!(state.cancelled("other", at(1)).is_none());
        state
            .apply(Command::Uncancel {
                job_id: "j".to_owned(),
            })
            .expect("applies");
        assert!(state.cancelled("j", at(1)).is_none());
        // Full of lapsed cancellations (time 1 is long past): a new one still fits.
        for n in 0..MAX_CANCELS {
            state.apply(cancel(&format!("old{n}"), 1)).expect("fits");
        }
        let far = 4_000_000_000;
        state
            .apply(cancel("new", far))
            .expect("lapsed ones make room");
        assert_eq!(state.cancellations(at(2)), 1);
        for n in 0..MAX_CANCELS - 1 {
            state.apply(cancel(&format!("live{n}"), far)).expect("fits");
        }
        let refused = state.apply(cancel("one-more", far)).expect_err("full");
        assert!(refused.contains("refused"), "{refused}");
    }

    #[test]
    fn lapsed_pauses_and_cancellations_are_listed_for_tombstones_and_live_ones_are_not() {
        let mut state = ControlState::default();
        state.apply(pause("forever", None)).expect("applies");
        state.apply(pause("ended", Some(10))).expect("applies");
        state.apply(pause("running", Some(100))).expect("applies");
        for (id, until) in [("old", 10), ("live", 100)] {
            state
                .apply(Command::Cancel(Cancel {
                    job_id: id.to_owned(),
                    until: at(until),
                    reason: String::new(),
                    by: String::new(),
                    at: at(0),
                }))
                .expect("applies");
        }
        let mut lapsed = state.lapsed(at(50), 10);
        lapsed.sort();
        assert_eq!(lapsed, ["cancel/old", "pause/ended"]);
        assert_eq!(state.lapsed(at(50), 1).len(), 1, "at most `max`");
        assert_eq!(state.lapsed(at(5), 10), Vec::<String>::new());
    }

    #[test]
    fn the_fleets_failures_sum_the_other_workers_live_tallies_since_the_window_began() {
        let tally = |topic: &str, worker: &str, calls, failed, at_secs, until| {
            Command::Tally(Tally {
                topic: topic.to_owned(),
                worker: worker.to_owned(),
                calls,
                failed,
                at: at(at_secs),
                until: at(until),
            })
        };
        let mut state = ControlState::default();
        for command in [
            tally("sms", "me", 9, 9, 10, 100),
            tally("sms", "a", 2, 2, 10, 100),
            tally("sms", "b", 3, 1, 20, 100),
            tally("sms", "old", 5, 5, 10, 40),
            tally("sms-eu", "c", 7, 7, 10, 100),
            tally("sm", "d", 7, 7, 10, 100),
        ] {
            state.apply(command).expect("applies");
        }
        assert_eq!(state.fleet_failures("sms", "me", at(0), at(30)), (10, 8));
        assert_eq!(
            state.fleet_failures("sms", "me", at(0), at(50)),
            (5, 3),
            "lapsed"
        );
        assert_eq!(
            state.fleet_failures("sms", "me", at(15), at(30)),
            (3, 1),
            "since"
        );
        assert_eq!(state.fleet_failures("sms", "a", at(0), at(50)), (12, 10));
        assert_eq!(state.fleet_failures("none", "me", at(0), at(30)), (0, 0));
        assert_eq!(state.lapsed(at(50), 10), ["failures/sms/old"]);
        state
            .apply(Command::Untally {
                topic: "sms".to_owned(),
                worker: "a".to_owned(),
            })
            .expect("applies");
        assert_eq!(state.fleet_failures("sms", "me", at(0), at(30)), (8, 6));
        for n in 0..MAX_TALLIES {
            state
                .apply(tally(
                    "t",
                    &format!("w{n}"),
                    1,
                    1,
                    4_000_000_000,
                    4_000_000_100,
                ))
                .ok();
        }
        let refused = state
            .apply(tally("t", "one-more", 1, 1, 4_000_000_000, 4_000_000_100))
            .expect_err("full");
        assert!(refused.contains("refused"), "{refused}");
    }
}
