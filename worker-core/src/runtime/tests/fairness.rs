//! Routes share the slots: a route whose handlers are stuck cannot starve the others; and a
//! route's own job timeout.

use std::time::Duration;

use tokio::time::Instant;

use super::support::{handler, run_until, wait_until};
use crate::Route;
use crate::runtime::Worker;
use crate::testing::{MemoryBroker, RecordState};
use crate::{ErrorKind, Outcome};

/// One topic's handler is stuck for 10 s with plenty of its records waiting; the other topic's
/// records are all handled meanwhile, because the stuck route never holds more than its share.
#[tokio::test(start_paused = true)]
async fn a_stuck_route_does_not_starve_the_other_topics() {
    let broker = MemoryBroker::builder()
        .lock_duration(Duration::from_secs(30))
        .build();
    for i in 0..100 {
        broker.produce("stuck", i.to_string());
    }
    for i in 0..50 {
        broker.produce("fast", i.to_string());
    }
    let start = Instant::now();
    let worker = Worker::builder(broker.member("w"))
        .route(
            "stuck",
            handler(|_| async {
                tokio::time::sleep(Duration::from_secs(10)).await;
                Outcome::Accept
            }),
        )
        .route("fast", handler(|_| async { Outcome::Accept }))
        .concurrency(8)
        .shutdown_grace(Duration::from_secs(30))
        .build()
        .unwrap();
    let shutdown = worker.shutdown_handle();
    let run = tokio::spawn(worker.run());
    let b = broker.clone();
    wait_until(Duration::from_secs(60), "the fast topic", move || {
        (0..50).all(|i| b.record_state("fast", 0, i) == Some(RecordState::Acknowledged))
    })
    .await;
    let took = Instant::now() - start;
    assert!(
        took < Duration::from_secs(10),
        "the fast topic took {took:?}: it waited for the stuck route"
    );
    shutdown.shutdown();
    let summary = run.await.unwrap().unwrap();
    assert!(summary.accepted >= 50, "{summary:?}");
    assert_eq!(broker.stats().lock_expiries, 0);
}

/// A route's own timeout cuts its handlers off sooner than the worker's job timeout.
#[tokio::test(start_paused = true)]
async fn a_route_timeout_overrides_the_job_timeout() {
    let broker = MemoryBroker::builder()
        .lock_duration(Duration::from_secs(30))
        .delivery_limit(3)
        .build();
    broker.produce("sms", "0");
    broker.produce("webhooks", "0");
    let slow = || {
        handler(|_| async {
            tokio::time::sleep(Duration::from_secs(3)).await;
            Outcome::Accept
        })
    };
    let worker = Worker::builder(broker.member("w"))
        .add_route(Route::new("sms", slow()).timeout(Duration::from_secs(1)))
        .route("webhooks", slow())
        .job_timeout(Duration::from_secs(10))
        .max_attempts(1)
        .build()
        .unwrap();
    let b = broker.clone();
    let summary = run_until(worker, Duration::from_secs(60), "both records", move || {
        let counts = b.counts();
        counts.acknowledged + counts.archived == 2
    })
    .await;
    assert_eq!((summary.accepted, summary.timed_out), (1, 1), "{summary:?}");
    assert_eq!(summary.dead_letters.timeout, 1);
}

#[test]
fn a_route_timeout_must_be_a_duration_and_a_topic_has_one_route() {
    let broker = MemoryBroker::new();
    let accept = || handler(|_| async { Outcome::Accept });
    let err = Worker::builder(broker.member("w"))
        .add_route(Route::new("sms", accept()).timeout(Duration::ZERO))
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config);
    assert!(
        err.message()
            .contains("route `sms`: `timeout`: expected a timeout above 0"),
        "{err}"
    );
    let err = Worker::builder(broker.member("w"))
        .route("sms", accept())
        .route("sms", accept())
        .build()
        .unwrap_err();
    assert!(
        err.message()
            .contains("route `sms`: the topic has two routes"),
        "{err}"
    );
}
