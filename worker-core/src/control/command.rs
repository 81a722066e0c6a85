//! A command as it is written to the control topic: the key names what it controls, the value
//! (JSON) says what to do, until when, why and who asked. Everything read here comes from a topic
//! anyone with write access can fill, so every field is bounded and checked before it is obeyed.

use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

/// The largest command value read; a larger one is refused unread.
pub(crate) const MAX_VALUE_BYTES: usize = 4096;
/// The longest `reason` and `by` accepted, in characters.
pub(crate) const MAX_TEXT_CHARS: usize = 256;
/// The version of the value format this worker writes and reads.
const VERSION: u32 = 1;
/// The key prefix of route pauses: `pause/{topic}`.
const PAUSE: &str = "pause/";
/// The key prefix of job cancellations: `cancel/{job id}`.
const CANCEL: &str = "cancel/";
/// The key prefix of breaker tallies: `failures/{topic}/{worker}`.
const FAILURES: &str = "failures/";
/// The most calls a tally may count: far more than a worker that needs the fleet's evidence
/// ever has, and small enough that the fleet's sum cannot overflow.
const MAX_TALLY_CALLS: u32 = 1_000_000;
/// The longest a tally counts after it was written.
pub(crate) const MAX_TALLY_SPAN: Duration = Duration::from_secs(24 * 3600);
/// The longest worker id in a tally's key.
const MAX_WORKER_CHARS: usize = 64;

/// Stops fetching a route's topic, fleet-wide, until it is resumed or `until` passes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pause {
    /// The route's topic.
    pub topic: String,
    /// When the pause ends by itself; `None` until a resume.
    pub until: Option<SystemTime>,
    /// Why (shown in `status`, the dashboard and the logs).
    pub reason: String,
    /// Who issued it.
    pub by: String,
    /// When it was issued.
    pub at: SystemTime,
    /// Set by a circuit breaker: the worker that probes the route once `until` passes, while
    /// the others stay paused until the probe's end.
    pub probe: Option<Probe>,
}

/// A circuit breaker's half-open probe: once its pause's `until` passes, `worker` alone runs a
/// few of the route's records, then resumes the route or pauses it again; every other worker
/// stays paused until `until`, so a prober that dies holds the route no longer than that.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    /// The prober's id: random per worker, in the `by` of the commands it writes.
    pub worker: String,
    /// When the probe ends for the others: the pause then lapses.
    pub until: SystemTime,
}

impl Pause {
    /// When it ends, as logs and pages show it: `until 2026-12-04T22:00:00Z`, `until resumed`,
    /// or for a breaker `until 2026-12-04T22:00:00Z, then probed until 2026-12-04T22:00:30Z`.
    pub fn until_text(&self) -> String {
        let Some(until) = self.until else {
            return "until resumed".to_owned();
        };
        let until = humantime::format_rfc3339_seconds(until);
        match &self.probe {
            Some(probe) => format!(
                "until {until}, then probed until {}",
                humantime::format_rfc3339_seconds(probe.until)
            ),
            None => format!("until {until}"),
        }
    }

    /// Whether the pause is in force at `now` (for a breaker's pause: until its probe ends).
    pub fn in_force(&self, now: SystemTime) -> bool {
        self.ends().is_none_or(|end| now < end)
    }

    /// When it ends for every worker, if it does by itself.
    pub fn ends(&self) -> Option<SystemTime> {
        let until = self.until?;
        Some(self.probe.as_ref().map_or(until, |p| p.until.max(until)))
    }

    /// Whether worker `worker` probes the route at `now`: the pause names it the prober, its
    /// `until` passed and the probe has not ended.
    pub fn probing(&self, worker: &str, now: SystemTime) -> bool {
        self.probe.as_ref().is_some_and(|probe| {
            probe.worker == worker
                && self.until.is_some_and(|until| until <= now)
                && now < probe.until
        })
    }
}

/// Cancels a job, fleet-wide, until `until`: a worker that would start a record whose
/// `share.job-id` is `job_id` acknowledges it without running it, and a running one has its
/// cancellation token fired.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cancel {
    /// The job's id (its `share.job-id` header).
    pub job_id: String,
    /// When the cancellation lapses: a cancellation is kept no longer than this.
    pub until: SystemTime,
    /// Why (shown in the logs).
    pub reason: String,
    /// Who issued it.
    pub by: String,
    /// When it was issued.
    pub at: SystemTime,
}

