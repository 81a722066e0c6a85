//! Pages of letters and one letter, read by offset with the `dlq replay` reader.
//!
//! A page is bounded three ways: at most [`PAGE`] letters, at most [`BUDGET`] letters looked at
//! (a filter that matches little does not read the whole topic in one request) and at most
//! [`PAGE_TIME`]. Each letter is cut down to a [`Row`] as it is read, so a page of 1 MiB letters
//! holds 50 previews, not 50 MiB. Where it stopped is the next page's [`Cursor`].

use std::collections::BTreeMap;
use std::fmt;
use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use worker_core::security::Security;

use crate::replay::markers::Markers;
use crate::replay::provenance::{Text, Writer};
use crate::replay::scan::{DlqScan, Letter, LetterHeader};

/// Letters on a page.
pub(crate) const PAGE: usize = 50;
/// Letters looked at for one page at most.
pub(crate) const BUDGET: u64 = 5_000;
/// How long one page may read.
pub(crate) const PAGE_TIME: Duration = Duration::from_secs(4);
/// Characters of a value or key shown in a list.
pub(crate) const PREVIEW_CHARS: usize = 120;
/// Characters of a value shown on the letter's own page.
pub(crate) const FULL_CHARS: usize = 64 * 1024;
/// Characters of one header value shown.
pub(crate) const HEADER_CHARS: usize = 2_048;

/// Where a page starts: per partition, the first offset to read. Empty: every partition from
/// its start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Cursor(pub(crate) BTreeMap<i32, i64>);

impl Cursor {
    /// `0:15,1:20`, as in a URL.
    pub(crate) fn parse(text: &str) -> Option<Self> {
        let mut out = BTreeMap::new();
        for pair in text.split(',').filter(|p| !p.is_empty()) {
            let (partition, offset) = pair.split_once(':')?;
            let offset: i64 = offset.parse().ok()?;
            if offset < 0 {
                return None;
            }
            out.insert(partition.parse().ok()?, offset);
        }
        Some(Self(out))
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pairs: Vec<String> = self.0.iter().map(|(p, o)| format!("{p}:{o}")).collect();
        f.write_str(&pairs.join(","))
    }
}

/// What a page lists.
#[derive(Clone, Debug, Default)]
pub(crate) struct Filter {
    pub(crate) reason: Option<String>,
    /// Written at or after (ms since the epoch).
    pub(crate) since_ms: Option<i64>,
    /// Written before.
    pub(crate) until_ms: Option<i64>,
}

impl Filter {
    fn takes(&self, letter: &Letter) -> bool {
        let at = letter.timestamp_ms.unwrap_or(i64::MIN);
        self.reason.as_deref().is_none_or(|r| {
            letter
                .provenance()
                .reason
                .is_some_and(|reason| reason.is(r))
        }) && self.since_ms.is_none_or(|since| at >= since)
            && self.until_ms.is_none_or(|until| at < until)
    }
}

/// One letter as a list shows it: its provenance and previews, all text cut and escaped of
/// control characters (HTML escaping is the template's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Row {
    pub(crate) partition: i32,
    pub(crate) offset: i64,
    pub(crate) timestamp_ms: Option<i64>,
    pub(crate) reason: String,
    pub(crate) error: String,
    pub(crate) delivery_count: String,
    pub(crate) failed_at: String,
    pub(crate) worker: String,
    pub(crate) handler: String,
    pub(crate) source: String,
    pub(crate) key: String,
    pub(crate) value: String,
    /// The value's size in bytes.
    pub(crate) value_bytes: usize,
}

impl Row {
    /// The row of `letter`, the worker's or a Kafka 4.4 broker's (its `__dlq.errors.*` headers:
    /// reason `broker_rejected` or `broker_delivery_limit`, the broker's message as the error,
    /// `broker` as the worker).
    pub(crate) fn of(letter: &Letter, chars: usize) -> Self {
        let p = letter.provenance();
        let text = |value: &Option<Text>| {
            value.as_ref().map_or_else(String::new, |v| {
                preview(&v.0, HEADER_CHARS.min(chars.max(200)))
            })
        };
        let worker = match p.writer {
            Writer::Broker => "broker".to_owned(),
            _ => text(&p.worker),
        };
        Self {
            partition: letter.partition,
            offset: letter.offset,
            timestamp_ms: letter.timestamp_ms,
            reason: text(&p.reason),
            error: text(&p.error),
            delivery_count: p.delivery_count.map_or_else(String::new, |c| c.to_string()),
            failed_at: text(&p.failed_at),
            worker,
            handler: text(&p.handler),
            source: text(&p.topic),
            key: letter
                .key
                .as_deref()
                .map_or_else(String::new, |k| preview(k, chars)),
            value: letter
                .value
                .as_deref()
                .map_or_else(String::new, |v| preview(v, chars)),
            value_bytes: letter.value.as_ref().map_or(0, Vec::len),
        }
    }
}

