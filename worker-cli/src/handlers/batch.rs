//! `batch = { max, linger, format }` on an http route: a request per batch of records, one
//! result per record read back.
//!
//! The request body is a JSON array of the payloads (`format = "json"`) or one payload per line
//! (`"ndjson"`); each payload must be one JSON value (a record whose payload is not is rejected
//! without being sent). A request carries records of one topic: a batch mixing records of the
//! route's topic and of its delay topic goes as one request per topic. Headers: `X-Share-Topic`
//! (the topic every record of the request was delivered from), `X-Share-Batch-Size` and
//! `X-Share-Records` (`partition-offset` of each record, in body order: with the topic, each
//! item's identity for deduplication). A topic's records whose `X-Share-Records` would pass
//! [`MAX_RECORDS_HEADER_BYTES`] go as several requests. The requests go one after another, each
//! answered on its own.
//!
//! A 2xx answer must be `{"results": [{"status": "ok" | "retry" | "reject", "reason": "…",
//! "retry_after": seconds}, …]}` with one result per record sent, in order (`reason` and
//! `retry_after` optional, other fields ignored). A result whose status is none of the three (a
//! number, another word, none) rejects its record, naming what the endpoint said. Any other
//! HTTP status is the outcome of every record of the request, as for single requests (429 and
//! 5xx retry, honouring `Retry-After`); an answer that does not parse, is larger than its bound,
//! or has a missing or extra result retries every record of the request, saying why.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use worker_core::{Job, Outcome};

use super::http::Http;
use super::{first_chars, one_line};
use crate::config::BatchFormat;

/// The longest `X-Share-Records` value a request carries: within the 8 KiB header line that
/// common servers and proxies accept (nginx's default buffers, Apache's field limit), with room
/// for the other headers. A batch whose identities are longer goes as several requests.
const MAX_RECORDS_HEADER_BYTES: usize = 6 * 1024;
/// The largest answer read: room for a result with a long reason per record.
const ANSWER_BASE_BYTES: usize = 64 * 1024;
const ANSWER_BYTES_PER_RECORD: usize = 4 * 1024;
/// How much of an endpoint's reason a record's outcome quotes.
const MAX_REASON_CHARS: usize = 500;
/// The longest `retry_after` honoured.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 60 * 60);

/// An http route's batch requests.
#[derive(Debug)]
pub(crate) struct HttpBatch {
    http: Arc<Http>,
    format: BatchFormat,
}

/// A 2xx answer: one result per record, each read on its own ([`outcome`]), so that one
/// result outside the protocol costs its record only.
#[derive(Debug, Deserialize)]
struct Answer {
    results: Vec<serde_json::Value>,
}

impl HttpBatch {
    pub(crate) fn new(http: Http, format: BatchFormat) -> Self {
        Self {
            http: Arc::new(http),
            format,
        }
    }

    /// Sends `jobs` in one request per topic (or several: [`MAX_RECORDS_HEADER_BYTES`]); one
    /// outcome per job, in order.
    pub(crate) async fn handle(&self, jobs: &[Job]) -> Vec<Outcome> {
        let mut outcomes: Vec<Option<Outcome>> = vec![None; jobs.len()];
        let mut items = Vec::with_capacity(jobs.len());
        let mut sent = Vec::with_capacity(jobs.len());
        for (index, job) in jobs.iter().enumerate() {
            match payload_json(job) {
                Ok(value) => {
                    items.push(value);
                    sent.push(index);
                }
                Err(why) => outcomes[index] = Some(Outcome::reject(why)),
            }
        }
        if !sent.is_empty() {
            let answered = self.send(jobs, &sent, items).await;
            for (index, outcome) in sent.into_iter().zip(answered) {
                outcomes[index] = Some(outcome);
            }
        }
        outcomes
            .into_iter()
            .map(|o| o.unwrap_or_else(|| Outcome::retry("no result for this record")))
            .collect()
    }

    /// Sends the records `sent` (indices into `jobs`) with their payloads `items`: one topic's
    /// records per request, in as many requests, one after another, as keep each
    /// `X-Share-Records` header within its bound; one outcome per record sent, in the order of
    /// `sent`.
    async fn send(
        &self,
        jobs: &[Job],
        sent: &[usize],
        items: Vec<serde_json::Value>,
    ) -> Vec<Outcome> {
        let mut outcomes: Vec<Option<Outcome>> = vec![None; sent.len()];
        let mut items: Vec<Option<serde_json::Value>> = items.into_iter().map(Some).collect();
        for (topic, members) in by_topic(jobs, sent) {
            let ids: Vec<String> = members
                .iter()
                .map(|member| {
                    let id = jobs[sent[*member]].id();
                    format!("{}-{}", id.partition, id.offset)
                })
                .collect();
            for part in header_parts(&ids, MAX_RECORDS_HEADER_BYTES) {
                let carried = &members[part.clone()];
                let payloads: Vec<serde_json::Value> = carried
                    .iter()
                    .filter_map(|member| items[*member].take())
                    .collect();
                let answered = self.request(topic, &ids[part], &payloads).await;
                for (member, outcome) in carried.iter().zip(answered) {
                    outcomes[*member] = Some(outcome);
                }
            }
        }
        outcomes
            .into_iter()
            .map(|o| o.unwrap_or_else(|| Outcome::retry("no result for this record")))
            .collect()
    }