impl Cancel {
    /// A cancellation of `job_id` issued now that lasts `ttl`; `Err` when that ends at no valid
    /// time.
    pub fn lasting(job_id: &str, ttl: Duration, reason: &str, by: &str) -> Result<Self, String> {
        let at = SystemTime::now();
        Ok(Self {
            job_id: job_id.to_owned(),
            until: ends_after(at, ttl, "a cancellation")?,
            reason: reason.to_owned(),
            by: by.to_owned(),
            at,
        })
    }

    /// Whether the cancellation is in force at `now`.
    pub fn in_force(&self, now: SystemTime) -> bool {
        now < self.until
    }
}

/// A circuit breaker's evidence from one worker: the calls and failures of a route in its window.
/// A worker whose own window holds too few calls to judge a failure that would dead-letter its
/// record writes it, and judges on the sum of the fleet's tallies and its own window, so that an
/// outage spread thin over many workers still opens the breaker before it dead-letters anything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Tally {
    /// The route's topic.
    pub(crate) topic: String,
    /// The worker that counted: its prober id.
    pub(crate) worker: String,
    pub(crate) calls: u32,
    pub(crate) failed: u32,
    /// When it was counted.
    pub(crate) at: SystemTime,
    /// When it stops counting: the end of the counting worker's window.
    pub(crate) until: SystemTime,
}

/// One command read from the control topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Command {
    /// Pause a route's topic.
    Pause(Pause),
    /// Resume a route's topic (a pause's key written again, or its tombstone).
    Resume {
        /// The route's topic.
        topic: String,
    },
    /// Cancel a job.
    Cancel(Cancel),
    /// Forget a job's cancellation (its key's tombstone).
    Uncancel {
        /// The job's id.
        job_id: String,
    },
    /// A worker's breaker tally.
    Tally(Tally),
    /// Forget a worker's tally (its key's tombstone).
    Untally {
        /// The route's topic.
        topic: String,
        /// The worker that counted.
        worker: String,
    },
}

/// The JSON value of a command.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Value {
    v: u32,
    command: String,
    /// The route, for a pause or resume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    topic: Option<String>,
    /// The job, for a cancellation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    job: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    until: Option<String>,
    /// A breaker's prober, for a pause.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    probe: Option<String>,
    /// When a breaker's probe ends.
    #[serde(
        default,
        rename = "probe-until",
        skip_serializing_if = "Option::is_none"
    )]
    probe_until: Option<String>,
    /// The calls a tally counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    calls: Option<u32>,
    /// The failed calls a tally counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    failed: Option<u32>,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    by: String,
    at: String,
}

/// The key of a pause of `topic`: compaction keeps the last command per key, so the topic's
/// current state is the last pause or resume of each route.
pub(crate) fn pause_key(topic: &str) -> String {
    format!("{PAUSE}{topic}")
}

/// The record that pauses `pause.topic`.
pub(crate) fn encode_pause(pause: &Pause) -> Result<(String, Vec<u8>), String> {
    check_topic(&pause.topic)?;
    check_text("reason", &pause.reason)?;
    check_text("by", &pause.by)?;
    if let Some(probe) = &pause.probe {
        check_text("probe", &probe.worker)?;
        if pause.until.is_none() {
            return Err("a probe without `until`".to_owned());
        }
    }
    let value = Value {
        v: VERSION,
        command: "pause".to_owned(),
        topic: Some(pause.topic.clone()),
        job: None,
        until: pause.until.map(rfc3339),
        probe: pause.probe.as_ref().map(|p| p.worker.clone()),
        probe_until: pause.probe.as_ref().map(|p| rfc3339(p.until)),
        calls: None,
        failed: None,
        reason: pause.reason.clone(),
        by: pause.by.clone(),
        at: rfc3339(pause.at),
    };
    let json = serde_json::to_vec(&value).map_err(|err| err.to_string())?;
    Ok((pause_key(&pause.topic), json))
}

