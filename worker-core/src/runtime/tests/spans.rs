//! The `record` span: one per record, with where it came from and how it ended.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

use super::support::{handler, seq, wait_until};
use crate::Outcome;
use crate::runtime::Worker;
use crate::testing::MemoryBroker;

type Fields = HashMap<String, String>;

/// Records every span's name and fields.
#[derive(Clone, Default)]
struct Recorder {
    spans: Arc<Mutex<Vec<Fields>>>,
}

struct Visitor<'a>(&'a mut Fields);

impl Visit for Visitor<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, attrs: &Attributes<'_>) -> Id {
        let mut fields = Fields::new();
        fields.insert("name".into(), attrs.metadata().name().into());
        attrs.record(&mut Visitor(&mut fields));
        let mut spans = self.spans.lock().unwrap();
        spans.push(fields);
        Id::from_u64(spans.len() as u64)
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        let mut spans = self.spans.lock().unwrap();
        if let Some(fields) = spans.get_mut(span.into_u64() as usize - 1) {
            values.record(&mut Visitor(fields));
        }
    }

    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, _: &Event<'_>) {}
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[tokio::test(start_paused = true)]
async fn every_record_gets_a_span_with_its_outcome_and_duration() {
    let recorder = Recorder::default();
    let _default = tracing::subscriber::set_default(recorder.clone());

    let broker = MemoryBroker::new();
    broker.create_topic("t", 2);
    broker.produce("t", "0");
    broker.produce("t", "1");
    let worker = Worker::builder(broker.member("w"))
        .route(
            "t",
            handler(|job| async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                match seq(&job) {
                    0 => Outcome::Accept,
                    _ => Outcome::reject("bad payload"),
                }
            }),
        )
        .build()
        .unwrap();
    let shutdown = worker.shutdown_handle();
    let run = tokio::spawn(worker.run());
    let b = broker.clone();
    wait_until(Duration::from_secs(5), "settled", move || {
        let c = b.counts();
        c.acknowledged + c.archived == 2
    })
    .await;
    shutdown.shutdown();
    run.await.unwrap().unwrap();

    let spans = recorder.spans.lock().unwrap();
    let mut records: Vec<&Fields> = spans.iter().filter(|s| s["name"] == "record").collect();
    records.sort_by_key(|s| s["partition"].clone());
    assert_eq!(records.len(), 2);
    for (span, (partition, outcome)) in records.iter().zip([("0", "accept"), ("1", "reject")]) {
        assert_eq!(span["topic"], "t");
        assert_eq!(span["partition"], partition);
        assert_eq!(span["offset"], "0");
        assert_eq!(span["delivery_count"], "1");
        assert_eq!(span["outcome"], outcome);
        assert_eq!(span["duration_ms"], "50");
    }
}