    /// One request carrying the records `ids` of `topic` with their payloads `items`; one
    /// outcome per record.
    async fn request(
        &self,
        topic: &str,
        ids: &[String],
        items: &[serde_json::Value],
    ) -> Vec<Outcome> {
        let all = |outcome: Outcome| vec![outcome; ids.len()];
        let (body, content_type) = match self.format {
            BatchFormat::Json => (serde_json::to_vec(items), "application/json"),
            BatchFormat::Ndjson => {
                let mut body = Vec::new();
                let mut written = Ok(());
                for item in items {
                    if let Err(err) = serde_json::to_writer(&mut body, item) {
                        written = Err(err);
                        break;
                    }
                    body.push(b'\n');
                }
                (written.map(|()| body), "application/x-ndjson")
            }
        };
        let body = match body {
            Ok(body) => body,
            Err(err) => return all(Outcome::retry(format!("writing the batch: {err}"))),
        };
        let response = match self
            .http
            .send_batch(topic, &ids.join(","), ids.len(), body, content_type)
            .await
        {
            Ok(response) => response,
            Err(outcome) => return all(outcome),
        };
        let limit = ANSWER_BASE_BYTES + ANSWER_BYTES_PER_RECORD * ids.len();
        let answered = read_bounded(response, limit)
            .await
            .and_then(|answer| outcomes_of(&answer, ids.len()));
        answered.unwrap_or_else(|why| {
            // Said once per request, as the library says a batch handler's wrong answer: each
            // record's retry is logged at debug only.
            let reason = format!("{}: {why}", self.http.shown());
            tracing::warn!(
                topic,
                records = ids.len(),
                "{reason}: retrying every record of the request"
            );
            all(Outcome::retry(reason))
        })
    }
}

/// The records `sent` (indices into `jobs`) grouped by the topic they were delivered from, in
/// the order each topic first appears: each group's members are positions in `sent`, in order.
/// A route's batch mixes its topic's records with those back from its delay topic, and a
/// request names one topic for all its records.
fn by_topic<'a>(jobs: &'a [Job], sent: &[usize]) -> Vec<(&'a str, Vec<usize>)> {
    let mut groups: Vec<(&str, Vec<usize>)> = Vec::new();
    for (member, index) in sent.iter().enumerate() {
        let topic = jobs[*index].topic();
        match groups.iter_mut().find(|(t, _)| *t == topic) {
            Some((_, members)) => members.push(member),
            None => groups.push((topic, vec![member])),
        }
    }
    groups
}

/// Consecutive parts of `ids` whose comma-joined length stays within `limit` bytes (an id longer
/// than `limit` alone in its part).
fn header_parts(ids: &[String], limit: usize) -> Vec<Range<usize>> {
    let mut parts = Vec::new();
    let (mut start, mut length) = (0, 0);
    for (index, id) in ids.iter().enumerate() {
        let joined = if index == start {
            id.len()
        } else {
            length + 1 + id.len()
        };
        if index > start && joined > limit {
            parts.push(start..index);
            (start, length) = (index, id.len());
        } else {
            length = joined;
        }
    }
    if start < ids.len() {
        parts.push(start..ids.len());
    }
    parts
}

/// The record's payload as one JSON value, or why it cannot be sent in a batch.
fn payload_json(job: &Job) -> Result<serde_json::Value, String> {
    let Some(payload) = job.payload() else {
        return Err("a batch carries JSON payloads: this record has none".to_owned());
    };
    serde_json::from_slice(payload)
        .map_err(|err| format!("a batch carries JSON payloads: this one is not JSON ({err})"))
}

/// The body of `response`, or why it was not read whole: over `limit` bytes, or cut off.
async fn read_bounded(mut response: reqwest::Response, limit: usize) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > limit {
                    return Err(format!("the batch answer is larger than {limit} bytes"));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(body),
            Err(err) => return Err(format!("reading the batch answer: {}", err.without_url())),
        }
    }
}

