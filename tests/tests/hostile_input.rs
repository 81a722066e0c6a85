//! A hostile producer (RELIABILITY scenario 14) against the real broker: between good records, a
//! batch whose header keys are not UTF-8, a gzip batch with one such record between two good
//! ones, and a gzip batch that inflates past the source's batch cap. Good records (the good
//! neighbours in the mixed batch included, headers intact) are handled exactly once; every bad
//! offset lands in the DLQ exactly once (reason `decode`, saying whether the record or its batch
//! did not decode), the handler never sees one, and nothing is archived without a letter: the DLQ
//! offsets and the handled offsets are every offset of the topic, and the group's lag reaches 0.
//!
//! The broker checks CRCs itself, so a batch with a bad CRC cannot be stored: that case is covered
//! by the decoder's unit tests and fuzz harness only.
//!
//! Each scenario runs twice: with fetches of up to 500 records (whole batches acquired) and with
//! fetches of 2 records, so the broker acquires parts of batches (`record_limit` cuts them) and
//! the same bad batch arrives in several responses.

#[allow(dead_code)]
mod policy_support;

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use policy_support::{Ledger, Recorded, Setup, header_map, read_dlq, source_offset};
use rdkafka::Message;
use tests::{create_raw_batch_topic, produce, produce_batch, producer, run_until_drained, unique};
use tower::service_fn;
use worker_core::dlq::headers;
use worker_core::kafka::{Admin, KafkaSource};
use worker_core::source::AckKind;
use worker_core::{Job, Outcome, Worker};
use worker_kafka::test_util::{RawCompression, RawRecordSpec, encode_batch};

/// The batch cap of the source: the bomb inflates to three times this.
const MAX_BATCH_BYTES: usize = 1 << 20;
/// A header key that is not UTF-8.
const BAD_KEY: &[u8] = b"\xff\xfekey";
/// Good records before and after the bad batches.
const GOOD_EACH_SIDE: usize = 25;

/// A topic holding good records, a batch of three records with a non-UTF-8 header key, a mixed
/// gzip batch (good, bad, good), a gzip batch of three records of 1 MiB of zeros, and good records
/// again; its offsets by kind.
struct HostileTopic {
    setup: Setup,
    /// The offsets of the records with non-UTF-8 header keys (a batch of three, and one in the
    /// mixed batch), with each record's value.
    bad_header: Vec<(i64, Vec<u8>)>,
    /// The good records of the mixed batch, with their `trace-id` header.
    mixed_good: Vec<(i64, &'static str)>,
    /// The offsets of the batch that inflates past the cap.
    bomb: Vec<i64>,
    /// The offset after the last record.
    end: i64,
}

impl HostileTopic {
    async fn new() -> anyhow::Result<Self> {
        let admin = Admin::connect(tests::bootstrap())
            .await
            .context("connecting to the broker")?;
        let topic = unique("hostile");
        let group = unique("hostile-workers");
        create_raw_batch_topic(&topic).await?;
        admin.create_topic(&format!("{topic}.dlq"), 1, 1).await?;
        admin
            .set_group_config(&group, "share.auto.offset.reset", "earliest")
            .await?;
        admin
            .set_group_config(&group, "share.record.lock.duration.ms", "5000")
            .await?;
        let good = producer(&[("linger.ms", "5")])?;
        let before = (0..GOOD_EACH_SIDE).map(|i| format!("good-{i}"));
        produce(&good, &topic, Some(0), before).await?;

        let values: Vec<Vec<u8>> = (0..3)
            .map(|i| format!("bad-header-{i}").into_bytes())
            .collect();
        let records: Vec<RawRecordSpec> = values
            .iter()
            .enumerate()
            .map(|(i, value)| {
                let spec = RawRecordSpec::value(value.clone());
                // A good header first on one of them: one bad key spoils the whole record.
                let spec = if i == 1 {
                    spec.header("trace-id", "abc")
                } else {
                    spec
                };
                spec.header(BAD_KEY, "v")
            })
            .collect();
        let base = produce_batch(&topic, encode_batch(0, &records, RawCompression::None)?).await?;
        let mut bad_header: Vec<(i64, Vec<u8>)> = (base..).zip(values).collect();

        // A gzip batch with one bad record between two good ones, which keep their headers.
        let mixed = [
            RawRecordSpec::value("mixed-good-0").header("trace-id", "m0"),
            RawRecordSpec::value("mixed-bad").header(BAD_KEY, "v"),
            RawRecordSpec::value("mixed-good-1").header("trace-id", "m1"),
        ];
        let base = produce_batch(&topic, encode_batch(0, &mixed, RawCompression::Gzip)?).await?;
        bad_header.push((base + 1, b"mixed-bad".to_vec()));
        let mixed_good = vec![(base, "m0"), (base + 2, "m1")];

        let zeros = vec![0u8; MAX_BATCH_BYTES];
        let bomb: Vec<RawRecordSpec> = (0..3)
            .map(|_| RawRecordSpec::value(zeros.clone()))
            .collect();
        let bomb = encode_batch(0, &bomb, RawCompression::Gzip)?;
        anyhow::ensure!(bomb.len() < 64 << 10, "the bomb is small on the wire");
        let base = produce_batch(&topic, bomb).await?;
        let bomb = (base..base + 3).collect();

        let after = (GOOD_EACH_SIDE..2 * GOOD_EACH_SIDE).map(|i| format!("good-{i}"));
        produce(&good, &topic, Some(0), after).await?;
        let end = i64::try_from(2 * GOOD_EACH_SIDE + 9)?;
        Ok(Self {
            setup: Setup {
                admin,
                topic,
                group,
            },
            bad_header,
            mixed_good,
            bomb,
            end,
        })
    }

