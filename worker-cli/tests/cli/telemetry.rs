//! The telemetry listener (`/healthz`, `/readyz`, `/metrics`) and OTLP export.

mod exposed;
mod listener;

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::process::Command;

use crate::fake_http::{Exports, Seen, collector, serve};
use crate::support::*;

/// One sample of the Prometheus text: name, labels, value.
pub(crate) type Sample = (String, std::collections::BTreeMap<String, String>, f64);

pub(crate) fn parse_prometheus(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let value: f64 = value.parse().ok()?;
            let (name, labels) = match series.split_once('{') {
                Some((name, labels)) => (name, labels.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split(',')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.trim_matches('"').to_owned()))
                .collect();
            Some((name.to_owned(), labels, value))
        })
        .collect()
}

/// The sum of `name` over the samples whose labels include `with`; `None` when there is none.
pub(crate) fn metric(samples: &[Sample], name: &str, with: &[(&str, &str)]) -> Option<f64> {
    let mut matching = samples
        .iter()
        .filter(|(n, labels, _)| {
            n == name
                && with
                    .iter()
                    .all(|(k, v)| labels.get(*k).map(String::as_str) == Some(*v))
        })
        .peekable();
    matching.peek()?;
    Some(matching.map(|(_, _, v)| v).sum())
}