/// One outcome per record from a 2xx answer, or why the answer does not give them.
fn outcomes_of(answer: &[u8], count: usize) -> Result<Vec<Outcome>, String> {
    // The parser's message may quote the endpoint's bytes (`invalid type: string "…"`): cut, on
    // one line.
    let answer: Answer = serde_json::from_slice(answer).map_err(|err| {
        let err = err.to_string();
        format!(
            r#"the batch answer is not {{"results": [...]}}: {}"#,
            one_line(first_chars(&err, MAX_REASON_CHARS))
        )
    })?;
    if answer.results.len() != count {
        return Err(format!(
            "the batch answer has {} results for a batch of {count} records",
            answer.results.len()
        ));
    }
    Ok(answer.results.into_iter().map(outcome).collect())
}

/// The outcome the endpoint gave one record: its result's `status` (`ok`, `retry`, `reject`),
/// with its `reason` (a string) and `retry_after` (seconds) when it has them. A result whose
/// status is none of the three rejects the record, the reason quoting what it said (as JSON, cut,
/// on one line): a guess at what the endpoint meant could accept a record never delivered, and
/// a retry would ask again a question the endpoint does not answer.
fn outcome(result: serde_json::Value) -> Outcome {
    let quoted = |value: &serde_json::Value| {
        let json = value.to_string();
        let kept = first_chars(&json, MAX_REASON_CHARS);
        let cut = if kept.len() < json.len() { "…" } else { "" };
        format!("{}{cut}", one_line(kept))
    };
    let serde_json::Value::Object(result) = result else {
        return Outcome::reject(format!(
            "the endpoint's result is not an object: {}",
            quoted(&result)
        ));
    };
    let reason = |default: &str| {
        result
            .get("reason")
            .and_then(serde_json::Value::as_str)
            .map_or_else(
                || default.to_owned(),
                |r| {
                    format!(
                        "the endpoint: {}",
                        one_line(first_chars(r, MAX_REASON_CHARS))
                    )
                },
            )
    };
    match result.get("status") {
        Some(serde_json::Value::String(status)) if status == "ok" => Outcome::Accept,
        Some(serde_json::Value::String(status)) if status == "reject" => {
            Outcome::reject(reason("the endpoint rejected the record"))
        }
        Some(serde_json::Value::String(status)) if status == "retry" => {
            let reason = reason("the endpoint asked for a retry");
            match result
                .get("retry_after")
                .and_then(serde_json::Value::as_f64)
                .filter(|s| s.is_finite() && *s >= 0.0)
                .map(|s| Duration::from_secs_f64(s.min(MAX_RETRY_AFTER.as_secs_f64())))
            {
                Some(after) => Outcome::retry_after(after, reason),
                None => Outcome::retry(reason),
            }
        }
        Some(status) => Outcome::reject(format!(
            "the endpoint answered status {}, which the batch protocol does not define (ok, retry, reject)",
            quoted(status)
        )),
        None => Outcome::reject("the endpoint's result has no status (ok, retry, reject)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_map_to_outcomes_in_order() {
        let answer = br#"{"results": [
            {"status": "ok"},
            {"status": "retry", "reason": "mailbox full", "retry_after": 2.5},
            {"status": "reject", "reason": "no such\naddress", "extra": 1},
            {"status": "retry"},
            {"status": "retry", "retry_after": 1e300},
            {"status": "retry", "reason": 7, "retry_after": "30"}
        ], "request_id": "abc"}"#;
        let outcomes = outcomes_of(answer, 6).unwrap();
        assert_eq!(
            outcomes,
            vec![
                Outcome::Accept,
                Outcome::retry_after(Duration::from_millis(2500), "the endpoint: mailbox full"),
                Outcome::reject("the endpoint: no such\\naddress"),
                Outcome::retry("the endpoint asked for a retry"),
                Outcome::retry_after(MAX_RETRY_AFTER, "the endpoint asked for a retry"),
                Outcome::retry("the endpoint asked for a retry"),
            ]
        );
    }

    #[test]
    fn an_answer_that_does_not_match_the_batch_says_why() {
        let short = outcomes_of(br#"{"results": [{"status": "ok"}]}"#, 2).unwrap_err();
        assert_eq!(
            short,
            "the batch answer has 1 results for a batch of 2 records"
        );
        let not_json = outcomes_of(b"<html>", 1).unwrap_err();
        assert!(
            not_json.starts_with(r#"the batch answer is not {"results": [...]}"#),
            "{not_json}"
        );
        let no_array = outcomes_of(br#"{"results": "ok"}"#, 1).unwrap_err();
        assert!(
            no_array.starts_with(r#"the batch answer is not {"results": [...]}"#),
            "{no_array}"
        );
        let negative = outcomes_of(
            br#"{"results": [{"status": "retry", "retry_after": -3}]}"#,
            1,
        );
        assert_eq!(
            negative.unwrap(),
            vec![Outcome::retry("the endpoint asked for a retry")]
        );
    }

    #[test]
    fn a_status_outside_the_protocol_rejects_its_record_alone() {
        let answer = br#"{"results": [
            {"status": "ok"},
            {"status": 299},
            {"status": "OK"},
            {"status": null},
            {"state": "ok"},
            "ok",
            {"status": "reject"}
        ]}"#;
        let outcomes = outcomes_of(answer, 7).unwrap();
        let undefined = |status: &str| {
            Outcome::reject(format!(
                "the endpoint answered status {status}, which the batch protocol does not define (ok, retry, reject)"
            ))
        };
        assert_eq!(
            outcomes,
            vec![
                Outcome::Accept,
                undefined("299"),
                undefined(r#""OK""#),
                undefined("null"),
                Outcome::reject("the endpoint's result has no status (ok, retry, reject)"),
                Outcome::reject(r#"the endpoint's result is not an object: "ok""#),
                Outcome::reject("the endpoint rejected the record"),
            ]
        );
    }

    #[test]
    fn records_are_grouped_by_the_topic_they_were_delivered_from() {
        let job = |topic: &str| super::super::test_job(topic, None, Default::default());
        let jobs = [
            job("emails"),
            job("emails.delay"),
            job("emails"),
            job("emails"),
            job("emails.delay"),
        ];
        // Record 2 is not sent (its payload is not JSON, say).
        let groups = by_topic(&jobs, &[0, 1, 3, 4]);
        assert_eq!(
            groups,
            vec![("emails", vec![0, 2]), ("emails.delay", vec![1, 3])]
        );
        assert_eq!(
            by_topic(&jobs, &[4, 0]),
            vec![("emails.delay", vec![0]), ("emails", vec![1])]
        );
        assert!(by_topic(&jobs, &[]).is_empty());
    }

    #[test]
    fn identities_are_split_where_the_header_would_pass_its_bound() {
        let ids: Vec<String> = ["0-1", "0-22", "1-333", "1-4444"]
            .map(str::to_owned)
            .to_vec();
        // "0-1,0-22" is 8 bytes, "1-333,1-4444" 12.
        assert_eq!(header_parts(&ids, 12), vec![0..2, 2..4]);
        assert_eq!(header_parts(&ids, 11), vec![0..2, 2..3, 3..4]);
        assert_eq!(header_parts(&ids, 100), vec![0..4]);
        assert_eq!(header_parts(&ids, 1), vec![0..1, 1..2, 2..3, 3..4]);
        assert!(header_parts(&[], 10).is_empty());
        let many: Vec<String> = (0..10_000)
            .map(|o| format!("12-{}", 9_000_000 + o))
            .collect();
        let parts = header_parts(&many, MAX_RECORDS_HEADER_BYTES);
        assert_eq!(
            parts.iter().map(ExactSizeIterator::len).sum::<usize>(),
            10_000
        );
        for part in &parts {
            assert!(many[part.clone()].join(",").len() <= MAX_RECORDS_HEADER_BYTES);
        }
    }

    #[test]
    fn an_unknown_status_is_quoted_cut_and_on_one_line() {
        let hostile = format!("{}\n{}", "x".repeat(10_000), "\u{1b}[31m");
        let answer = serde_json::json!({"results": [{"status": hostile}]}).to_string();
        let outcomes = outcomes_of(answer.as_bytes(), 1).unwrap();
        let Outcome::Reject { reason } = &outcomes[0] else {
            panic!("{outcomes:?}");
        };
        assert!(
            reason.starts_with(r#"the endpoint answered status "xxx"#),
            "{reason}"
        );
        assert!(
            reason.len() < MAX_REASON_CHARS + 120,
            "{} bytes",
            reason.len()
        );
        assert!(
            !reason.contains('\n') && !reason.contains('\u{1b}'),
            "{reason}"
        );
        let not_an_object = serde_json::json!({"results": [hostile]}).to_string();
        let outcomes = outcomes_of(not_an_object.as_bytes(), 1).unwrap();
        let Outcome::Reject { reason } = &outcomes[0] else {
            panic!("{outcomes:?}");
        };
        assert!(
            reason.len() < MAX_REASON_CHARS + 120,
            "{} bytes",
            reason.len()
        );
        assert!(reason.chars().all(|c| !c.is_control()), "{reason}");
    }

    #[test]
    fn a_long_reason_is_cut() {
        let long = "x".repeat(10_000);
        let answer = format!(r#"{{"results": [{{"status": "reject", "reason": "{long}"}}]}}"#);
        let outcomes = outcomes_of(answer.as_bytes(), 1).unwrap();
        let Outcome::Reject { reason } = &outcomes[0] else {
            panic!("{outcomes:?}");
        };
        assert!(reason.len() < MAX_REASON_CHARS + 20, "{}", reason.len());
    }
}