    fn bad_offsets(&self) -> BTreeSet<i64> {
        self.bad_header
            .iter()
            .map(|(o, _)| *o)
            .chain(self.bomb.iter().copied())
            .collect()
    }
}

/// Runs a worker over a [`HostileTopic`] until its lag is 0 and checks every promise.
async fn bad_batches_are_dead_lettered_once(max_poll_records: u32) -> anyhow::Result<()> {
    let hostile = HostileTopic::new().await?;
    let setup = &hostile.setup;
    let ledger = Arc::new(Ledger::default());
    let source = Recorded {
        inner: KafkaSource::builder(tests::bootstrap(), &setup.group)
            .topic(&setup.topic)
            .max_wait(Duration::from_millis(100))
            .max_batch_bytes(MAX_BATCH_BYTES)
            .build()
            .await?,
        ledger: ledger.clone(),
    };
    // Offset → the `trace-id` header of each time the handler ran on it.
    let handled = Arc::new(Mutex::new(BTreeMap::<i64, Vec<Option<String>>>::new()));
    let seen = handled.clone();
    let worker = Worker::builder(source)
        .route(
            setup.topic.as_str(),
            service_fn(move |job: Job| {
                let trace = job
                    .headers()
                    .iter()
                    .find(|h| &*h.key == "trace-id")
                    .and_then(|h| h.value.as_ref())
                    .map(|v| String::from_utf8_lossy(v).into_owned());
                seen.lock()
                    .expect("ledger")
                    .entry(job.id().offset)
                    .or_default()
                    .push(trace);
                async { Ok::<_, Infallible>(Outcome::Accept) }
            }),
        )
        .concurrency(16)
        .max_poll_records(max_poll_records)
        .dlq(setup.sink(Duration::from_secs(10))?)
        .build()?;
    let summary = run_until_drained(
        worker,
        &setup.admin,
        &setup.group,
        &setup.topic,
        Duration::from_secs(45),
    )
    .await?;

    let bad = hostile.bad_offsets();
    let letters = read_dlq(
        format!("{}.dlq", setup.topic),
        bad.len(),
        Duration::from_secs(1),
    )
    .await?;
    let mut lettered: Vec<i64> = letters
        .iter()
        .map(source_offset)
        .collect::<anyhow::Result<_>>()?;
    lettered.sort_unstable();
    assert_eq!(
        lettered,
        bad.iter().copied().collect::<Vec<_>>(),
        "every bad offset in the DLQ exactly once"
    );
    for letter in &letters {
        let h = header_map(letter);
        let offset = source_offset(letter)?;
        assert_eq!(h[headers::TOPIC], setup.topic);
        assert_eq!(h[headers::PARTITION], "0");
        assert_eq!(h[headers::GROUP], setup.group);
        assert_eq!(h[headers::REASON], "decode", "offset {offset}: {h:?}");
        assert_eq!(
            h[headers::DELIVERY_COUNT],
            "1",
            "offset {offset}: never released"
        );
        if let Some((_, value)) = hostile.bad_header.iter().find(|(o, _)| *o == offset) {
            assert_eq!(
                h[headers::UNDECODABLE],
                headers::UNDECODABLE_RECORD,
                "offset {offset}"
            );
            assert!(
                h[headers::ERROR].contains("not UTF-8"),
                "offset {offset}: {h:?}"
            );
            let raw = letter.payload().context("the raw record")?;
            assert!(
                raw.windows(value.len()).any(|w| w == value),
                "offset {offset}: the raw record holds its value"
            );
            assert!(
                raw.windows(BAD_KEY.len()).any(|w| w == BAD_KEY),
                "offset {offset}: and its bad header key"
            );
        } else {
            assert_eq!(
                h[headers::UNDECODABLE],
                headers::UNDECODABLE_BATCH,
                "offset {offset}"
            );
            assert!(
                h[headers::ERROR].contains("inflates past the cap"),
                "offset {offset}: {h:?}"
            );
            assert_eq!(letter.payload(), None, "offset {offset}: nothing recovered");
        }
        assert_eq!(
            ledger.acks_of(offset),
            [AckKind::Reject],
            "offset {offset}: rejected once its letter was written"
        );
    }

    let handled = handled.lock().expect("ledger");
    let twice: Vec<_> = handled.iter().filter(|(_, runs)| runs.len() != 1).collect();
    assert!(twice.is_empty(), "handled more than once: {twice:?}");
    let called_on_bad: Vec<_> = handled.keys().filter(|o| bad.contains(o)).collect();
    assert!(
        called_on_bad.is_empty(),
        "the handler ran on bad offsets {called_on_bad:?}"
    );
    for offset in handled.keys() {
        assert_eq!(
            ledger.acks_of(*offset),
            [AckKind::Accept],
            "offset {offset}"
        );
    }
    // Nothing archived without a letter: every offset was either handled or dead-lettered.
    let settled: BTreeSet<i64> = handled.keys().copied().chain(lettered).collect();
    assert_eq!(
        settled,
        (0..hostile.end).collect(),
        "every offset handled or dead-lettered"
    );
    for (offset, trace) in &hostile.mixed_good {
        assert_eq!(
            handled.get(offset),
            Some(&vec![Some((*trace).to_owned())]),
            "the good neighbour at {offset} handled once, its header intact"
        );
    }
    assert_eq!(handled.len(), 2 * GOOD_EACH_SIDE + 2);
    assert_eq!(summary.dead_letters.decode, bad.len() as u64, "{summary:?}");
    assert_eq!(summary.dlq_written, bad.len() as u64, "{summary:?}");
    assert_eq!(
        summary.accepted,
        2 * GOOD_EACH_SIDE as u64 + 2,
        "{summary:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_header_and_bomb_batches_go_to_the_dlq_once_and_good_neighbours_are_handled_once()
-> anyhow::Result<()> {
    bad_batches_are_dead_lettered_once(500).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_batches_cut_across_fetches_of_two_records_still_go_to_the_dlq_once()
-> anyhow::Result<()> {
    bad_batches_are_dead_lettered_once(2).await
}
