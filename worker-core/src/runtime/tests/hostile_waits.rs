//! Producers who write `share.not-before` and delay-topic headers against the worker, in virtual
//! time: records due in year 9999, more waits than the worker holds, floods of far records in a
//! delay topic and forged provenance. The records behind them keep flowing, nothing is archived,
//! and no letter goes anywhere but the route's own dead-letter topic.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::support::{handler, run_until};
use crate::Outcome;
use crate::delay::headers::{self, format_not_before};
use crate::dlq::DlqReason;
use crate::runtime::Worker;
use crate::testing::{MemoryBroker, MemoryDlq, ProducedRecord};

fn later(wait: Duration) -> String {
    format_not_before(SystemTime::now() + wait)
}

/// When each record ran, by payload, since the test began.
type Ran = Arc<Mutex<Vec<(String, Duration)>>>;

fn recording(
    ran: Ran,
    start: Instant,
) -> impl Fn(crate::Job) -> std::future::Ready<Outcome> + Clone {
    move |job: crate::Job| {
        let value =
            String::from_utf8_lossy(job.payload().map(|p| &p[..]).unwrap_or_default()).into_owned();
        ran.lock().unwrap().push((value, start.elapsed()));
        std::future::ready(Outcome::Accept)
    }
}

/// Eight records due in year 9999 and six due in an hour ahead of fifty: at concurrency 4 with no
/// delay topic the fifty are handled at once; the year-9999 ones are dead-lettered on arrival
/// (reason `not_before`, the header's value in the error); of the six, two wait in the worker
/// (`max_held`) and the others, released for want of room, are dead-lettered at their last
/// attempt, never archived.
#[tokio::test(start_paused = true)]
async fn far_and_surplus_waits_never_take_the_room_of_the_records_behind_them() {
    let broker = MemoryBroker::builder()
        .lock_duration(Duration::from_secs(2))
        .build();
    for i in 0..8 {
        broker.produce_record(
            "sms",
            ProducedRecord::new(format!("far-{i}"))
                .header(headers::NOT_BEFORE, "9999-12-31T00:00:00Z"),
        );
    }
    for i in 0..6 {
        broker.produce_record(
            "sms",
            ProducedRecord::new(format!("hour-{i}"))
                .header(headers::NOT_BEFORE, later(Duration::from_secs(3_600))),
        );
    }
    for i in 0..50 {
        broker.produce("sms", format!("now-{i}"));
    }
    let ran: Ran = Arc::default();
    let start = Instant::now();
    let dlq = MemoryDlq::new();
    let worker = Worker::builder(broker.member("a"))
        .route("sms", handler(recording(ran.clone(), start)))
        .concurrency(4)
        .dlq(dlq.clone())
        .build()
        .unwrap();
    let (r, d) = (ran.clone(), dlq.clone());
    let summary = run_until(
        worker,
        Duration::from_secs(10),
        "the fifty and the letters",
        move || r.lock().unwrap().len() == 50 && d.len() == 12,
    )
    .await;
    let ran = ran.lock().unwrap().clone();
    assert!(
        ran.iter().all(|(value, _)| value.starts_with("now-")),
        "{ran:?}"
    );
    let letters = dlq.letters();
    let far: Vec<_> = letters
        .iter()
        .filter(|l| {
            l.delivery
                .value
                .as_ref()
                .is_some_and(|p| p.starts_with(b"far-"))
        })
        .collect();
    assert_eq!(far.len(), 8);
    for letter in &far {
        assert_eq!(letter.reason, DlqReason::NotBefore);
        assert!(
            letter.error.contains("\"9999-12-31T00:00:00Z\""),
            "{}",
            letter.error
        );
        assert_eq!(
            letter.delivery.delivery_count, 1,
            "dead-lettered on arrival"
        );
    }
    let surplus: Vec<_> = letters
        .iter()
        .filter(|l| {
            l.delivery
                .value
                .as_ref()
                .is_some_and(|p| p.starts_with(b"hour-"))
        })
        .collect();
    assert_eq!(surplus.len(), 4, "two of six wait in the worker");
    for letter in &surplus {
        assert_eq!(letter.reason, DlqReason::NotBefore);
        assert_eq!(
            letter.delivery.delivery_count, 4,
            "at the last handler attempt"
        );
    }
    assert_eq!(
        broker.counts().archived,
        dlq.len(),
        "only records with a letter were archived (rejected after it)"
    );
    assert_eq!(summary.dead_letters.not_before, 12);
    assert_eq!(summary.delayed, 2);
}

