//! `dlq replay`: reads the dead-letter topic by offset, replays each letter once (markers in the
//! topic say which are done), only to route topics or `--to`, and refuses what it cannot replay.

use std::collections::BTreeSet;
use std::time::Duration;

use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use worker_core::dlq::headers;

use crate::support::*;

/// A dead letter to write directly into a DLQ partition: value (none if empty) and headers.
struct Forged<'a> {
    partition: i32,
    value: &'a str,
    headers: Vec<(&'a str, &'a [u8])>,
}

/// A letter as the worker writes it: from `topic` with `reason`, plus a trace context.
fn letter<'a>(partition: i32, value: &'a str, topic: &'a str, reason: &'a str) -> Forged<'a> {
    Forged {
        partition,
        value,
        headers: vec![
            (
                "traceparent",
                b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            ),
            (headers::TOPIC, topic.as_bytes()),
            (headers::PARTITION, b"0"),
            (headers::OFFSET, b"17"),
            (headers::REASON, reason.as_bytes()),
        ],
    }
}

/// A broker's letter without the record, for `group`, pointing at `source`/0@`offset`.
fn broker_letter<'a>(source: &'a str, offset: &'a str, group: &'a str) -> Forged<'a> {
    Forged {
        partition: 0,
        value: "",
        headers: vec![
            (headers::BROKER_TOPIC, source.as_bytes()),
            (headers::BROKER_PARTITION, b"0"),
            (headers::BROKER_OFFSET, offset.as_bytes()),
            (headers::BROKER_GROUP, group.as_bytes()),
            (headers::BROKER_DELIVERY_COUNT, b"1"),
            (headers::BROKER_MESSAGE, headers::BROKER_REJECTED.as_bytes()),
        ],
    }
}

/// Writes `letters` into `dlq` (key = value); their (partition, offset)s.
async fn forge(dlq: &str, letters: &[Forged<'_>]) -> Vec<(i32, i64)> {
    let producer: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("acks", "all")
        .create()
        .expect("a producer");
    let mut out = Vec::new();
    for letter in letters {
        let mut headers = OwnedHeaders::new();
        for (key, value) in &letter.headers {
            headers = headers.insert(Header {
                key,
                value: Some(*value),
            });
        }
        let mut record: FutureRecord<'_, str, str> = FutureRecord::to(dlq)
            .partition(letter.partition)
            .key(letter.value)
            .headers(headers);
        // An empty value stands for none, as a broker's letter without its record has.
        if !letter.value.is_empty() {
            record = record.payload(letter.value);
        }
        let delivered = producer
            .send(record, Duration::from_secs(30))
            .await
            .unwrap_or_else(|(err, _)| panic!("writing to {dlq}: {err}"));
        out.push((delivered.partition, delivered.offset));
    }
    out
}

/// `setup` for a config with one noop route on `topic` (and `{topic}.dlq`), `partitions` each.
async fn setup(scratch: &Scratch, name: &str, group: &str, topic: &str, partitions: u32) -> String {
    let cfg = scratch.write(name, &config(group, topic, "handler = \"noop\""));
    let cfg = cfg.to_str().expect("utf-8 path").to_owned();
    let partitions = partitions.to_string();
    let out = share_worker(
        &["setup", "--config", &cfg, "--partitions", &partitions],
        &[],
    )
    .await;
    assert_ok(&out, "setup");
    cfg
}

/// Runs `dlq replay` on `dlq` with `extra` arguments; its stdout, after checking it succeeded and
/// printed `summary`.
async fn replay(cfg: &str, dlq: &str, extra: &[&str], summary: &str) -> String {
    let args = [
        &["dlq", "replay", "--config", cfg, "--topic", dlq][..],
        extra,
    ]
    .concat();
    let out = share_worker(&args, &[]).await;
    assert_ok(&out, &format!("{args:?}"));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(&format!("{summary} from {dlq}")),
        "{extra:?}: expected {summary:?} in:\n{stdout}\nstderr:\n{}",
        text(&out.stderr)
    );
    if extra.contains(&"--idle") {
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains("--idle is deprecated and ignored"),
            "{stderr}"
        );
    }
    stdout
}

