//! Which letters a replay takes, and where each one goes: pure rules, no I/O.
//!
//! The target is never the letter's own say: `share.dlq.topic` is written by whoever wrote to the
//! dead-letter topic, so it is only followed when it names one of the configured routes' topics,
//! unless the operator names the target with `--to`.

use std::fmt;

use worker_core::dlq::headers::{self, MarkerKind};

use super::scan::{Letter, LetterStatus, shown};

/// What a replay is asked to take.
#[derive(Debug)]
pub(crate) struct Selection<'a> {
    /// Only letters with this `share.dlq.reason`.
    pub(crate) reason: Option<&'a str>,
    /// Every selected letter goes here, whatever it names.
    pub(crate) to: Option<&'a str>,
    /// The topics a letter may name as its target (the configured routes' topics).
    pub(crate) routes: &'a [String],
}

/// What to do with one letter.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// A marker says it is done with.
    Done(MarkerKind),
    /// Its reason is not the one asked for.
    OtherReason,
    /// It is selected but cannot be replayed.
    Refused(Refusal),
    /// Republish it to `target`.
    Replay { target: String },
}

/// Why a selected letter is not replayed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// A header name is not UTF-8.
    UnreadableHeaders,
    /// Its value was cut to fit the dead-letter topic.
    Truncated { original_size: Option<String> },
    /// The record did not decode (`record`: the value is its raw bytes; `batch`: nothing left).
    Undecodable { what: String },
    /// It names no target and no `--to` was given.
    NoTarget,
    /// It names a topic that is not a route's.
    NotARoute { named: String },
}