/// Records in the delay topic whose headers the worker did not write: an origin that is another
/// topic, an origin that is no topic name, none at all, and an attempt count past the delivery
/// limit. Each is an undecodable record of the delay topic's route: its letter goes to that
/// route (`share.dlq.topic` = `jobs`, reason `decode`), keeps the forged headers for people to see,
/// and the worker goes on with the next record.
#[tokio::test(start_paused = true)]
async fn forged_delay_headers_are_not_obeyed_and_land_in_the_route_s_dead_letters() {
    let broker = MemoryBroker::builder()
        .lock_duration(Duration::from_secs(2))
        .build();
    let now = format_not_before(SystemTime::now());
    let copy = |value: &str, origin: Option<&str>, attempt: &str| {
        let mut record = ProducedRecord::new(value.to_owned())
            .header(headers::NOT_BEFORE, now.clone())
            .header(headers::ATTEMPT, attempt.to_owned())
            .header(headers::ORIGIN_PARTITION, "0")
            .header(headers::ORIGIN_OFFSET, "3");
        if let Some(origin) = origin {
            record = record.header(headers::ORIGIN_TOPIC, origin.to_owned());
        }
        record
    };
    broker.produce_record("jobs.delay", copy("payments", Some("payments"), "0"));
    broker.produce_record("jobs.delay", copy("space", Some("x y"), "0"));
    broker.produce_record("jobs.delay", copy("none", None, "0"));
    broker.produce_record("jobs.delay", copy("attempts", Some("jobs"), "65535"));
    broker.produce_record("jobs.delay", copy("genuine", Some("jobs"), "1"));
    broker.produce("jobs", "next");
    let ran: Ran = Arc::default();
    let dlq = MemoryDlq::new();
    let worker = Worker::builder(broker.member("a"))
        .route("jobs", handler(recording(ran.clone(), Instant::now())))
        .delay(broker.clone())
        .dlq(dlq.clone())
        .build()
        .unwrap();
    let (r, d) = (ran.clone(), dlq.clone());
    run_until(
        worker,
        Duration::from_secs(30),
        "the letters and the rest",
        move || r.lock().unwrap().len() == 2 && d.len() == 4,
    )
    .await;
    let mut ran: Vec<_> = ran.lock().unwrap().iter().map(|(v, _)| v.clone()).collect();
    ran.sort();
    assert_eq!(
        ran,
        ["genuine", "next"],
        "the genuine copy and the next record ran"
    );
    for letter in dlq.letters() {
        let value = String::from_utf8_lossy(letter.delivery.value.as_deref().unwrap_or_default())
            .into_owned();
        assert_eq!(letter.reason, DlqReason::Decode, "{value}");
        assert_eq!(
            &*letter.delivery.id.topic, "jobs",
            "{value}: the route's own letter"
        );
        assert!(
            letter.error.contains("jobs.delay"),
            "{value}: {}",
            letter.error
        );
        let kept = |key: &str| letter.delivery.headers.iter().any(|h| &*h.key == key);
        assert!(
            kept(headers::ATTEMPT),
            "{value}: forged headers kept as provenance"
        );
        if value != "none" {
            assert!(kept(headers::ORIGIN_TOPIC), "{value}");
        }
    }
}