/// The record that resumes `topic`.
pub(crate) fn encode_resume(
    topic: &str,
    reason: &str,
    by: &str,
    at: SystemTime,
) -> Result<(String, Vec<u8>), String> {
    check_topic(topic)?;
    check_text("reason", reason)?;
    check_text("by", by)?;
    let value = Value {
        v: VERSION,
        command: "resume".to_owned(),
        topic: Some(topic.to_owned()),
        job: None,
        until: None,
        probe: None,
        probe_until: None,
        calls: None,
        failed: None,
        reason: reason.to_owned(),
        by: by.to_owned(),
        at: rfc3339(at),
    };
    let json = serde_json::to_vec(&value).map_err(|err| err.to_string())?;
    Ok((pause_key(topic), json))
}

/// The key of a cancellation of job `job_id`.
pub(crate) fn cancel_key(job_id: &str) -> String {
    format!("{CANCEL}{job_id}")
}

/// The record that cancels `cancel.job_id`.
pub(crate) fn encode_cancel(cancel: &Cancel) -> Result<(String, Vec<u8>), String> {
    crate::checks::job_id(&cancel.job_id)?;
    check_text("reason", &cancel.reason)?;
    check_text("by", &cancel.by)?;
    let value = Value {
        v: VERSION,
        command: "cancel".to_owned(),
        topic: None,
        job: Some(cancel.job_id.clone()),
        until: Some(rfc3339(cancel.until)),
        probe: None,
        probe_until: None,
        calls: None,
        failed: None,
        reason: cancel.reason.clone(),
        by: cancel.by.clone(),
        at: rfc3339(cancel.at),
    };
    let json = serde_json::to_vec(&value).map_err(|err| err.to_string())?;
    Ok((cancel_key(&cancel.job_id), json))
}

/// The key of worker `worker`'s tally of route `topic` (a topic name has no `/`).
pub(crate) fn tally_key(topic: &str, worker: &str) -> String {
    format!("{FAILURES}{topic}/{worker}")
}

/// The record of `tally`.
pub(crate) fn encode_tally(tally: &Tally) -> Result<(String, Vec<u8>), String> {
    check_topic(&tally.topic)?;
    check_worker(&tally.worker)?;
    check_counts(tally.calls, tally.failed, tally.at, tally.until)?;
    let value = Value {
        v: VERSION,
        command: "failures".to_owned(),
        topic: Some(tally.topic.clone()),
        job: None,
        until: Some(rfc3339(tally.until)),
        probe: None,
        probe_until: None,
        calls: Some(tally.calls),
        failed: Some(tally.failed),
        reason: String::new(),
        by: format!("breaker@{}", tally.worker),
        at: rfc3339(tally.at),
    };
    let json = serde_json::to_vec(&value).map_err(|err| err.to_string())?;
    Ok((tally_key(&tally.topic, &tally.worker), json))
}

/// Reads one record of the control topic: `Ok` with the command it carries, `Err` with why it is
/// refused (it is then logged, counted and otherwise ignored).
pub(crate) fn decode(key: Option<&[u8]>, value: Option<&[u8]>) -> Result<Command, String> {
    let key = key.ok_or("a command without a key")?;
    let key = std::str::from_utf8(key).map_err(|_| "a key that is not UTF-8".to_owned())?;
    if let Some(topic) = key.strip_prefix(PAUSE) {
        check_topic(topic)?;
        let Some(value) = value else {
            // A tombstone: the route's pause is deleted.
            return Ok(Command::Resume {
                topic: topic.to_owned(),
            });
        };
        let value = read_value(value)?;
        if value.topic.as_deref() != Some(topic) || value.job.is_some() {
            return Err(format!(
                "the key names route {} but the value names {}",
                quote(topic),
                quote(value.topic.as_deref().unwrap_or(""))
            ));
        }
        let at = parse_time("at", &value.at)?;
        let until = value
            .until
            .as_deref()
            .map(|t| parse_time("until", t))
            .transpose()?;
        let probe = match (value.probe, value.probe_until.as_deref(), until) {
            (None, None, _) => None,
            (Some(worker), Some(probe_until), Some(_)) => {
                check_text("probe", &worker)?;
                Some(Probe {
                    worker,
                    until: parse_time("probe-until", probe_until)?,
                })
            }
            _ => return Err("a probe needs `probe`, `probe-until` and `until`".to_owned()),
        };
        let topic = topic.to_owned();
        return match value.command.as_str() {
            "pause" => Ok(Command::Pause(Pause {
                topic,
                until,
                reason: value.reason,
                by: value.by,
                at,
                probe,
            })),
            "resume" => Ok(Command::Resume { topic }),
            other => Err(format!("unknown command {} for a route", quote(other))),
        };
    }
    if let Some(job_id) = key.strip_prefix(CANCEL) {
        crate::checks::job_id(job_id).map_err(|why| format!("key {}: {why}", quote(key)))?;
        let Some(value) = value else {
            return Ok(Command::Uncancel {
                job_id: job_id.to_owned(),
            });
        };
        let value = read_value(value)?;
        if value.job.as_deref() != Some(job_id) || value.topic.is_some() || value.probe.is_some() {
            return Err(format!(
                "the key names job {} but the value names {}",
                quote(job_id),
                quote(value.job.as_deref().unwrap_or(""))
            ));
        }
        if value.command != "cancel" {
            return Err(format!(
                "unknown command {} for a job",
                quote(&value.command)
            ));
        }
        let until = value
            .until
            .as_deref()
            .ok_or("a cancellation without `until`")
            .and_then(|t| parse_time("until", t).map_err(|_| "an `until` that is not a time"))
            .map_err(str::to_owned)?;
        return Ok(Command::Cancel(Cancel {
            job_id: job_id.to_owned(),
            until,
            reason: value.reason,
            by: value.by,
            at: parse_time("at", &value.at)?,
        }));
    }
    if let Some(rest) = key.strip_prefix(FAILURES) {
        return decode_tally(rest, value);
    }
    Err(format!("unknown key {}", quote(key)))
}