fn summary(verb: &str, n: u64, other: u64, limit: u64, refused: u64, already: u64) -> String {
    format!(
        "{verb} {n}, skipped {} (other reason {other}, over the limit {limit}, marked skipped 0), refused {refused}, already replayed {already}, failed 0",
        other + limit
    )
}

/// The markers among `records`: (partition, letter offset) of each, after checking its shape.
fn markers(records: &[Record]) -> BTreeSet<(i32, i64)> {
    let mut out = BTreeSet::new();
    for record in records {
        let Some(kind) = record.header(headers::MARKER) else {
            continue;
        };
        assert_eq!(kind, b"replayed", "{record:?}");
        assert_eq!((&record.key, &record.value), (&None, &None), "{record:?}");
        let offset: i64 = text(
            record
                .header(headers::MARKER_OFFSET)
                .expect("a marker offset"),
        )
        .parse()
        .expect("a decimal offset");
        assert!(offset < record.offset, "{record:?}");
        assert!(
            out.insert((record.partition, offset)),
            "two markers: {record:?}"
        );
    }
    out
}

/// Five runs that match nothing or are dry runs change nothing; the sixth replays each matching
/// letter once and marks it; the seventh finds them done; the eighth takes the rest.
#[tokio::test]
async fn replays_each_letter_once_and_leaves_the_others_untouched() {
    let scratch = Scratch::new();
    let topic = unique("cli-replay");
    let cfg = setup(
        &scratch,
        "worker.toml",
        &unique("cli-replay-group"),
        &topic,
        2,
    )
    .await;
    let dlq = format!("{topic}.dlq");
    let written = forge(
        &dlq,
        &[
            letter(0, "job-1", &topic, "rejected"),
            letter(0, "job-2", &topic, "handler_error"),
            letter(0, "job-3", &topic, "rejected"),
            letter(1, "job-4", &topic, "rejected"),
            letter(1, "job-5", &topic, "handler_error"),
        ],
    )
    .await;
    let letters = records(&dlq).await;
    assert_eq!(letters.len(), 5);

    let runs: [(&[&str], String); 5] = [
        (&["--reason", "timeout"], summary("replayed", 0, 5, 0, 0, 0)),
        (&["--dry-run"], summary("would replay", 5, 0, 0, 0, 0)),
        (
            &["--reason", "rejected", "--dry-run"],
            summary("would replay", 3, 2, 0, 0, 0),
        ),
        (
            &["--reason", "nothing", "--dry-run", "--idle", "3s"],
            summary("would replay", 0, 5, 0, 0, 0),
        ),
        (
            &["--limit", "1", "--dry-run"],
            summary("would replay", 1, 0, 4, 0, 0),
        ),
    ];
    for (args, expected) in &runs {
        let stdout = replay(&cfg, &dlq, args, expected).await;
        if args.contains(&"--dry-run") && !args.contains(&"nothing") && !args.contains(&"--limit") {
            let (p, o) = written[0];
            assert!(
                stdout.contains(&format!(
                    "would replay {dlq}/{p}@{o} to {topic} (reason rejected)"
                )),
                "{stdout}"
            );
        }
        assert_eq!(records(&dlq).await, letters, "{args:?} changed the DLQ");
        assert!(
            records(&topic).await.is_empty(),
            "{args:?} wrote to {topic}"
        );
    }

    replay(
        &cfg,
        &dlq,
        &["--reason", "rejected"],
        &summary("replayed", 3, 2, 0, 0, 0),
    )
    .await;
    let replayed = records(&topic).await;
    let mut values: Vec<_> = replayed.iter().map(Record::value_text).collect();
    values.sort();
    assert_eq!(values, ["job-1", "job-3", "job-4"]);
    for record in &replayed {
        assert_eq!(record.key, record.value, "the key is kept");
        assert_eq!(record.header("share.replay.count"), Some(&b"1"[..]));
        assert_eq!(
            record.header("traceparent"),
            Some(&b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"[..])
        );
        assert!(
            record
                .headers
                .iter()
                .all(|(k, _)| !k.starts_with("share.dlq.")),
            "{record:?}"
        );
    }
    let dlq_now = records(&dlq).await;
    assert_eq!(dlq_now.len(), 8, "five letters and three markers");
    let rejected: BTreeSet<_> = [written[0], written[2], written[3]].into();
    assert_eq!(markers(&dlq_now), rejected);

    replay(
        &cfg,
        &dlq,
        &["--reason", "rejected"],
        &summary("replayed", 0, 2, 0, 0, 3),
    )
    .await;
    assert_eq!(records(&topic).await.len(), 3, "nothing replayed twice");
    assert_eq!(records(&dlq).await, dlq_now, "no marker written twice");

    replay(&cfg, &dlq, &[], &summary("replayed", 2, 0, 0, 0, 3)).await;
    assert_eq!(records(&topic).await.len(), 5);
    assert_eq!(markers(&records(&dlq).await).len(), 5);
}

/// `share.dlq.topic` is whatever the writer of the DLQ put there: only route topics are followed;
/// `--to` names the target instead.
/// Only letters of the configuration's routes are replayed, `--to` or not: a worker's letter
/// naming another topic (or none), and a forged broker letter pointing at a record of another
/// topic or written for another group, are refused and counted; nothing is copied.
#[tokio::test]
async fn only_letters_of_the_routes_are_replayed_and_to_only_changes_where_they_go() {
    let scratch = Scratch::new();
    let topic = unique("cli-replay-route");
    let other = unique("cli-replay-other");
    let group = unique("cli-replay-group");
    let cfg = setup(&scratch, "worker.toml", &group, &topic, 1).await;
    setup(
        &scratch,
        "other.toml",
        &unique("cli-replay-group"),
        &other,
        1,
    )
    .await;
    // A record of another topic that a forged broker letter points at.
    let secret = forge(&other, &[letter(0, "secret", &other, "none")]).await[0];
    let secret_offset = secret.1.to_string();
    let dlq = format!("{topic}.dlq");
    let mut binary_target = letter(0, "binary-target", &topic, "rejected");
    binary_target.headers[1].1 = &[0xff, 0xfe, b'\n'];
    let mut no_target = letter(0, "no-target", &topic, "rejected");
    no_target.headers.remove(1);
    let mut binary_reason = letter(0, "binary-reason", &topic, "rejected");
    binary_reason.headers[4].1 = &[0xc3, 0x28];
    let written = forge(
        &dlq,
        &[
            letter(0, "elsewhere", &other, "rejected"),
            binary_target,
            no_target,
            binary_reason,
            broker_letter(&other, &secret_offset, &group),
            broker_letter(&topic, &secret_offset, "someone-elses-group"),
        ],
    )
    .await;

    let refusals = |stdout: &str| {
        let at = |i: usize| format!("refused {dlq}/0@{}: ", written[i].1);
        for line in [
            format!(
                "{}share.dlq.topic names \"{other}\", which is not a route topic",
                at(0)
            ),
            format!("{}share.dlq.topic names \"\u{fffd}\u{fffd}\\n\"", at(1)),
            format!("{}it has no share.dlq.topic header", at(2)),
            format!(
                "{}__dlq.errors.topic names \"{other}\", which is not a route topic",
                at(4)
            ),
            format!(
                "{}a broker's letter of the group \"someone-elses-group\"",
                at(5)
            ),
        ] {
            assert!(stdout.contains(&line), "no {line:?} in:\n{stdout}");
        }
    };
    let stdout = replay(&cfg, &dlq, &[], &summary("replayed", 1, 0, 0, 5, 0)).await;
    refusals(&stdout);
    let replayed = records(&topic).await;
    assert_eq!(replayed.len(), 1);
    assert_eq!(replayed[0].value_text(), "binary-reason");

    // The DLQ itself and missing topics are no targets.
    for (to, error) in [
        (dlq.as_str(), "that is the dead-letter topic being replayed"),
        ("cli-replay-missing-topic", "the topic does not exist"),
    ] {
        let out = share_worker(
            &[
                "dlq", "replay", "--config", &cfg, "--topic", &dlq, "--to", to,
            ],
            &[],
        )
        .await;
        assert!(!out.status.success(), "--to {to} succeeded");
        assert!(text(&out.stderr).contains(error), "{}", text(&out.stderr));
    }

    // `--to` sends a route's letter elsewhere, and refuses the same letters as before.
    forge(&dlq, &[letter(0, "to-other", &topic, "rejected")]).await;
    let stdout = replay(
        &cfg,
        &dlq,
        &["--to", &other],
        &summary("replayed", 1, 0, 0, 5, 1),
    )
    .await;
    refusals(&stdout);
    let values: Vec<_> = records(&other)
        .await
        .iter()
        .map(Record::value_text)
        .collect();
    assert_eq!(
        values,
        ["secret", "to-other"],
        "only the route's letter went to {other}"
    );
    assert_eq!(
        records(&topic).await.len(),
        1,
        "nothing more went to {topic}"
    );
}

/// A truncated letter or one whose record did not decode would not republish the original record.
#[tokio::test]
async fn truncated_and_undecodable_letters_are_refused() {
    let scratch = Scratch::new();
    let topic = unique("cli-replay-bad");
    let cfg = setup(
        &scratch,
        "worker.toml",
        &unique("cli-replay-group"),
        &topic,
        1,
    )
    .await;
    let dlq = format!("{topic}.dlq");
    let mut truncated = letter(0, "truncated", &topic, "handler_error");
    truncated.headers.push((headers::TRUNCATED, b"true"));
    truncated.headers.push((headers::ORIGINAL_SIZE, b"2000000"));
    let mut record = letter(0, "raw record bytes", &topic, "decode");
    record.headers.push((headers::UNDECODABLE, b"record"));
    let mut batch = letter(0, "", &topic, "decode");
    batch.headers.push((headers::UNDECODABLE, b"batch"));
    let written = forge(
        &dlq,
        &[
            truncated,
            record,
            batch,
            letter(0, "fine", &topic, "handler_error"),
        ],
    )
    .await;

    let stdout = replay(&cfg, &dlq, &[], &summary("replayed", 1, 0, 0, 3, 0)).await;
    for (i, why) in [
        "its value was cut to fit the dead-letter topic (from 2000000 bytes)",
        "the record did not decode: its value holds the raw encoded record",
        "the record's batch did not decode: nothing of the record was recovered",
    ]
    .iter()
    .enumerate()
    {
        let line = format!("refused {dlq}/0@{}: {why}", written[i].1);
        assert!(stdout.contains(&line), "no {line:?} in:\n{stdout}");
    }
    // Naming the target changes nothing for them.
    replay(
        &cfg,
        &dlq,
        &["--to", &topic],
        &summary("replayed", 0, 0, 0, 3, 1),
    )
    .await;
    let replayed = records(&topic).await;
    assert_eq!(replayed.len(), 1);
    assert_eq!(replayed[0].value_text(), "fine");
    assert_eq!(markers(&records(&dlq).await), [written[3]].into());
}

/// rdkafka panics on a header name that is not UTF-8; such a letter is refused, quietly.
#[tokio::test]
async fn a_header_name_that_is_not_utf8_is_refused_without_a_panic() {
    let scratch = Scratch::new();
    let topic = unique("cli-replay-name");
    let cfg = setup(
        &scratch,
        "worker.toml",
        &unique("cli-replay-group"),
        &topic,
        1,
    )
    .await;
    let dlq = format!("{topic}.dlq");
    let offset = produce_raw(&dlq, &topic, b"\xff\xfeplaceholder").await;
    forge(&dlq, &[letter(0, "fine", &topic, "rejected")]).await;

    let args = ["dlq", "replay", "--config", &cfg, "--topic", &dlq];
    let out = share_worker(&args, &[]).await;
    assert_ok(&out, "dlq replay");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    let line = format!("refused {dlq}/0@{offset}: a header name is not UTF-8");
    assert!(stdout.contains(&line), "no {line:?} in:\n{stdout}");
    assert!(
        stdout.contains(&summary("replayed", 1, 0, 0, 1, 0)),
        "{stdout}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(records(&topic).await.len(), 1);
}

/// Writes one letter naming `target` whose second header is called `name` (any bytes) straight
/// over the protocol, as rdkafka cannot: its offset in partition 0 of `dlq`.
async fn produce_raw(dlq: &str, target: &str, name: &[u8]) -> i64 {
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{
        ApiKey, ProduceRequest, ProduceResponse, RequestHeader, ResponseHeader, TopicName,
    };
    use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const VERSION: i16 = 9;
    // A placeholder of the same length as `name`, swapped for it once encoded.
    let placeholder = "#".repeat(name.len());
    let mut headers = kafka_protocol::indexmap::IndexMap::new();
    headers.insert(
        StrBytes::from_string(headers::TOPIC.to_owned()),
        Some(Bytes::from(target.to_owned())),
    );
    headers.insert(
        StrBytes::from_string(placeholder.clone()),
        Some(Bytes::from_static(b"value")),
    );
    let record = Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: -1,
        // Now: a record older than the topic's 7-day retention is deleted by the broker's next
        // retention check, which may come before the replay reads it.
        timestamp: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after the epoch")
            .as_millis() as i64,
        key: None,
        value: Some(Bytes::from_static(b"odd header")),
        headers,
    };
    let mut batch = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut batch,
        [&record],
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .expect("encoding the batch");
    let at = batch
        .windows(name.len())
        .position(|w| w == placeholder.as_bytes())
        .expect("the placeholder in the batch");
    batch[at..at + name.len()].copy_from_slice(name);
    // The CRC-32C covers everything after itself (attributes on, from byte 21).
    let crc = crc32c::crc32c(&batch[21..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());

    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_string(dlq.to_owned())))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(batch.freeze())),
                ]),
        ]);
    let header = RequestHeader::default()
        .with_request_api_key(ApiKey::Produce as i16)
        .with_request_api_version(VERSION)
        .with_correlation_id(1)
        .with_client_id(Some(StrBytes::from_static_str("cli-replay-test")));
    let mut body = BytesMut::new();
    header
        .encode(&mut body, ProduceRequest::header_version(VERSION))
        .expect("encoding the header");
    request
        .encode(&mut body, VERSION)
        .expect("encoding the request");
    let mut stream = tokio::net::TcpStream::connect(bootstrap())
        .await
        .expect("connecting to the broker");
    stream
        .write_all(&(body.len() as i32).to_be_bytes())
        .await
        .expect("writing");
    stream.write_all(&body).await.expect("writing");
    let size = stream.read_i32().await.expect("reading the response size");
    let mut response = vec![0; usize::try_from(size).expect("a size")];
    stream
        .read_exact(&mut response)
        .await
        .expect("reading the response");
    let mut response = Bytes::from(response);
    ResponseHeader::decode(&mut response, ProduceResponse::header_version(VERSION))
        .expect("a response header");
    let response = ProduceResponse::decode(&mut response, VERSION).expect("a produce response");
    let partition = &response.responses[0].partition_responses[0];
    assert_eq!(partition.error_code, 0, "{response:?}");
    partition.base_offset
}

