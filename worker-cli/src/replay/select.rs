//! Which letters a replay takes, and where each one goes: pure rules, no I/O.
//!
//! A letter's headers are written by whoever can write the dead-letter topic, so they never name
//! a destination or a record on their own say: a letter is replayed only when its source topic
//! (`share.dlq.topic`, or a broker's `__dlq.errors.topic`) is one of the configured routes'
//! topics and, for a broker's letter, its `__dlq.errors.group` is the configured group. `--to`
//! changes where such a letter goes, never which letters may go: otherwise a forged broker
//! letter naming any topic, partition and offset would have the operator copy that record.
//!
//! A broker's letter is known only by its headers: nothing in it proves that the broker wrote
//! it. One with the record is replayed as what it holds, like a worker's letter. One without the
//! record holds nothing but a pointer (`__dlq.errors.topic`, `.partition`, `.offset`), and
//! following it would replay whatever record is there, one handled long ago among them: such a
//! letter is refused unless the operator says that only the brokers write the dead-letter topic
//! ([`BrokerOffsets::Followed`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use worker_core::dlq::headers::{self, MarkerKind};

use super::provenance::{Content, Writer};
use super::scan::{Letter, LetterStatus};

/// What a replay is asked to take.
#[derive(Debug, Default)]
pub(crate) struct Selection<'a> {
    /// Only letters with this reason (`share.dlq.reason`; a broker's letter: `broker_rejected` or
    /// `broker_delivery_limit`).
    pub(crate) reason: Option<&'a str>,
    /// Only these letters: partition → offsets (every letter when `None`).
    pub(crate) letters: Option<&'a BTreeMap<i32, BTreeSet<i64>>>,
    /// Only letters written to the dead-letter topic in this window (ms since the epoch,
    /// `since` included, `until` excluded).
    pub(crate) since_ms: Option<i64>,
    pub(crate) until_ms: Option<i64>,
    /// Every selected letter goes here, whatever it names.
    pub(crate) to: Option<&'a str>,
    /// The topics a letter may name as its source (the configured routes' topics).
    pub(crate) routes: &'a [String],
    /// The configured share group: a broker's letter must name it.
    pub(crate) group: &'a str,
    /// Whether a broker's letter without its record is replayed by reading its original.
    pub(crate) broker_offsets: BrokerOffsets,
}

/// What becomes of a broker's letter that holds no record, only the offset of its original.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum BrokerOffsets {
    /// Refused: the offset is a header, which anyone who can write the dead-letter topic writes.
    #[default]
    Refused,
    /// The original is read at that offset and replayed: the operator says that nobody but the
    /// brokers writes the dead-letter topic (`--follow-broker-offsets`).
    Followed,
}

/// What to do with one letter.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// A marker says it is done with.
    Done(MarkerKind),
    /// Its reason is not the one asked for.
    OtherReason,
    /// It is not one of the letters asked for, or outside the time window.
    Unselected,
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
    /// It names no source topic.
    NoTarget,
    /// It names (in `header`) a topic that is not a route's.
    NotARoute { header: &'static str, named: String },
    /// A broker's letter of another share group (or of none it names).
    OtherGroup { named: Option<String> },
    /// A broker's letter without the record, whose source it does not name readably.
    NoSource,
    /// A broker's letter without the record, pointing at `original` (`topic/partition@offset`),
    /// while [`BrokerOffsets::Refused`].
    UnprovenOffset { original: String },
}