/// Reads a tally whose key is `failures/{rest}`.
fn decode_tally(rest: &str, value: Option<&[u8]>) -> Result<Command, String> {
    let (topic, worker) = rest
        .rsplit_once('/')
        .ok_or_else(|| format!("a tally key {} without a worker", quote(rest)))?;
    check_topic(topic)?;
    check_worker(worker)?;
    let (topic, worker) = (topic.to_owned(), worker.to_owned());
    let Some(value) = value else {
        return Ok(Command::Untally { topic, worker });
    };
    let value = read_value(value)?;
    if value.topic.as_deref() != Some(topic.as_str()) || value.job.is_some() {
        return Err(format!(
            "the key names route {} but the value names {}",
            quote(&topic),
            quote(value.topic.as_deref().unwrap_or(""))
        ));
    }
    if value.command != "failures" || value.probe.is_some() {
        return Err(format!(
            "unknown command {} for a tally",
            quote(&value.command)
        ));
    }
    let (Some(calls), Some(failed), Some(until)) = (value.calls, value.failed, value.until) else {
        return Err("a tally needs `calls`, `failed` and `until`".to_owned());
    };
    let at = parse_time("at", &value.at)?;
    let until = parse_time("until", &until)?;
    check_counts(calls, failed, at, until)?;
    Ok(Command::Tally(Tally {
        topic,
        worker,
        calls,
        failed,
        at,
        until,
    }))
}

/// A worker id as a tally's key names it: a few safe characters.
fn check_worker(worker: &str) -> Result<(), String> {
    let fine = !worker.is_empty()
        && worker.chars().count() <= MAX_WORKER_CHARS
        && worker
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if fine {
        Ok(())
    } else {
        Err(format!(
            "an invalid worker id {} (1 to {MAX_WORKER_CHARS} of A-Z a-z 0-9 - _)",
            quote(worker)
        ))
    }
}

/// A tally's counts and span, in bounds.
fn check_counts(calls: u32, failed: u32, at: SystemTime, until: SystemTime) -> Result<(), String> {
    if calls > MAX_TALLY_CALLS || failed > calls {
        return Err(format!(
            "a tally of {failed} failed of {calls} calls (at most {MAX_TALLY_CALLS}, failed at most calls)"
        ));
    }
    let span = until.duration_since(at).unwrap_or_default();
    if span.is_zero() || span > MAX_TALLY_SPAN {
        return Err(format!(
            "a tally counting for {} (more than nothing, at most 24h)",
            humantime::format_duration(span)
        ));
    }
    Ok(())
}

/// A command's value: bounded, JSON of this version, its texts bounded.
fn read_value(value: &[u8]) -> Result<Value, String> {
    if value.len() > MAX_VALUE_BYTES {
        return Err(format!(
            "a value of {} bytes (at most {MAX_VALUE_BYTES})",
            value.len()
        ));
    }
    let value: Value = serde_json::from_slice(value)
        .map_err(|err| format!("a value that is not a command: {err}"))?;
    if value.v != VERSION {
        return Err(format!("version {} (this worker reads {VERSION})", value.v));
    }
    check_text("reason", &value.reason)?;
    check_text("by", &value.by)?;
    Ok(value)
}