/// A record back-dated two days by its producer and dead-lettered now is a letter written now:
/// the dashboard lists it under "written since 1h", and its own time is kept in a header.
#[tokio::test]
async fn a_back_dated_record_is_listed_by_the_time_it_was_dead_lettered() {
    let scratch = Scratch::new();
    let topic = unique("cli-replay-backdated");
    let port = reserve_port();
    let route =
        "handler = \"exec\"\ncommand = [\"sh\", \"-c\", \"exit 2\"]\nreject-exit-codes = [2]";
    let text = config(&unique("cli-replay-backdated-group"), &topic, route).replace(
        "[dlq]",
        &format!("[ui]\nlisten = \"127.0.0.1:{port}\"\n\n[dlq]"),
    );
    let cfg = scratch.write("worker.toml", &text);
    let cfg = cfg.to_str().expect("utf-8 path");
    assert_ok(
        &share_worker(&["setup", "--config", cfg, "--partitions", "1"], &[]).await,
        "setup",
    );
    let two_days_ago = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_millis() as i64
        - 2 * 24 * 3_600_000;
    let producer: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create()
        .expect("a producer");
    producer
        .send(
            FutureRecord::<str, str>::to(&topic)
                .payload("back-dated")
                .timestamp(two_days_ago),
            Duration::from_secs(30),
        )
        .await
        .unwrap_or_else(|(err, _)| panic!("producing: {err}"));
    let stats = run_until_idle(&scratch, cfg).await;
    assert_eq!(count(&stats, "dlq"), 1, "{stats}");

    let dlq = format!("{topic}.dlq");
    let letters = records(&dlq).await;
    assert_eq!(letters.len(), 1);
    let written = letters[0].timestamp.expect("a timestamp");
    assert!(
        written > two_days_ago + 24 * 3_600_000,
        "written at {written}"
    );
    assert_eq!(
        letters[0].header(headers::RECORD_TIMESTAMP),
        Some(two_days_ago.to_string().as_bytes())
    );

    let _ui = spawn(&["ui", "--config", cfg], &scratch.0.join("ui.log"));
    let page =
        crate::support::wait_ok(&format!("http://127.0.0.1:{port}/ui/dlq/{dlq}?since=1h")).await;
    assert!(
        page.contains("data-partition=\"0\" data-offset=\"0\""),
        "the letter is not listed under since=1h:\n{page}"
    );
}