impl Selection<'_> {
    /// Whether `letter` is one of those asked for and in the window (its reason aside).
    fn takes(&self, letter: &Letter) -> bool {
        let listed = self.letters.is_none_or(|letters| {
            letters
                .get(&letter.partition)
                .is_some_and(|offsets| offsets.contains(&letter.offset))
        });
        let at = letter.timestamp_ms.unwrap_or(i64::MIN);
        listed
            && self.since_ms.is_none_or(|since| at >= since)
            && self.until_ms.is_none_or(|until| at < until)
    }

    /// The decision for `letter`.
    pub(crate) fn decide(&self, letter: &Letter) -> Decision {
        if let LetterStatus::Done(kind) = letter.status {
            return Decision::Done(kind);
        }
        if !self.takes(letter) {
            return Decision::Unselected;
        }
        if letter.headers.is_err() {
            return Decision::Refused(Refusal::UnreadableHeaders);
        }
        let provenance = letter.provenance();
        if let Some(reason) = self.reason
            && !provenance.reason.as_ref().is_some_and(|r| r.is(reason))
        {
            return Decision::OtherReason;
        }
        if let Some(original_size) = provenance.truncated {
            return Decision::Refused(Refusal::Truncated {
                original_size: original_size.map(|s| s.shown()),
            });
        }
        if let Some(what) = provenance.undecodable {
            return Decision::Refused(Refusal::Undecodable { what: what.shown() });
        }
        if provenance.writer == Writer::Broker
            && !provenance.group.as_ref().is_some_and(|g| g.is(self.group))
        {
            return Decision::Refused(Refusal::OtherGroup {
                named: provenance.group.map(|g| g.shown()),
            });
        }
        if provenance.content == Content::HeadersOnly && provenance.source().is_none() {
            return Decision::Refused(Refusal::NoSource);
        }
        let Some(named) = &provenance.topic else {
            return Decision::Refused(if provenance.writer == Writer::Broker {
                Refusal::NoSource
            } else {
                Refusal::NoTarget
            });
        };
        let Some(route) = self.routes.iter().find(|r| named.is(r)) else {
            return Decision::Refused(Refusal::NotARoute {
                header: if provenance.writer == Writer::Broker {
                    headers::BROKER_TOPIC
                } else {
                    headers::TOPIC
                },
                named: named.shown(),
            });
        };
        if provenance.content == Content::HeadersOnly
            && self.broker_offsets == BrokerOffsets::Refused
            && let Some((topic, partition, offset)) = provenance.source()
        {
            return Decision::Refused(Refusal::UnprovenOffset {
                original: format!("{topic}/{partition}@{offset}"),
            });
        }
        Decision::Replay {
            target: self.to.unwrap_or(route.as_str()).to_owned(),
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
                "it has no {} header: it names no route it came from",
                headers::TOPIC
            ),
            Refusal::NotARoute { header, named } => write!(
                f,
                "{header} names \"{named}\", which is not a route topic of the configuration: only letters of its routes are replayed"
            ),
            Refusal::OtherGroup { named: Some(named) } => write!(
                f,
                "a broker's letter of the group \"{named}\" ({}), not of the configured group",
                headers::BROKER_GROUP
            ),
            Refusal::OtherGroup { named: None } => write!(
                f,
                "a broker's letter without a {} header: it names no group",
                headers::BROKER_GROUP
            ),
            Refusal::NoSource => write!(
                f,
                "a broker's letter without the record (errors.deadletterqueue.copy.record.enable off), and its {}, {} and {} do not name where the record is",
                headers::BROKER_TOPIC,
                headers::BROKER_PARTITION,
                headers::BROKER_OFFSET
            ),
            Refusal::UnprovenOffset { original } => write!(
                f,
                "a broker's letter without the record: its {}, {} and {} point at {original}, but only headers say so, and anyone who can write the dead-letter topic writes them; replaying would copy whatever record is there, one already handled among them. Pass --follow-broker-offsets only if nobody but the brokers may write the dead-letter topic",
                headers::BROKER_TOPIC,
                headers::BROKER_PARTITION,
                headers::BROKER_OFFSET
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
            timestamp_ms: Some(1_700_000_000_000),
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
            routes: &routes,
            group: "g",
            ..Selection::default()
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
                    header: headers::TOPIC,
                    named: "\u{fffd}\\0".into(),
                }),
            ),
            (
                &any,
                &elsewhere,
                Decision::Refused(Refusal::NotARoute {
                    header: headers::TOPIC,
                    named: "payments".into(),
                }),
            ),
            // `--to` chooses where a route's letter goes, never which letters may go.
            (
                &to_mail,
                &elsewhere,
                Decision::Refused(Refusal::NotARoute {
                    header: headers::TOPIC,
                    named: "payments".into(),
                }),
            ),
            (&to_mail, &nameless, Decision::Refused(Refusal::NoTarget)),
            (&to_mail, &sms, replay("mail")),
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

    /// A broker's letter: `topic`/0@5, with `message`; `copied` says whether it holds the value.
    fn broker(topic: &[u8], message: &str, copied: bool) -> Letter {
        let mut l = letter(&[
            (headers::BROKER_TOPIC, topic),
            (headers::BROKER_PARTITION, b"0"),
            (headers::BROKER_OFFSET, b"5"),
            (headers::BROKER_GROUP, b"g"),
            (headers::BROKER_DELIVERY_COUNT, b"1"),
            (headers::BROKER_MESSAGE, message.as_bytes()),
        ]);
        if !copied {
            l.value = None;
        }
        l
    }

    #[test]
    fn broker_letters_are_routed_by_their_source_and_filtered_by_the_brokers_reason() {
        let routes = ["sms".to_owned()];
        let any = Selection {
            reason: None,
            letters: None,
            since_ms: None,
            until_ms: None,
            to: None,
            routes: &routes,
            group: "g",
            broker_offsets: BrokerOffsets::Refused,
        };
        let follow = Selection {
            broker_offsets: BrokerOffsets::Followed,
            ..any
        };
        let rejects = Selection {
            reason: Some("broker_rejected"),
            ..any
        };
        let limits = Selection {
            reason: Some("broker_delivery_limit"),
            ..follow
        };
        let ours = Selection {
            reason: Some("rejected"),
            ..any
        };
        let to_sms = Selection {
            to: Some("sms"),
            ..any
        };
        let rejected = broker(b"sms", headers::BROKER_REJECTED, true);
        let headers_only = broker(b"sms", headers::BROKER_REJECTED, false);
        let over_limit = broker(b"sms", headers::BROKER_DELIVERY_LIMIT, false);
        let elsewhere = broker(b"payments", headers::BROKER_REJECTED, true);
        let mut sourceless = broker(b"sms", headers::BROKER_REJECTED, false);
        if let Ok(h) = &mut sourceless.headers {
            h.retain(|h| h.key != headers::BROKER_OFFSET);
        }
        let mut other_group = broker(b"sms", headers::BROKER_REJECTED, false);
        let mut groupless = other_group.clone();
        if let (Ok(other), Ok(none)) = (&mut other_group.headers, &mut groupless.headers) {
            for h in other.iter_mut().filter(|h| h.key == headers::BROKER_GROUP) {
                h.value = Some(b"payments-workers".to_vec());
            }
            none.retain(|h| h.key != headers::BROKER_GROUP);
        }
        let table: &[(&Selection<'_>, &Letter, Decision)] = &[
            (&any, &rejected, replay("sms")),
            // Without the record, the letter is only a pointer: followed when the operator says.
            (
                &any,
                &headers_only,
                Decision::Refused(Refusal::UnprovenOffset {
                    original: "sms/0@5".into(),
                }),
            ),
            (
                &to_sms,
                &headers_only,
                Decision::Refused(Refusal::UnprovenOffset {
                    original: "sms/0@5".into(),
                }),
            ),
            (&follow, &headers_only, replay("sms")),
            (&rejects, &rejected, replay("sms")),
            (&rejects, &over_limit, Decision::OtherReason),
            (&limits, &over_limit, replay("sms")),
            (&ours, &rejected, Decision::OtherReason),
            (
                &any,
                &elsewhere,
                Decision::Refused(Refusal::NotARoute {
                    header: headers::BROKER_TOPIC,
                    named: "payments".into(),
                }),
            ),
            (&any, &sourceless, Decision::Refused(Refusal::NoSource)),
            (&follow, &sourceless, Decision::Refused(Refusal::NoSource)),
            (&to_sms, &sourceless, Decision::Refused(Refusal::NoSource)),
            // A forged pointer at another topic's record is not followed, whatever `--to` says.
            (
                &to_sms,
                &elsewhere,
                Decision::Refused(Refusal::NotARoute {
                    header: headers::BROKER_TOPIC,
                    named: "payments".into(),
                }),
            ),
            (
                &to_sms,
                &other_group,
                Decision::Refused(Refusal::OtherGroup {
                    named: Some("payments-workers".into()),
                }),
            ),
            (
                &any,
                &groupless,
                Decision::Refused(Refusal::OtherGroup { named: None }),
            ),
        ];
        for (i, (selection, letter, expected)) in table.iter().enumerate() {
            assert_eq!(&selection.decide(letter), expected, "row {i}");
        }
    }

    #[test]
    fn a_selection_takes_only_the_listed_letters_in_the_window() {
        let routes = ["sms".to_owned()];
        let sms = letter(&[(headers::TOPIC, b"sms")]);
        let listed: BTreeMap<i32, BTreeSet<i64>> = [(0, BTreeSet::from([7]))].into();
        let other: BTreeMap<i32, BTreeSet<i64>> =
            [(0, BTreeSet::from([8])), (1, [7].into())].into();
        let at = sms.timestamp_ms.unwrap();
        let cases = [
            (Some(&listed), None, None, replay("sms")),
            (Some(&other), None, None, Decision::Unselected),
            (None, Some(at), Some(at + 1), replay("sms")),
            (None, Some(at + 1), None, Decision::Unselected),
            (None, None, Some(at), Decision::Unselected),
        ];
        for (i, (letters, since_ms, until_ms, expected)) in cases.into_iter().enumerate() {
            let selection = Selection {
                letters,
                since_ms,
                until_ms,
                routes: &routes,
                group: "g",
                ..Selection::default()
            };
            assert_eq!(selection.decide(&sms), expected, "case {i}");
        }
    }

    #[test]
    fn refusals_say_why() {
        let text = Refusal::NotARoute {
            header: headers::TOPIC,
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