impl Selection<'_> {
    /// The decision for `letter`.
    pub(crate) fn decide(&self, letter: &Letter) -> Decision {
        if let LetterStatus::Done(kind) = letter.status {
            return Decision::Done(kind);
        }
        if letter.headers.is_err() {
            return Decision::Refused(Refusal::UnreadableHeaders);
        }
        if let Some(reason) = self.reason
            && letter.header(headers::REASON) != Some(reason.as_bytes())
        {
            return Decision::OtherReason;
        }
        if letter.header(headers::TRUNCATED) == Some(headers::TRUNCATED_TRUE.as_bytes()) {
            return Decision::Refused(Refusal::Truncated {
                original_size: letter.header_text(headers::ORIGINAL_SIZE),
            });
        }
        if let Some(what) = letter.header_text(headers::UNDECODABLE) {
            return Decision::Refused(Refusal::Undecodable { what });
        }
        if let Some(to) = self.to {
            return Decision::Replay {
                target: to.to_owned(),
            };
        }
        let Some(named) = letter.header(headers::TOPIC) else {
            return Decision::Refused(Refusal::NoTarget);
        };
        match self.routes.iter().find(|r| r.as_bytes() == named) {
            Some(route) => Decision::Replay {
                target: route.clone(),
            },
            None => Decision::Refused(Refusal::NotARoute {
                named: shown(named),
            }),
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::UnreadableHeaders => f.write_str("a header name is not UTF-8"),
            Refusal::Truncated { original_size } => {
                write!(f, "its value was cut to fit the dead-letter topic")?;
                if let Some(size) = original_size {
                    write!(f, " (from {size} bytes)")?;
                }
                f.write_str(": replaying it would publish a different record")
            }
            Refusal::Undecodable { what } if what == headers::UNDECODABLE_RECORD => f.write_str(
                "the record did not decode: its value holds the raw encoded record, not the record's value",
            ),
            Refusal::Undecodable { what } if what == headers::UNDECODABLE_BATCH => f.write_str(
                "the record's batch did not decode: nothing of the record was recovered",
            ),
            Refusal::Undecodable { what } => write!(f, "the record did not decode ({what})"),
            Refusal::NoTarget => write!(
                f,
                "it has no {} header; pass --to TOPIC to choose the target",
                headers::TOPIC
            ),
            Refusal::NotARoute { named } => write!(
                f,
                "{} names \"{named}\", which is not a route topic of the configuration; pass --to TOPIC to choose the target",
                headers::TOPIC
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::scan::{LetterHeader, UnreadableHeaders};
    use super::*;

    fn letter(pairs: &[(&str, &[u8])]) -> Letter {
        Letter {
            partition: 0,
            offset: 7,
            key: None,
            value: Some(b"job".to_vec()),
            headers: Ok(pairs
                .iter()
                .map(|(k, v)| LetterHeader {
                    key: (*k).to_owned(),
                    value: Some(v.to_vec()),
                })
                .collect()),
            status: LetterStatus::Pending,
        }
    }

    fn replay(target: &str) -> Decision {
        Decision::Replay {
            target: target.to_owned(),
        }
    }

    #[test]
    fn decisions() {
        let routes = ["sms".to_owned(), "mail".to_owned()];
        let any = Selection {
            reason: None,
            to: None,
            routes: &routes,
        };
        let rejected = Selection {
            reason: Some("rejected"),
            ..any
        };
        let to_mail = Selection {
            to: Some("mail"),
            ..any
        };
        let sms = letter(&[(headers::TOPIC, b"sms"), (headers::REASON, b"rejected")]);
        let mut done = sms.clone();
        done.status = LetterStatus::Done(MarkerKind::Replayed);
        let elsewhere = letter(&[
            (headers::TOPIC, b"payments"),
            (headers::REASON, b"rejected"),
        ]);
        let binary = letter(&[(headers::TOPIC, &[0xff, 0x00])]);
        let nameless = letter(&[(headers::REASON, b"rejected")]);
        let repeated = letter(&[(headers::TOPIC, b"payments"), (headers::TOPIC, b"mail")]);
        let truncated = letter(&[
            (headers::TOPIC, b"sms"),
            (headers::TRUNCATED, b"true"),
            (headers::ORIGINAL_SIZE, b"9000000"),
        ]);
        let not_truncated = letter(&[(headers::TOPIC, b"sms"), (headers::TRUNCATED, b"false")]);
        let record = letter(&[(headers::TOPIC, b"sms"), (headers::UNDECODABLE, b"record")]);
        let mut unreadable = sms.clone();
        unreadable.headers = Err(UnreadableHeaders);

        let table: &[(&Selection<'_>, &Letter, Decision)] = &[
            (&any, &sms, replay("sms")),
            (&rejected, &sms, replay("sms")),
            (&any, &done, Decision::Done(MarkerKind::Replayed)),
            (&rejected, &nameless, Decision::Refused(Refusal::NoTarget)),
            (&rejected, &binary, Decision::OtherReason),
            (
                &any,
                &binary,
                Decision::Refused(Refusal::NotARoute {
                    named: "\u{fffd}\\0".into(),
                }),
            ),
            (
                &any,
                &elsewhere,
                Decision::Refused(Refusal::NotARoute {
                    named: "payments".into(),
                }),
            ),
            (&to_mail, &elsewhere, replay("mail")),
            (&to_mail, &nameless, replay("mail")),
            (&any, &repeated, replay("mail")),
            (
                &to_mail,
                &truncated,
                Decision::Refused(Refusal::Truncated {
                    original_size: Some("9000000".into()),
                }),
            ),
            (&any, &not_truncated, replay("sms")),
            (
                &to_mail,
                &record,
                Decision::Refused(Refusal::Undecodable {
                    what: "record".into(),
                }),
            ),
            (
                &any,
                &unreadable,
                Decision::Refused(Refusal::UnreadableHeaders),
            ),
        ];
        for (i, (selection, letter, expected)) in table.iter().enumerate() {
            assert_eq!(&selection.decide(letter), expected, "row {i}");
        }
    }

    #[test]
    fn refusals_say_why() {
        let text = Refusal::NotARoute {
            named: "payments".into(),
        }
        .to_string();
        assert!(
            text.contains("\"payments\", which is not a route topic"),
            "{text}"
        );
        let text = Refusal::Undecodable {
            what: "batch".into(),
        }
        .to_string();
        assert!(
            text.contains("nothing of the record was recovered"),
            "{text}"
        );
    }
}