/// A flood of 2,000 records due in ten days in the delay topic does not make a real delayed job
/// among them late: far records are held only in half of `max_held` and the rest are written
/// back with the delay topic resting between, so the worker reads through the flood every half
/// minute or so (about a fetch per rest) and holds the real job from `max_hold` before it is due.
/// Writing back stays paced: the real job is written back a few times, not in a loop.
#[tokio::test(start_paused = true)]
async fn a_flood_of_far_delay_records_does_not_make_a_due_job_late() {
    let broker = flood_broker();
    let flood = 2_000;
    let record = |value: String, due: String| {
        ProducedRecord::new(value)
            .header(headers::NOT_BEFORE, due)
            .header(headers::ATTEMPT, "0")
            .header(headers::ORIGIN_TOPIC, "jobs")
            .header(headers::ORIGIN_PARTITION, "0")
            .header(headers::ORIGIN_OFFSET, "0")
    };
    for i in 0..flood {
        broker.produce_record(
            "jobs.delay",
            record(
                format!("far-{i}"),
                later(Duration::from_secs(10 * 24 * 3_600)),
            ),
        );
    }
    let due = Duration::from_secs(240);
    broker.produce_record("jobs.delay", record("real".into(), later(due)));
    let ran: Ran = Arc::default();
    let worker = delaying_worker(&broker, recording(ran.clone(), Instant::now()));
    let r = ran.clone();
    run_until(
        worker,
        Duration::from_secs(600),
        "the real job",
        move || !r.lock().unwrap().is_empty(),
    )
    .await;
    let ran = ran.lock().unwrap().clone();
    let (value, at) = &ran[0];
    assert_eq!(value, "real");
    assert!(
        *at >= due - Duration::from_millis(500) && *at <= due + Duration::from_secs(2),
        "ran at {at:?}, due at {due:?}"
    );
    let copies = broker.records("jobs.delay").len();
    // Each pass rewrites at most the flood: a handful of passes in four minutes.
    assert!(
        copies < flood * 12,
        "{copies} records in the delay topic: the write-backs spin"
    );
}

/// A flood of 20,000 records due in ten days, enqueued on the route ahead of three real jobs due
/// in two minutes: the flood is parked in the farthest delay topic (`jobs.delay.days`), the real
/// jobs in the nearest, and they run when due. With one delay topic for every wait they stood
/// behind the whole flood, each pass over it taking longer than `max_hold`, and ran minutes late.
#[tokio::test(start_paused = true)]
async fn a_flood_due_in_days_is_parked_apart_and_jobs_due_in_minutes_run_on_time() {
    let broker = flood_broker();
    let flood = 20_000;
    let far = later(Duration::from_secs(10 * 24 * 3_600));
    for i in 0..flood {
        broker.produce_record(
            "jobs",
            ProducedRecord::new(format!("far-{i}")).header(headers::NOT_BEFORE, far.clone()),
        );
    }
    let due = Duration::from_secs(120);
    for i in 0..3 {
        broker.produce_record(
            "jobs",
            ProducedRecord::new(format!("real-{i}")).header(headers::NOT_BEFORE, later(due)),
        );
    }
    let ran: Ran = Arc::default();
    let worker = delaying_worker(&broker, recording(ran.clone(), Instant::now()));
    let r = ran.clone();
    run_until(
        worker,
        Duration::from_secs(600),
        "the real jobs",
        move || r.lock().unwrap().len() >= 3,
    )
    .await;
    let ran = ran.lock().unwrap().clone();
    assert_eq!(ran.len(), 3, "only the real jobs ran: {ran:?}");
    for (value, at) in &ran {
        assert!(value.starts_with("real-"), "{value} ran");
        assert!(
            *at >= due - Duration::from_millis(500) && *at <= due + Duration::from_secs(2),
            "{value} ran at {at:?}, due at {due:?}"
        );
    }
    // The flood is offsets 0..20,000 of the route, the real jobs the three after.
    let parked = |topic: &str, real: bool| {
        origin_offsets(&broker, topic)
            .filter(|offset| (*offset >= flood as i64) == real)
            .count()
    };
    assert_eq!(
        parked("jobs.delay", false),
        0,
        "no far record in the near tier"
    );
    assert_eq!(parked("jobs.delay.hours", false), 0);
    assert!(parked("jobs.delay.days", false) >= flood);
    // The real jobs wait in the nearest tier, written back at most once per rest each (the far
    // records hold the half of `max_held` a far record may take).
    let near = parked("jobs.delay", true);
    assert!(
        (3..=3 * 130).contains(&near),
        "{near} copies of the real jobs"
    );
}