/// A real run scraped every 50 ms: accepts, a 429 retried after its hold, a 400 rejected into
/// the DLQ, a handler slower than the 1 s lock (renewed). Every metric the run can move moves as
/// documented; lost locks, failed renewals and acknowledgements, and dead-letter failures cannot
/// be provoked on a healthy broker and are checked against the in-memory broker in the runtime's
/// telemetry tests.
#[tokio::test]
async fn metrics_move_during_a_run_with_retries_and_dead_letters() {
    let scratch = Scratch::new();
    let topic = unique("cli-telemetry");
    let group = unique("cli-telemetry-group");
    let port = reserve_port();
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("binding");
    let addr = listener.local_addr().expect("an address");
    let server = tokio::spawn(serve(listener, Arc::new(Mutex::new(Seen::default()))));
    let route = format!("handler = \"http\"\nurl = \"http://{addr}/send\"\ntimeout = \"10s\"");
    let text_cfg = config(&group, &topic, &route)
        .replace("lock-duration = \"20s\"", "lock-duration = \"1s\"")
        .replace(
            "[dlq]",
            &format!(
                "[telemetry]\nlisten = \"127.0.0.1:{port}\"\nlag-interval = \"200ms\"\n\n[dlq]"
            ),
        );
    let cfg = scratch.write("worker.toml", &text_cfg);
    let cfg = cfg.to_str().unwrap();
    let lines = ["ok-1", "ok-2", "slow-1", "bad-1", "sleepy-1"];
    setup_and_produce(&scratch, cfg, &topic, 2, &lines, &[]).await;

    let mut run = Command::new(BIN);
    run.args(["run", "--config", cfg, "--exit-when-idle", "5s"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let mut child = run.spawn().expect("starting share-worker run");
    let base = format!("http://127.0.0.1:{port}");
    assert_eq!(wait_ok(&format!("{base}/healthz")).await, "ok\n");
    assert_eq!(wait_ok(&format!("{base}/readyz")).await, "ready\n");

    let (mut max_in_flight, mut max_held, mut max_lag) = (0.0_f64, 0.0_f64, 0.0_f64);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let samples = loop {
        let text = wait_ok(&format!("{base}/metrics")).await;
        let samples = parse_prometheus(&text);
        let gauge = |name| metric(&samples, name, &[]).unwrap_or(0.0);
        max_in_flight = max_in_flight.max(gauge("share_worker_records_in_flight"));
        max_held = max_held.max(gauge("share_worker_records_held"));
        let lag = metric(&samples, "share_worker_group_lag", &[("topic", &topic)]);
        max_lag = max_lag.max(lag.unwrap_or(0.0));
        let accepted = metric(
            &samples,
            "share_worker_records_completed_total",
            &[("outcome", "accept")],
        );
        // The broker's lag reaches 0 when it has applied the acknowledgements, a moment before
        // the worker has their answers and counts them: wait for those too.
        let acked = metric(
            &samples,
            "share_worker_acks_total",
            &[("topic", &topic), ("ack", "accept")],
        );
        if accepted == Some(4.0) && acked == Some(4.0) && max_lag > 0.0 && lag == Some(0.0) {
            break samples;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the run did not settle: {text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let t = ("topic", topic.as_str());
    let get = |name: &str, with: &[(&str, &str)]| metric(&samples, name, with).unwrap_or(0.0);
    let all = format!("{samples:#?}");

    assert_eq!(
        get("share_worker_records_fetched_total", &[t]),
        6.0,
        "{all}"
    );
    assert_eq!(get("share_worker_delivery_count_count", &[t]), 6.0, "{all}");
    assert_eq!(
        get("share_worker_delivery_count_sum", &[t]),
        7.0,
        "slow-1 came twice"
    );
    for (outcome, n) in [("accept", 4.0), ("retry", 1.0), ("reject", 1.0)] {
        let with = [t, ("outcome", outcome)];
        assert_eq!(
            get("share_worker_records_completed_total", &with),
            n,
            "{outcome}: {all}"
        );
        assert_eq!(
            get("share_worker_handler_duration_seconds_count", &with),
            n,
            "{outcome}"
        );
    }
    let accept_time = get(
        "share_worker_handler_duration_seconds_sum",
        &[t, ("outcome", "accept")],
    );
    assert!(accept_time >= 1.5, "sleepy-1 took 1.5 s: {accept_time}");
    for (ack, n) in [("accept", 4.0), ("release", 1.0), ("reject", 1.0)] {
        assert_eq!(
            get("share_worker_acks_total", &[t, ("ack", ack)]),
            n,
            "{ack}: {all}"
        );
    }
    assert_eq!(
        get(
            "share_worker_dlq_writes_total",
            &[t, ("reason", "rejected")]
        ),
        1.0,
        "{all}"
    );
    assert!(
        get("share_worker_lock_renewals_total", &[t]) >= 1.0,
        "{all}"
    );
    assert!(
        get(
            "share_worker_fetch_duration_seconds_count",
            &[("result", "ok")]
        ) >= 1.0
    );
    assert!(max_in_flight >= 1.0, "in flight never above 0");
    assert!(max_held >= 1.0, "the 429 was never held: {all}");
    assert!(max_lag >= 1.0);
    assert_eq!(get("share_worker_records_in_flight", &[]), 0.0, "{all}");
    assert_eq!(get("share_worker_records_held", &[]), 0.0, "{all}");
    assert_eq!(
        metric(&samples, "share_worker_group_lag", &[t, ("group", &group)]),
        Some(0.0)
    );
    assert_eq!(get("share_worker_partitions_assigned", &[]), 2.0, "{all}");
    for quiet in [
        "share_worker_locks_lost_total",
        "share_worker_ack_failures_total",
        "share_worker_possible_duplicates_total",
        "share_worker_dlq_failures_total",
    ] {
        assert_eq!(get(quiet, &[]), 0.0, "{quiet}: {all}");
    }

    let status = tokio::time::timeout(DEADLINE, child.wait())
        .await
        .expect("the run exits when idle")
        .expect("waiting for share-worker");
    assert!(status.success(), "{status}");
    server.abort();
}

/// Records produced with a `traceparent` are processed in spans of that trace, exported over
/// OTLP/HTTP with the documented attributes (metrics too); the dead letter points at the span of
/// the attempt that failed it, and a replay carries that on.
#[tokio::test]
async fn spans_and_metrics_reach_an_otlp_collector_and_dead_letters_keep_the_trace() {
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
    use prost::Message as _;

    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const PARENT: &str = "00f067aa0ba902b7";
    let scratch = Scratch::new();
    let topic = unique("cli-otlp");
    let group = unique("cli-otlp-group");
    let exports = Exports::default();
    let otlp = TcpListener::bind("127.0.0.1:0").await.expect("binding");
    let otlp_addr = otlp.local_addr().expect("an address");
    let collector = tokio::spawn(collector(otlp, exports.clone()));
    let http = TcpListener::bind("127.0.0.1:0").await.expect("binding");
    let http_addr = http.local_addr().expect("an address");
    let server = tokio::spawn(serve(http, Arc::new(Mutex::new(Seen::default()))));
    let route = format!("handler = \"http\"\nurl = \"http://{http_addr}/send\"");
    let text_cfg = config(&group, &topic, &route).replace(
        "[dlq]",
        &format!(
            "[telemetry]\notlp-endpoint = \"http://{otlp_addr}\"\notlp-interval = \"200ms\"\nservice-name = \"otlp-test\"\n\n[dlq]"
        ),
    );
    let cfg = scratch.write("worker.toml", &text_cfg);
    let cfg = cfg.to_str().unwrap();
    let traceparent = format!("traceparent=00-{TRACE}-{PARENT}-01");
    let headers = ["--header", &traceparent, "--header", "tracestate=vendor=7"];
    setup_and_produce(&scratch, cfg, &topic, 1, &["ok-1", "bad-1"], &headers).await;
    let stats = run_until_idle(&scratch, cfg).await;
    assert_eq!((count(&stats, "accepted"), count(&stats, "dlq")), (1, 1));

    // The run flushed its spans on exit.
    let exported = exports.lock().expect("the exports lock").clone();
    let mut spans = Vec::new();
    let mut metric_names = std::collections::BTreeSet::new();
    for (path, body) in &exported {
        match path.as_str() {
            "/v1/traces" => {
                let request = ExportTraceServiceRequest::decode(&body[..]).expect("OTLP traces");
                for resource in request.resource_spans {
                    let service = resource
                        .resource
                        .iter()
                        .flat_map(|r| &r.attributes)
                        .find(|kv| kv.key == "service.name")
                        .and_then(|kv| kv.value.clone())
                        .and_then(|v| v.value);
                    assert_eq!(service, Some(Any::StringValue("otlp-test".into())));
                    spans.extend(resource.scope_spans.into_iter().flat_map(|s| s.spans));
                }
            }
            "/v1/metrics" => {
                let request = ExportMetricsServiceRequest::decode(&body[..]).expect("OTLP metrics");
                for resource in request.resource_metrics {
                    for scope in resource.scope_metrics {
                        metric_names.extend(scope.metrics.into_iter().map(|m| m.name));
                    }
                }
            }
            other => panic!("unexpected export path {other}"),
        }
    }
    for name in [
        "share_worker.records.fetched",
        "share_worker.records.completed",
        "share_worker.handler.duration",
        "share_worker.dlq.writes",
    ] {
        assert!(
            metric_names.contains(name),
            "{name} not exported: {metric_names:?}"
        );
    }
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let attribute = |span: &opentelemetry_proto::tonic::trace::v1::Span, key: &str| {
        span.attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.clone())
            .and_then(|v| v.value)
    };
    let processed: Vec<_> = spans.iter().filter(|s| s.name == "process").collect();
    assert_eq!(processed.len(), 2, "{spans:#?}");
    let mut reject_span = None;
    for span in &processed {
        assert_eq!(hex(&span.trace_id), TRACE);
        assert_eq!(hex(&span.parent_span_id), PARENT);
        assert_eq!(span.kind, 5, "SPAN_KIND_CONSUMER");
        assert_eq!(
            attribute(span, "messaging.system"),
            Some(Any::StringValue("kafka".into()))
        );
        assert_eq!(
            attribute(span, "messaging.destination.name"),
            Some(Any::StringValue(topic.clone()))
        );
        assert_eq!(
            attribute(span, "messaging.consumer.group.name"),
            Some(Any::StringValue(group.clone()))
        );
        assert_eq!(
            attribute(span, "messaging.destination.partition.id"),
            Some(Any::IntValue(0))
        );
        assert_eq!(
            attribute(span, "share_worker.delivery_count"),
            Some(Any::IntValue(1))
        );
        match attribute(span, "share_worker.outcome") {
            Some(Any::StringValue(o)) if o == "accept" => {}
            Some(Any::StringValue(o)) if o == "reject" => reject_span = Some(hex(&span.span_id)),
            other => panic!("outcome {other:?}"),
        }
    }
    let reject_span = reject_span.expect("the rejected record's span");

    // The dead letter continues from the failed attempt's span, with the original tracestate.
    let dlq = format!("{topic}.dlq");
    let letter = read_headers(&dlq, 1).await.remove(0);
    let carried = format!("00-{TRACE}-{reject_span}-01");
    assert_eq!(header_value(&letter, "traceparent"), Some(carried.clone()));
    assert_eq!(
        header_value(&letter, "tracestate").as_deref(),
        Some("vendor=7")
    );

    // A replay puts it back on its topic with the same context.
    let out = share_worker(&["dlq", "replay", "--config", cfg, "--topic", &dlq], &[]).await;
    assert_ok(&out, "dlq replay");
    let records = read_headers(&topic, 3).await;
    assert_eq!(header_value(&records[2], "traceparent"), Some(carried));
    collector.abort();
    server.abort();
}

/// A worker whose process is frozen for 2.5 s (SIGSTOP: every thread stops, as when every runtime
/// thread is blocked) with records in flight under a 1 s lock: once it runs again, `/healthz`
/// still answers 200 but names the stall and how late the loop was, and
/// `share_worker_dispatcher_stalls_total` counts it.
#[tokio::test]
async fn a_frozen_worker_reports_the_stall_in_healthz_and_metrics() {
    let scratch = Scratch::new();
    let topic = unique("cli-stall");
    let group = unique("cli-stall-group");
    let port = reserve_port();
    let text_cfg = config(&group, &topic, "handler = \"noop\"\ndelay = \"20s\"")
        .replace("lock-duration = \"20s\"", "lock-duration = \"1s\"")
        .replace(
            "[dlq]",
            &format!("[telemetry]\nlisten = \"127.0.0.1:{port}\"\n\n[dlq]"),
        );
    let cfg = scratch.write("worker.toml", &text_cfg);
    let cfg = cfg.to_str().unwrap();
    setup_and_produce(&scratch, cfg, &topic, 1, &["a", "b"], &[]).await;

    let mut child = Command::new(BIN)
        .args(["run", "--config", cfg])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("starting share-worker run");
    let pid = child.id().expect("a running child").to_string();
    let base = format!("http://127.0.0.1:{port}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let samples = parse_prometheus(&wait_ok(&format!("{base}/metrics")).await);
        if metric(&samples, "share_worker_records_in_flight", &[]).unwrap_or(0.0) >= 2.0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the records never came"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(wait_ok(&format!("{base}/healthz")).await, "ok\n");

    let signal = |sig: &str| {
        let status = std::process::Command::new("kill")
            .args([sig, &pid])
            .status()
            .expect("kill");
        assert!(status.success(), "kill {sig} {pid}");
    };
    signal("-STOP");
    // The stimulus: the whole process stays frozen this long.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    signal("-CONT");

    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let body = loop {
        let body = wait_ok(&format!("{base}/healthz")).await;
        if body.contains("dispatcher stalls") {
            break body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "healthz never named the stall: {body:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(body.starts_with("ok\ndispatcher stalls: "), "{body:?}");
    assert!(
        body.contains("late: something blocked every runtime thread"),
        "{body:?}"
    );
    let samples = parse_prometheus(&wait_ok(&format!("{base}/metrics")).await);
    let stalls = metric(&samples, "share_worker_dispatcher_stalls_total", &[]).unwrap_or(0.0);
    assert!(stalls >= 1.0, "{stalls} stalls counted");
    let late = metric(
        &samples,
        "share_worker_dispatcher_lateness_seconds_sum",
        &[],
    )
    .expect("the lateness histogram");
    assert!(late >= 1.0, "late by {late} s");
    child.kill().await.expect("stopping the worker");
}

/// Before the first record: every counter a dashboard or a `rate()` alert reads is already in
/// `/metrics`, at 0, for the route's topic (the Prometheus convention), not missing until its
/// first event.
#[tokio::test]
async fn counters_are_exported_at_zero_before_the_first_record() {
    let scratch = Scratch::new();
    let topic = unique("cli-zero");
    let group = unique("cli-zero-group");
    let port = reserve_port();
    let text_cfg = config(&group, &topic, "handler = \"noop\"").replace(
        "[dlq]",
        &format!("[telemetry]\nlisten = \"127.0.0.1:{port}\"\n\n[dlq]"),
    );
    let cfg = scratch.write("worker.toml", &text_cfg);
    let cfg = cfg.to_str().unwrap();
    assert_ok(
        &share_worker(&["setup", "--config", cfg], &[]).await,
        "setup",
    );
    let mut run = Command::new(BIN);
    run.args(["run", "--config", cfg])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let _child = run.spawn().expect("starting share-worker run");
    let base = format!("http://127.0.0.1:{port}");
    assert_eq!(wait_ok(&format!("{base}/readyz")).await, "ready\n");
    let samples = parse_prometheus(&wait_ok(&format!("{base}/metrics")).await);
    let t = ("topic", topic.as_str());
    let zero = |name: &str, with: &[(&str, &str)]| {
        assert_eq!(
            metric(&samples, name, with),
            Some(0.0),
            "{name} {with:?} at 0 in {samples:#?}"
        );
    };
    zero("share_worker_records_fetched_total", &[t]);
    for outcome in [
        "accept",
        "retry",
        "reject",
        "undecodable",
        "panic",
        "timeout",
    ] {
        zero(
            "share_worker_records_completed_total",
            &[t, ("outcome", outcome)],
        );
    }
    zero("share_worker_lock_renewals_total", &[t]);
    zero("share_worker_locks_lost_total", &[t]);
    zero("share_worker_possible_duplicates_total", &[t]);
    zero(
        "share_worker_lock_renewal_failures_total",
        &[t, ("error", "lock_lost")],
    );
    for ack in ["accept", "release", "reject"] {
        zero("share_worker_acks_total", &[t, ("ack", ack)]);
        zero(
            "share_worker_ack_failures_total",
            &[t, ("ack", ack), ("error", "session_lost")],
        );
    }
    for reason in [
        "handler_error",
        "decode",
        "timeout",
        "panic",
        "delivery_limit",
        "rejected",
    ] {
        zero("share_worker_dlq_writes_total", &[t, ("reason", reason)]);
    }
    zero("share_worker_dlq_failures_total", &[]);
    zero("share_worker_dispatcher_stalls_total", &[]);
}

/// A new group over a 5,000-record backlog: its lag is in `/metrics` two seconds into the run,
/// before the group has settled anything (worked out from the offsets), and within the backlog.
#[tokio::test]
async fn the_lag_of_a_new_group_is_known_two_seconds_into_a_run() {
    const BACKLOG: usize = 5_000;
    let scratch = Scratch::new();
    let topic = unique("cli-lag");
    let group = unique("cli-lag-group");
    let port = reserve_port();
    let text_cfg = config(&group, &topic, "handler = \"noop\"\ndelay = \"20ms\"").replace(
        "[dlq]",
        &format!("[telemetry]\nlisten = \"127.0.0.1:{port}\"\n\n[dlq]"),
    );
    let cfg = scratch.write("worker.toml", &text_cfg);
    let cfg = cfg.to_str().expect("utf-8 path");
    assert_ok(
        &share_worker(&["setup", "--config", cfg, "--partitions", "2"], &[]).await,
        "setup",
    );
    let producer = tests::producer(&[]).expect("a producer");
    let values: Vec<String> = (0..BACKLOG).map(|i| format!("job-{i}")).collect();
    tests::produce(&producer, &topic, None, &values)
        .await
        .expect("producing");

    let started = tokio::time::Instant::now();
    let log = scratch.0.join("worker.log");
    let worker = spawn(&["run", "--config", cfg], &log);
    let url = format!("http://127.0.0.1:{port}/metrics");
    let lag = loop {
        if let Some((200, text)) = get(&url).await
            && let Some(lag) = metric(
                &parse_prometheus(&text),
                "share_worker_group_lag",
                &[("topic", &topic)],
            )
        {
            break lag;
        }
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "no lag in /metrics two seconds into the run"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!("lag {lag} after {:?}", started.elapsed());
    assert!(
        lag > 0.0 && lag <= BACKLOG as f64,
        "the lag {lag} is within the backlog of {BACKLOG}"
    );
    assert!(terminate(worker).await.success(), "a clean stop");
}