/// A broker's letter without the record is only headers: anyone who can write the DLQ writes one
/// naming a record of a route that was handled long ago, in the configured group. Following its
/// offset would replay that record a second time, so it is refused, and nothing is written,
/// unless the operator says that only the brokers write the DLQ (`--follow-broker-offsets`).
#[tokio::test]
async fn a_header_only_broker_letter_is_not_followed_to_its_offset() {
    let scratch = Scratch::new();
    let topic = unique("cli-replay-headers-only");
    let group = unique("cli-replay-headers-only-group");
    let cfg = setup(&scratch, "worker.toml", &group, &topic, 1).await;
    // A job of the route, handled long ago: the forged letter points at it.
    let job = Forged {
        partition: 0,
        value: "paid-once",
        headers: vec![("h", b"1")],
    };
    let handled = forge(&topic, &[job]).await[0];
    let handled_offset = handled.1.to_string();
    let dlq = format!("{topic}.dlq");
    let forged = forge(&dlq, &[broker_letter(&topic, &handled_offset, &group)]).await[0];
    let dlq_before = records(&dlq).await;

    let refusal = format!(
        "refused {dlq}/{}@{}: a broker's letter without the record",
        forged.0, forged.1
    );
    for (args, verb) in [(&["--dry-run"][..], "would replay"), (&[], "replayed")] {
        let stdout = replay(&cfg, &dlq, args, &summary(verb, 0, 0, 0, 1, 0)).await;
        assert!(
            stdout.contains(&refusal),
            "{args:?}: no {refusal:?} in:\n{stdout}"
        );
        assert!(
            stdout.contains(&format!("{topic}/0@{handled_offset}"))
                && stdout.contains("--follow-broker-offsets"),
            "{args:?}: the refusal names the record it points at and how to follow it:\n{stdout}"
        );
        assert_eq!(records(&topic).await.len(), 1, "{args:?} copied the record");
        assert_eq!(records(&dlq).await, dlq_before, "{args:?} wrote to {dlq}");
    }

    // Said by the operator, the pointer is followed: the original, read by offset, is replayed.
    replay(
        &cfg,
        &dlq,
        &["--follow-broker-offsets"],
        &summary("replayed", 1, 0, 0, 0, 0),
    )
    .await;
    let all = records(&topic).await;
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!(all[1].value_text(), "paid-once");
    assert_eq!(
        all[1].header("h"),
        Some(&b"1"[..]),
        "read by offset, headers and all"
    );
    assert_eq!(all[1].header("share.replay.count"), Some(&b"1"[..]));
}