/// The route offset each copy in delay topic `topic` was moved from.
fn origin_offsets(broker: &MemoryBroker, topic: &str) -> impl Iterator<Item = i64> {
    let topic = topic.to_owned();
    let broker = broker.clone();
    broker
        .records(&topic)
        .into_iter()
        .filter_map(move |(partition, offset, _)| {
            let headers = broker.record_headers(&topic, partition, offset)?;
            let origin = headers
                .iter()
                .rev()
                .find(|h| &*h.key == headers::ORIGIN_OFFSET)?;
            std::str::from_utf8(origin.value.as_deref()?)
                .ok()?
                .parse()
                .ok()
        })
}

/// A job due in two hours waits in the hours tier, moves to the nearest tier within its last
/// hour and runs when due. Meanwhile it is held for `max_hold` between write-backs: written about
/// once a minute, not in a loop.
#[tokio::test(start_paused = true)]
async fn a_job_due_in_hours_comes_down_the_tiers_and_runs_when_due() {
    let broker = MemoryBroker::builder()
        .lock_duration(Duration::from_secs(5))
        .fetch_wait(Duration::from_secs(10))
        .build();
    let due = Duration::from_secs(2 * 3_600);
    broker.produce_record(
        "jobs",
        ProducedRecord::new("real").header(headers::NOT_BEFORE, later(due)),
    );
    // Woken by the handler: two hours of polling a condition would cost more than the test.
    let (done, ran) = tokio::sync::oneshot::channel();
    let done = Arc::new(Mutex::new(Some(done)));
    let start = Instant::now();
    let worker = delaying_worker(&broker, move |job: crate::Job| {
        let value = job.payload().map(|p| p.to_vec()).unwrap_or_default();
        if let Some(done) = done.lock().unwrap().take() {
            let _ = done.send((value, start.elapsed()));
        }
        std::future::ready(Outcome::Accept)
    });
    let shutdown = worker.shutdown_handle();
    let run = tokio::spawn(worker.run());
    let (value, at) = tokio::time::timeout(due + Duration::from_secs(600), ran)
        .await
        .expect("the real job ran within ten minutes of its due time")
        .expect("the handler kept its sender");
    shutdown.shutdown();
    run.await.expect("the worker task").expect("the worker");
    let at = &at;
    assert_eq!(value, b"real");
    assert!(
        *at >= due - Duration::from_millis(500) && *at <= due + Duration::from_secs(2),
        "ran at {at:?}, due at {due:?}"
    );
    let copies = |topic: &str| origin_offsets(&broker, topic).count();
    let (hours, near) = (copies("jobs.delay.hours"), copies("jobs.delay"));
    // An hour in each tier, one copy per max_hold.
    assert!(
        (55..=65).contains(&hours),
        "{hours} copies in the hours tier"
    );
    assert!(
        (55..=65).contains(&near),
        "{near} copies in the nearest tier"
    );
    assert_eq!(copies("jobs.delay.days"), 0);
}

/// A broker with 5 s locks that answers an empty fetch after 50 ms.
fn flood_broker() -> MemoryBroker {
    MemoryBroker::builder()
        .lock_duration(Duration::from_secs(5))
        .fetch_wait(Duration::from_millis(50))
        .build()
}

/// A worker of route `jobs` with `broker`'s delay topics and a one-minute `max_hold`.
fn delaying_worker(
    broker: &MemoryBroker,
    run: impl Fn(crate::Job) -> std::future::Ready<Outcome> + Clone + Send + 'static,
) -> Worker<crate::testing::MemoryMember> {
    Worker::builder(broker.member("a"))
        .route("jobs", handler(run))
        .delay(broker.clone())
        .max_hold(Duration::from_secs(60))
        .build()
        .unwrap()
}