fn check_topic(topic: &str) -> Result<(), String> {
    crate::checks::topic_name(topic)
        .map_err(|why| format!("an invalid topic {}: {why}", quote(topic)))
}

fn check_text(name: &str, text: &str) -> Result<(), String> {
    let chars = text.chars().count();
    if chars > MAX_TEXT_CHARS {
        return Err(format!(
            "a {name} of {chars} characters (at most {MAX_TEXT_CHARS})"
        ));
    }
    Ok(())
}

/// The latest time a command can name: RFC 3339 has four-digit years (9999-12-31T23:59:59Z).
const LATEST_SECS: u64 = 253_402_300_799;

/// When something issued at `at` and lasting `duration` ends; `Err` past the latest time a
/// command can name (`"8000y"` from now), which no record could carry.
pub(crate) fn ends_after(
    at: SystemTime,
    duration: Duration,
    what: &str,
) -> Result<SystemTime, String> {
    let latest = SystemTime::UNIX_EPOCH + Duration::from_secs(LATEST_SECS);
    at.checked_add(duration)
        .filter(|end| *end <= latest)
        .ok_or_else(|| {
            format!(
                "{what} of {} would end after 9999-12-31, the latest time a command can name",
                humantime::format_duration(duration)
            )
        })
}

fn parse_time(name: &str, text: &str) -> Result<SystemTime, String> {
    humantime::parse_rfc3339_weak(text)
        .map_err(|_| format!("{name} {} is not an RFC 3339 time", quote(text)))
}

fn rfc3339(time: SystemTime) -> String {
    humantime::format_rfc3339_millis(time).to_string()
}