/// `setup` creates the dead-letter topic with `message.timestamp.type = LogAppendTime`, so a
/// letter's time is the broker's, whatever its writer claims: a letter forged two days old is
/// listed by when it was appended. An existing dead-letter topic with the producer's time is
/// left as it is, and `setup` says so with the command that changes it.
#[tokio::test]
async fn setup_gives_the_dead_letter_topic_the_brokers_time() {
    use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
    use rdkafka::client::DefaultClientContext;

    let scratch = Scratch::new();
    let topic = unique("cli-replay-append-time");
    setup(
        &scratch,
        "worker.toml",
        &unique("cli-replay-append-time-group"),
        &topic,
        1,
    )
    .await;
    let dlq = format!("{topic}.dlq");
    let admin: AdminClient<DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create()
        .expect("an admin client");
    let timestamp_type = async |topic: &str| {
        let described = admin
            .describe_configs(
                [&ResourceSpecifier::Topic(topic)],
                &AdminOptions::new().request_timeout(Some(Duration::from_secs(30))),
            )
            .await
            .expect("describing the topic's configs");
        let resource = described[0].as_ref().expect("the topic's configs");
        resource
            .get("message.timestamp.type")
            .and_then(|e| e.value.clone())
            .expect("message.timestamp.type")
    };
    assert_eq!(timestamp_type(&dlq).await, "LogAppendTime");
    assert_eq!(
        timestamp_type(&topic).await,
        "CreateTime",
        "route topics keep the producer's time"
    );

    let two_days_ago = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_millis() as i64
        - 2 * 24 * 3_600_000;
    let producer: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create()
        .expect("a producer");
    producer
        .send(
            FutureRecord::<str, str>::to(&dlq)
                .payload("forged-old")
                .headers(OwnedHeaders::new().insert(Header {
                    key: headers::TOPIC,
                    value: Some(topic.as_bytes()),
                }))
                .timestamp(two_days_ago),
            Duration::from_secs(30),
        )
        .await
        .unwrap_or_else(|(err, _)| panic!("producing: {err}"));
    let letters = records(&dlq).await;
    assert_eq!(letters.len(), 1);
    let at = letters[0].timestamp.expect("a timestamp");
    assert!(
        at > two_days_ago + 24 * 3_600_000,
        "the letter shows its writer's time {at}, not the broker's"
    );
    // A dead-letter topic that exists with the producer's time is not changed, and said.
    let other = unique("cli-replay-create-time");
    let other_dlq = format!("{other}.dlq");
    tests::create_topic(&other_dlq, 1)
        .await
        .expect("creating the dead-letter topic");
    let cfg = scratch.write(
        "other.toml",
        &config(
            &unique("cli-replay-create-time-group"),
            &other,
            "handler = \"noop\"",
        ),
    );
    let out = share_worker(
        &[
            "setup",
            "--config",
            cfg.to_str().expect("utf-8 path"),
            "--partitions",
            "1",
        ],
        &[],
    )
    .await;
    assert_ok(&out, "setup over an existing dead-letter topic");
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(&format!(
            "# warning: topic {other_dlq}: message.timestamp.type is CreateTime, not LogAppendTime"
        )) && stdout.contains(&format!(
            "kafka-configs.sh --alter --entity-type topics --entity-name {other_dlq} --add-config message.timestamp.type=LogAppendTime"
        )),
        "{stdout}"
    );
    assert_eq!(
        timestamp_type(&other_dlq).await,
        "CreateTime",
        "setup changed it"
    );
}