/// One letter as its own page shows it: the row with a longer value, and every header.
#[derive(Clone, Debug)]
pub(crate) struct Full {
    pub(crate) row: Row,
    /// `None`: a header name is not UTF-8, so none could be read.
    pub(crate) headers: Option<Vec<(String, String)>>,
}

/// One page of letters.
#[derive(Clone, Debug, Default)]
pub(crate) struct Page {
    pub(crate) rows: Vec<Row>,
    /// Where the next page starts, unless this one read to the end of the topic.
    pub(crate) next: Option<Cursor>,
    /// Letters looked at.
    pub(crate) looked_at: u64,
}

/// Untrusted bytes as text: at most `chars` characters (read from at most four bytes each, so a
/// 1 MiB value is never converted whole), control characters escaped, `…` when cut.
pub(crate) fn preview(bytes: &[u8], chars: usize) -> String {
    let head = &bytes[..bytes.len().min(chars.saturating_mul(4))];
    let text = String::from_utf8_lossy(head);
    let mut out = String::new();
    let mut taken = 0;
    for c in text.chars() {
        if taken == chars {
            break;
        }
        taken += 1;
        if c.is_control() && c != '\n' {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    if taken == chars && (text.chars().nth(chars).is_some() || head.len() < bytes.len()) {
        out.push('…');
    }
    out
}

/// Opens `topic` for one request.
fn open(
    bootstrap: &str,
    security: &Security,
    client_id: &str,
    topic: &str,
) -> anyhow::Result<DlqScan> {
    DlqScan::open(bootstrap, security, client_id, topic)
}

/// Reads one page of `topic` from `cursor` (or, without one, from `filter.since_ms`, else the
/// start). Blocking.
pub(crate) fn page(
    bootstrap: &str,
    security: &Security,
    client_id: &str,
    topic: &str,
    filter: &Filter,
    cursor: Option<&Cursor>,
) -> anyhow::Result<Page> {
    let mut scan = open(bootstrap, security, client_id, topic)?;
    let start: BTreeMap<i32, i64> = match (cursor, filter.since_ms) {
        (Some(cursor), _) if !cursor.0.is_empty() => cursor.0.clone(),
        (_, Some(since)) => scan.offsets_at(since)?,
        _ => scan.ranges().iter().map(|r| (r.partition, r.low)).collect(),
    };
    scan.narrow(&start);
    let mut next = start;
    let mut page = Page::default();
    let started = Instant::now();
    let mut stopped = false;
    scan.letters(
        &Markers::default(),
        |letter| {
            next.insert(letter.partition, letter.offset + 1);
            page.looked_at += 1;
            if filter.takes(&letter) {
                page.rows.push(Row::of(&letter, PREVIEW_CHARS));
            }
            if page.rows.len() >= PAGE || page.looked_at >= BUDGET || started.elapsed() > PAGE_TIME
            {
                stopped = true;
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        },
        |_| {},
    )?;
    page.rows
        .sort_by_key(|r| (r.timestamp_ms, r.partition, r.offset));
    if stopped {
        page.next = Some(Cursor(next));
    }
    Ok(page)
}

/// The letter at `partition`/`offset` of `topic`, or `None` when there is none (a marker, or
/// an offset outside the topic). Blocking.
pub(crate) fn letter(
    bootstrap: &str,
    security: &Security,
    client_id: &str,
    topic: &str,
    partition: i32,
    offset: i64,
) -> anyhow::Result<Option<Full>> {
    let mut scan = open(bootstrap, security, client_id, topic)?;
    if !scan
        .ranges()
        .iter()
        .any(|r| r.partition == partition && (r.low..r.high).contains(&offset))
    {
        return Ok(None);
    }
    scan.narrow(&BTreeMap::from([(partition, offset)]));
    let mut found = None;
    scan.letters(
        &Markers::default(),
        |letter| {
            if letter.offset == offset {
                found = Some(Full {
                    row: Row::of(&letter, FULL_CHARS),
                    headers: letter.headers.as_ref().ok().map(|headers| {
                        headers
                            .iter()
                            .map(|LetterHeader { key, value }| {
                                (
                                    preview(key.as_bytes(), 256),
                                    value.as_deref().map_or_else(
                                        || "(null)".to_owned(),
                                        |v| preview(v, HEADER_CHARS),
                                    ),
                                )
                            })
                            .collect()
                    }),
                });
            }
            // The first record at or after the offset settles it.
            ControlFlow::Break(())
        },
        |_| {},
    )?;
    Ok(found)
}

#[cfg(test)]
mod tests {
    use worker_core::dlq::headers;

    use crate::replay::scan::LetterStatus;

    use super::*;

    #[test]
    fn cursors_round_trip_and_refuse_garbage() {
        let cursor = Cursor::parse("0:15,2:7").expect("a cursor");
        assert_eq!(cursor.to_string(), "0:15,2:7");
        assert_eq!(Cursor::parse(""), Some(Cursor::default()));
        for bad in ["0", "0:x", "a:1", "0:-1"] {
            assert!(Cursor::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn previews_are_cut_escaped_and_never_read_a_whole_large_value() {
        assert_eq!(preview(b"hello", 10), "hello");
        assert_eq!(preview(b"a\x1b[2Jb", 10), "a\\u{1b}[2Jb");
        assert_eq!(
            preview(b"<script>", 20),
            "<script>",
            "HTML escaping is the template's"
        );
        let big = vec![b'x'; 1 << 20];
        let shown = preview(&big, PREVIEW_CHARS);
        assert_eq!(shown.chars().count(), PREVIEW_CHARS + 1);
        assert!(shown.ends_with('…'));
        assert_eq!(preview(&[0xff, b'a'], 5), "\u{fffd}a");
    }

    #[test]
    fn a_row_carries_the_provenance_headers() {
        let header = |k: &str, v: &str| LetterHeader {
            key: k.to_owned(),
            value: Some(v.as_bytes().to_vec()),
        };
        let letter = Letter {
            partition: 1,
            offset: 9,
            key: Some(b"k".to_vec()),
            value: Some(vec![b'v'; 500]),
            headers: Ok(vec![
                header(headers::REASON, "handler_error"),
                header(headers::ERROR, "HTTP 503"),
                header(headers::DELIVERY_COUNT, "4"),
                header(headers::TOPIC, "sms"),
            ]),
            status: LetterStatus::Pending,
            timestamp_ms: Some(5),
        };
        let row = Row::of(&letter, PREVIEW_CHARS);
        assert_eq!(
            (
                row.reason.as_str(),
                row.error.as_str(),
                row.delivery_count.as_str()
            ),
            ("handler_error", "HTTP 503", "4")
        );
        assert_eq!((row.source.as_str(), row.key.as_str()), ("sms", "k"));
        assert_eq!(row.value_bytes, 500);
        assert_eq!(row.value.chars().count(), PREVIEW_CHARS + 1);
        let filter = Filter {
            reason: Some("rejected".to_owned()),
            ..Filter::default()
        };
        assert!(!filter.takes(&letter));
        let window = Filter {
            since_ms: Some(5),
            until_ms: Some(6),
            ..Filter::default()
        };
        assert!(window.takes(&letter));
    }

    #[test]
    fn a_broker_letter_shows_its_source_and_the_brokers_reason() {
        let header = |k: &str, v: &str| LetterHeader {
            key: k.to_owned(),
            value: Some(v.as_bytes().to_vec()),
        };
        let letter = Letter {
            partition: 0,
            offset: 3,
            key: None,
            value: None,
            headers: Ok(vec![
                header(headers::BROKER_TOPIC, "sms"),
                header(headers::BROKER_PARTITION, "1"),
                header(headers::BROKER_OFFSET, "40"),
                header(headers::BROKER_GROUP, "senders"),
                header(headers::BROKER_DELIVERY_COUNT, "2"),
                header(headers::BROKER_MESSAGE, headers::BROKER_REJECTED),
            ]),
            status: LetterStatus::Pending,
            timestamp_ms: Some(5),
        };
        let row = Row::of(&letter, PREVIEW_CHARS);
        assert_eq!(
            (
                row.reason.as_str(),
                row.error.as_str(),
                row.delivery_count.as_str(),
                row.source.as_str(),
                row.worker.as_str()
            ),
            (
                "broker_rejected",
                headers::BROKER_REJECTED,
                "2",
                "sms",
                "broker"
            )
        );
        let filter = Filter {
            reason: Some("broker_rejected".to_owned()),
            ..Filter::default()
        };
        assert!(filter.takes(&letter));
    }
}