/// Untrusted text for a log line: quoted, escaped and cut to 64 characters.
fn quote(text: &str) -> String {
    let cut: String = text.chars().take(64).collect();
    let more = if cut.len() < text.len() { "…" } else { "" };
    format!("{:?}{more}", cut)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn pause(topic: &str) -> Pause {
        Pause {
            topic: topic.to_owned(),
            until: Some(at(1_800_000_060)),
            reason: "provider outage".to_owned(),
            by: "alice@ops-1".to_owned(),
            at: at(1_800_000_000),
            probe: None,
        }
    }

    #[test]
    fn a_command_lasting_past_year_9999_is_refused_and_one_to_it_is_written() {
        let eight_thousand_years = humantime::parse_duration("8000y").expect("humantime");
        let err = Cancel::lasting("job-1", eight_thousand_years, "", "ops").expect_err("refused");
        assert!(
            err.contains("8000years") && err.contains("9999-12-31"),
            "{err}"
        );
        let err = ends_after(SystemTime::now(), Duration::MAX, "a pause").expect_err("overflow");
        assert!(err.starts_with("a pause of "), "{err}");
        let latest = at(LATEST_SECS);
        let end = ends_after(at(LATEST_SECS - 60), Duration::from_secs(60), "a pause");
        assert_eq!(end, Ok(latest));
        let (_, value) = crate::control::cancel_record(&Cancel {
            until: latest,
            ..Cancel::lasting("job-1", Duration::from_secs(1), "", "ops").expect("valid")
        })
        .expect("encodes");
        assert!(
            String::from_utf8_lossy(&value).contains("9999-12-31T23:59:59"),
            "the latest time is written as RFC 3339"
        );
    }

    #[test]
    fn a_breakers_pause_names_its_prober_and_lasts_until_the_probe_ends() {
        let breaker = Pause {
            probe: Some(Probe {
                worker: "w1".to_owned(),
                until: at(1_800_000_120),
            }),
            ..pause("sms")
        };
        let (key, value) = encode_pause(&breaker).expect("encodes");
        assert_eq!(
            decode(Some(key.as_bytes()), Some(&value)),
            Ok(Command::Pause(breaker.clone()))
        );
        assert!(
            breaker.in_force(at(1_800_000_100)),
            "the others wait for the probe"
        );
        assert!(!breaker.in_force(at(1_800_000_120)));
        assert!(!breaker.probing("w1", at(1_800_000_059)), "still open");
        assert!(breaker.probing("w1", at(1_800_000_060)));
        assert!(!breaker.probing("w2", at(1_800_000_060)), "not the prober");
        assert_eq!(
            breaker.until_text(),
            "until 2027-01-15T08:01:00Z, then probed until 2027-01-15T08:02:00Z"
        );
        let mut half: serde_json::Value = serde_json::from_slice(&value).expect("json");
        half.as_object_mut().expect("object").remove("probe-until");
        let half = serde_json::to_vec(&half).expect("json");
        let refused = decode(Some(key.as_bytes()), Some(&half)).expect_err("refused");
        assert!(refused.contains("probe"), "{refused}");
    }

    #[test]
    fn a_pause_and_a_resume_read_back_as_written() {
        let (key, value) = encode_pause(&pause("sms")).expect("encodes");
        assert_eq!(key, "pause/sms");
        assert_eq!(
            decode(Some(key.as_bytes()), Some(&value)),
            Ok(Command::Pause(pause("sms")))
        );
        let (key, value) =
            encode_resume("sms", "fixed", "bob", at(1_800_000_100)).expect("encodes");
        assert_eq!(
            decode(Some(key.as_bytes()), Some(&value)),
            Ok(Command::Resume {
                topic: "sms".to_owned()
            })
        );
        assert_eq!(
            decode(Some(b"pause/sms"), None),
            Ok(Command::Resume {
                topic: "sms".to_owned()
            }),
            "a tombstone resumes"
        );
    }

    fn cancel(job_id: &str) -> Cancel {
        Cancel {
            job_id: job_id.to_owned(),
            until: at(1_800_600_000),
            reason: "appointment cancelled".to_owned(),
            by: "crm".to_owned(),
            at: at(1_800_000_000),
        }
    }

    #[test]
    fn a_cancellation_reads_back_as_written_and_its_tombstone_forgets_it() {
        let (key, value) = encode_cancel(&cancel("appt-42:reminder")).expect("encodes");
        assert_eq!(key, "cancel/appt-42:reminder");
        assert_eq!(
            decode(Some(key.as_bytes()), Some(&value)),
            Ok(Command::Cancel(cancel("appt-42:reminder")))
        );
        assert_eq!(
            decode(Some(key.as_bytes()), None),
            Ok(Command::Uncancel {
                job_id: "appt-42:reminder".to_owned()
            })
        );
        assert!(encode_cancel(&cancel("a/b")).is_err(), "not a job id");
    }

    #[test]
    fn hostile_cancellations_are_refused_with_a_reason() {
        let (_, good) = encode_cancel(&cancel("j1")).expect("encodes");
        let (_, pause_value) = encode_pause(&pause("sms")).expect("encodes");
        let without_until = {
            let mut json: serde_json::Value = serde_json::from_slice(&good).expect("json");
            json.as_object_mut().expect("an object").remove("until");
            serde_json::to_vec(&json).expect("json")
        };
        for (key, value, says) in [
            (&b"cancel/"[..], good.clone(), "a job id of 0 bytes"),
            (&b"cancel/a b"[..], good.clone(), "not allowed in a job id"),
            (&b"cancel/j2"[..], good.clone(), "the key names job"),
            (&b"cancel/j1"[..], without_until, "without `until`"),
            (&b"cancel/sms"[..], pause_value.clone(), "the key names job"),
            (&b"pause/sms"[..], good.clone(), "the key names route"),
        ] {
            let refused = decode(Some(key), Some(&value)).expect_err("refused");
            assert!(refused.contains(says), "{refused} (expected {says:?})");
        }
    }

    #[test]
    fn hostile_commands_are_refused_with_a_reason() {
        let (_, good) = encode_pause(&pause("sms")).expect("encodes");
        let with = |field: &str, value: serde_json::Value| {
            let mut json: serde_json::Value = serde_json::from_slice(&good).expect("json");
            json[field] = value;
            serde_json::to_vec(&json).expect("json")
        };
        type Case<'a> = (Option<&'a [u8]>, Option<Vec<u8>>, &'a str);
        let cases: Vec<Case<'_>> = vec![
            (None, Some(good.clone()), "without a key"),
            (Some(b"\xff\xfe"), Some(good.clone()), "not UTF-8"),
            (Some(b"drop/sms"), Some(good.clone()), "unknown key"),
            (Some(b"pause/../etc"), Some(good.clone()), "invalid topic"),
            (Some(b"pause/"), Some(good.clone()), "invalid topic"),
            (Some(b"pause/emails"), Some(good.clone()), "the key names"),
            (
                Some(b"pause/sms"),
                Some(b"{not json".to_vec()),
                "not a command",
            ),
            (
                Some(b"pause/sms"),
                Some(vec![b' '; MAX_VALUE_BYTES + 1]),
                "bytes",
            ),
            (Some(b"pause/sms"), Some(with("v", 2.into())), "version 2"),
            (
                Some(b"pause/sms"),
                Some(with("command", "drop".into())),
                "unknown command",
            ),
            (
                Some(b"pause/sms"),
                Some(with("until", "tomorrow".into())),
                "RFC 3339",
            ),
            (
                Some(b"pause/sms"),
                Some(with("reason", "x".repeat(300).into())),
                "characters",
            ),
            (
                Some(b"pause/sms"),
                Some(with("extra", 1.into())),
                "not a command",
            ),
        ];
        for (key, value, expected) in cases {
            let refused = decode(key, value.as_deref()).expect_err(expected);
            assert!(
                refused.contains(expected),
                "{expected:?} not in {refused:?}"
            );
        }
    }

    fn tally() -> Tally {
        Tally {
            topic: "sms".to_owned(),
            worker: "0f3a9c".to_owned(),
            calls: 2,
            failed: 2,
            at: at(1_800_000_000),
            until: at(1_800_000_030),
        }
    }

    #[test]
    fn a_tally_reads_back_as_written_and_its_tombstone_forgets_it() {
        let (key, value) = encode_tally(&tally()).expect("encodes");
        assert_eq!(key, "failures/sms/0f3a9c");
        assert_eq!(
            decode(Some(key.as_bytes()), Some(&value)),
            Ok(Command::Tally(tally()))
        );
        assert_eq!(
            decode(Some(key.as_bytes()), None),
            Ok(Command::Untally {
                topic: "sms".to_owned(),
                worker: "0f3a9c".to_owned()
            })
        );
    }

    #[test]
    fn hostile_tallies_are_refused_with_a_reason() {
        let (_, good) = encode_tally(&tally()).expect("encodes");
        let with = |field: &str, value: serde_json::Value| {
            let mut json: serde_json::Value = serde_json::from_slice(&good).expect("json");
            json[field] = value;
            serde_json::to_vec(&json).expect("json")
        };
        let without = |field: &str| {
            let mut json: serde_json::Value = serde_json::from_slice(&good).expect("json");
            json.as_object_mut().expect("an object").remove(field);
            serde_json::to_vec(&json).expect("json")
        };
        let key = &b"failures/sms/0f3a9c"[..];
        for (key, value, says) in [
            (&b"failures/sms"[..], good.clone(), "without a worker"),
            (&b"failures/sms/"[..], good.clone(), "invalid worker id"),
            (&b"failures/sms/a\nb"[..], good.clone(), "invalid worker id"),
            (
                &b"failures/emails/0f3a9c"[..],
                good.clone(),
                "the key names",
            ),
            (key, with("failed", 3.into()), "failed at most calls"),
            (
                key,
                with("calls", 4_000_000_000u32.into()),
                "at most 1000000",
            ),
            (key, with("failed", (-1).into()), "not a command"),
            (key, without("until"), "needs `calls`, `failed` and `until`"),
            (
                key,
                with("until", "2027-01-15T08:00:00Z".into()),
                "counting for 0s",
            ),
            (
                key,
                with("until", "2027-01-20T08:00:00Z".into()),
                "at most 24h",
            ),
            (key, with("command", "pause".into()), "unknown command"),
        ] {
            let refused = decode(Some(key), Some(&value)).expect_err(says);
            assert!(refused.contains(says), "{refused} (expected {says:?})");
        }
        let mut long = tally();
        long.worker = "w".repeat(65);
        assert!(encode_tally(&long).is_err(), "a worker id too long");
    }

    #[test]
    fn a_pause_without_an_end_is_in_force_until_resumed() {
        let mut open = pause("sms");
        open.until = None;
        assert!(open.in_force(at(4_000_000_000)));
        let timed = pause("sms");
        assert!(timed.in_force(at(1_800_000_059)));
        assert!(!timed.in_force(at(1_800_000_060)));
    }
}
