//! Batch requests of the http handler (`batch = { … }`) against a bulk endpoint stand-in.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

use crate::fake_http::read_request;
use crate::support::*;

/// What the bulk endpoint saw.
#[derive(Default, Debug)]
struct Bulk {
    /// Per request: its content type, its `x-share-records` header, and the items' `n`.
    requests: Vec<(String, String, Vec<i64>)>,
    /// How often each item was answered "ok".
    taken: HashMap<i64, usize>,
    /// JSON-array requests being answered now, and the most at once.
    json_in_flight: usize,
    json_most: usize,
}

/// A bulk API: refuses items whose `n` ends in 3 or 7 (status "retry") and takes the rest; its
/// first answer has one result too few. Each answer takes 30 ms.
async fn bulk_endpoint(listener: TcpListener, seen: Arc<Mutex<Bulk>>) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            return;
        };
        let seen = seen.clone();
        tokio::spawn(async move {
            let mut buffer = Vec::new();
            while let Some((head, body)) = read_request(&mut stream, &mut buffer).await {
                let header = |name: &str| {
                    head.lines()
                        .find_map(|l| l.strip_prefix(name))
                        .map(|v| v.trim().to_owned())
                        .unwrap_or_default()
                };
                let content_type = header("content-type:");
                let items: Vec<serde_json::Value> = if content_type == "application/x-ndjson" {
                    body.split(|b| *b == b'\n')
                        .filter(|line| !line.is_empty())
                        .map(|line| serde_json::from_slice(line).expect("one JSON value a line"))
                        .collect()
                } else {
                    serde_json::from_slice(&body).expect("a JSON array")
                };
                let numbers: Vec<i64> = items
                    .iter()
                    .map(|i| i["n"].as_i64().unwrap_or(-1))
                    .collect();
                let json = content_type == "application/json";
                if json {
                    let mut seen = seen.lock().unwrap();
                    seen.json_in_flight += 1;
                    seen.json_most = seen.json_most.max(seen.json_in_flight);
                }
                tokio::time::sleep(std::time::Duration::from_millis(30)).await;
                let results: Vec<serde_json::Value> = {
                    let mut seen = seen.lock().unwrap();
                    let first = seen.requests.is_empty();
                    seen.requests
                        .push((content_type, header("x-share-records:"), numbers.clone()));
                    let mut results: Vec<serde_json::Value> = numbers
                        .iter()
                        .map(|n| match n % 10 {
                            3 | 7 => serde_json::json!({"status": "retry", "reason": format!("item {n} refused")}),
                            _ => {
                                if !first {
                                    *seen.taken.entry(*n).or_default() += 1;
                                }
                                serde_json::json!({"status": "ok"})
                            }
                        })
                        .collect();
                    if first {
                        results.pop();
                    }
                    results
                };
                let answer = serde_json::json!({ "results": results }).to_string();
                let response = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{answer}",
                    answer.len()
                );
                let written = stream.write_all(response.as_bytes()).await;
                if json {
                    seen.lock().unwrap().json_in_flight -= 1;
                }
                if written.is_err() {
                    return;
                }
            }
        });
    }
}

/// Two batch routes (a JSON array and NDJSON) to one bulk endpoint that refuses the items ending
/// in 3 or 7: those are retried on their own and dead-lettered after their last attempt, every
/// other item is taken exactly once, a payload that is not JSON is rejected without being sent,
/// the endpoint's first answer, one result short, retries its whole batch, and the route's
/// `concurrency` bounds its requests in flight.
#[tokio::test]
async fn batch_requests_take_per_item_results_and_retry_a_mismatched_answer() {
    let scratch = Scratch::new();
    let json_topic = unique("cli-batch-json");
    let ndjson_topic = unique("cli-batch-ndjson");
    let group = unique("cli-batch-group");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/bulk", listener.local_addr().expect("address"));
    let seen = Arc::new(Mutex::new(Bulk::default()));
    tokio::spawn(bulk_endpoint(listener, seen.clone()));
    let route = |format: &str| {
        format!(
            "handler = \"http\"\nurl = \"{url}\"\nbatch = {{ max = 10, linger = \"100ms\", format = \"{format}\" }}"
        )
    };
    let text = config(&group, &json_topic, &(route("json") + "\nconcurrency = 2"))
        .replace("[retry]", "[retry]\nmax-attempts = 3")
        .replace("concurrency = 8", "concurrency = 40")
        + &format!(
            "\n[[route]]\ntopic = \"{ndjson_topic}\"\n{}\n",
            route("ndjson")
        );
    let cfg = scratch.write("worker.toml", &text);
    let cfg = cfg.to_str().expect("utf-8 path");
    let items = |from: i64| -> Vec<String> {
        (from..from + 50)
            .map(|n| format!("{{\"n\": {n}}}"))
            .collect()
    };
    let mut json_items = items(0);
    json_items.push("not json".to_owned());
    let json_items: Vec<&str> = json_items.iter().map(String::as_str).collect();
    setup_and_produce(&scratch, cfg, &json_topic, 1, &json_items, &[]).await;
    let ndjson_items = items(100);
    let ndjson_items: Vec<&str> = ndjson_items.iter().map(String::as_str).collect();
    setup_and_produce(&scratch, cfg, &ndjson_topic, 1, &ndjson_items, &[]).await;

    let (stats, log) = run_until_idle_logged(&scratch, cfg, &[]).await;
    assert!(
        log.contains("results for a batch of")
            && log.contains("retrying every record of the request"),
        "the short answer is said at warn level: {log}"
    );
    let seen = seen.lock().unwrap();
    let refused = |n: &i64| n % 10 == 3 || n % 10 == 7;
    let mut taken: Vec<i64> = seen.taken.keys().copied().collect();
    taken.sort_unstable();
    let expected: Vec<i64> = (0..50).chain(100..150).filter(|n| !refused(n)).collect();
    assert_eq!(taken, expected, "every item not refused was taken");
    assert!(
        seen.taken.values().all(|t| *t == 1),
        "an item was taken twice"
    );
    assert_eq!(count(&stats, "accepted"), 80, "{stats}");
    assert_eq!(
        count(&stats, "dlq"),
        21,
        "the 20 refused items and the payload that is not JSON: {stats}"
    );
    // A batch that holds only the payload that is not JSON sends no request.
    let batches = count(&stats, "batches");
    let requests = seen.requests.len() as u64;
    assert!(
        batches == requests || batches == requests + 1,
        "{batches} batches, {requests} requests: {stats}"
    );
    assert!(
        seen.requests.len() < 60,
        "{} requests for 100 items and their retries: not batched",
        seen.requests.len()
    );
    assert!(
        (1..=2).contains(&seen.json_most),
        "{} JSON requests in flight at once; the route allows 2",
        seen.json_most
    );
    for (content_type, records, numbers) in &seen.requests {
        assert!(numbers.len() <= 10);
        assert_eq!(records.split(',').count(), numbers.len(), "{records}");
        let ndjson = numbers.iter().all(|n| *n >= 100);
        let expected = if ndjson {
            "application/x-ndjson"
        } else {
            "application/json"
        };
        assert_eq!(content_type, expected);
    }
}

/// A bulk endpoint behind a common server's header limit: a header line longer than 8 KiB is
/// answered 431, as nginx's default buffers do; every other item is taken ("ok"). Records, per
/// request: the number of items and the length of `x-share-records`.
async fn header_limited_endpoint(
    listener: TcpListener,
    requests: Arc<Mutex<Vec<(usize, usize)>>>,
    taken: Arc<Mutex<HashMap<i64, usize>>>,
) {
    const HEADER_LINE_LIMIT: usize = 8 * 1024;
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            return;
        };
        let (requests, taken) = (requests.clone(), taken.clone());
        tokio::spawn(async move {
            let mut buffer = Vec::new();
            while let Some((head, body)) = read_request(&mut stream, &mut buffer).await {
                let records = head
                    .lines()
                    .find_map(|l| l.strip_prefix("x-share-records:"))
                    .map_or(0, |v| v.trim().len());
                let response = if head.lines().any(|l| l.len() > HEADER_LINE_LIMIT) {
                    "HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\n\r\n"
                        .to_owned()
                } else {
                    let items: Vec<serde_json::Value> =
                        serde_json::from_slice(&body).expect("a JSON array");
                    requests.lock().unwrap().push((items.len(), records));
                    let mut taken = taken.lock().unwrap();
                    for item in &items {
                        *taken.entry(item["n"].as_i64().unwrap_or(-1)).or_default() += 1;
                    }
                    let results = vec![serde_json::json!({"status": "ok"}); items.len()];
                    let answer = serde_json::json!({ "results": results }).to_string();
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{answer}",
                        answer.len()
                    )
                };
                if stream.write_all(response.as_bytes()).await.is_err() {
                    return;
                }
            }
        });
    }
}

/// Batches of up to 3,000 records, whose identities would make an `X-Share-Records` header of
/// about 20 KB, reach an endpoint that refuses header lines over 8 KiB: each batch goes as
/// several requests whose headers fit, and every record is taken exactly once, none dead-lettered.
#[tokio::test]
async fn a_batch_whose_identities_pass_a_header_limit_goes_as_several_requests() {
    let scratch = Scratch::new();
    let topic = unique("cli-batch-large");
    let group = unique("cli-batch-large-group");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/bulk", listener.local_addr().expect("address"));
    let requests = Arc::new(Mutex::new(Vec::new()));
    let taken = Arc::new(Mutex::new(HashMap::new()));
    tokio::spawn(header_limited_endpoint(
        listener,
        requests.clone(),
        taken.clone(),
    ));
    let route =
        format!("handler = \"http\"\nurl = \"{url}\"\nbatch = {{ max = 3000, linger = \"3s\" }}");
    let text = config(&group, &topic, &route).replace("concurrency = 8", "concurrency = 3000");
    let cfg = scratch.write("worker.toml", &text);
    let cfg = cfg.to_str().expect("utf-8 path");
    let items: Vec<String> = (0..3000).map(|n| format!("{{\"n\": {n}}}")).collect();
    let items: Vec<&str> = items.iter().map(String::as_str).collect();
    setup_and_produce(&scratch, cfg, &topic, 1, &items, &[]).await;

    let stats = run_until_idle(&scratch, cfg).await;
    assert_eq!(count(&stats, "accepted"), 3000, "{stats}");
    assert_eq!(count(&stats, "dlq"), 0, "{stats}");
    let taken = taken.lock().unwrap();
    assert_eq!(taken.len(), 3000, "every record reached the endpoint");
    assert!(taken.values().all(|t| *t == 1), "a record was taken twice");
    let requests = requests.lock().unwrap();
    let largest = requests.iter().map(|(items, _)| *items).max().unwrap_or(0);
    assert!(
        requests.iter().all(|(_, header)| *header <= 6 * 1024),
        "{requests:?}"
    );
    assert!(
        count(&stats, "batches") < requests.len() as u64,
        "no batch was split: {} batches, {} requests of at most {largest} records",
        count(&stats, "batches"),
        requests.len()
    );
}

/// One request a scripted bulk endpoint received.
#[derive(Clone, Debug)]
struct BulkRequest {
    path: String,
    /// `x-share-topic`.
    topic: String,
    /// `x-share-records`, split at the commas.
    records: Vec<String>,
    /// The body's items (a JSON array).
    items: Vec<serde_json::Value>,
}

/// Answers each request with what `answer` makes of it (status line, JSON body) and keeps every
/// request in `seen`.
async fn scripted_endpoint(
    listener: TcpListener,
    seen: Arc<Mutex<Vec<BulkRequest>>>,
    answer: fn(&BulkRequest) -> (&'static str, serde_json::Value),
) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            return;
        };
        let seen = seen.clone();
        tokio::spawn(async move {
            let mut buffer = Vec::new();
            while let Some((head, body)) = read_request(&mut stream, &mut buffer).await {
                let header = |name: &str| {
                    head.lines()
                        .find_map(|l| l.strip_prefix(name))
                        .map(|v| v.trim().to_owned())
                        .unwrap_or_default()
                };
                let request = BulkRequest {
                    path: head.split_whitespace().nth(1).unwrap_or("").to_owned(),
                    topic: header("x-share-topic:"),
                    records: header("x-share-records:")
                        .split(',')
                        .filter(|r| !r.is_empty())
                        .map(str::to_owned)
                        .collect(),
                    items: serde_json::from_slice(&body).expect("a JSON array"),
                };
                let (status, answer) = answer(&request);
                seen.lock().unwrap().push(request);
                let answer = answer.to_string();
                let response = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{answer}",
                    answer.len()
                );
                if stream.write_all(response.as_bytes()).await.is_err() {
                    return;
                }
            }
        });
    }
}

/// The `n` of each item of `request`.
fn numbers(request: &BulkRequest) -> Vec<i64> {
    request
        .items
        .iter()
        .map(|item| item["n"].as_i64().unwrap_or(-1))
        .collect()
}

/// The dead letters of `topic`: each one's payload `n` and its `share.dlq.error`.
async fn letters(topic: &str) -> HashMap<i64, String> {
    records(&format!("{topic}.dlq"))
        .await
        .iter()
        .map(|letter| {
            let item: serde_json::Value =
                serde_json::from_str(&letter.value_text()).expect("a JSON payload");
            let error = letter
                .header("share.dlq.error")
                .map(text)
                .unwrap_or_default();
            (item["n"].as_i64().unwrap_or(-1), error)
        })
        .collect()
}

/// Six records produced fresh and six produced to wait 5 s (they move to the route's delay topic
/// and come back from it) fill one batch of twelve: the batch goes as one request per
/// topic, each naming the topic of every record it carries (the delayed ones by where they were
/// delivered from, the delay topic), and each record gets the result the endpoint gave it —
/// "ok" for an even `n`, "reject" for an odd one.
#[tokio::test]
async fn a_batch_of_fresh_and_delayed_records_names_each_record_s_topic() {
    let scratch = Scratch::new();
    let topic = unique("cli-batch-mixed");
    let group = unique("cli-batch-mixed-group");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/bulk", listener.local_addr().expect("address"));
    let seen = Arc::new(Mutex::new(Vec::new()));
    tokio::spawn(scripted_endpoint(listener, seen.clone(), |request| {
        let results: Vec<serde_json::Value> = numbers(request)
            .iter()
            .map(|n| match n % 2 {
                0 => serde_json::json!({"status": "ok"}),
                _ => serde_json::json!({"status": "reject", "reason": format!("item {n} refused")}),
            })
            .collect();
        ("200 OK", serde_json::json!({ "results": results }))
    }));
    // The batch is sent when its twelve records have joined it: the fresh ones wait in it for
    // the delayed ones (5 s), well within the linger.
    let route =
        format!("handler = \"http\"\nurl = \"{url}\"\nbatch = {{ max = 12, linger = \"20s\" }}");
    let text = format!(
        "{}\n[delay]\nmax-hold = \"1s\"\n",
        config(&group, &topic, &route).replace("concurrency = 8", "concurrency = 40")
    );
    let cfg = scratch.write("worker.toml", &text);
    let cfg = cfg.to_str().expect("utf-8 path");
    let fresh: Vec<String> = (100..106)
        .map(|n| format!("{{\"n\": {n}, \"delayed\": false}}"))
        .collect();
    let fresh: Vec<&str> = fresh.iter().map(String::as_str).collect();
    setup_and_produce(&scratch, cfg, &topic, 1, &fresh, &[]).await;
    // Due 5 s from now: the worker, started at once, finds them due later than its 1 s
    // `max-hold` and moves them to the delay topic.
    let delayed: Vec<String> = (0..6)
        .map(|n| format!("{{\"n\": {n}, \"delayed\": true}}"))
        .collect();
    let delayed: Vec<&str> = delayed.iter().map(String::as_str).collect();
    setup_and_produce(&scratch, cfg, &topic, 1, &delayed, &["--delay", "5s"]).await;

    // Records waiting in a batch or in the delay topic are no handler call: the worker must not
    // count the 5 s as idle.
    let stats_path = scratch.0.join("stats.json");
    let stats_file = stats_path.to_str().expect("utf-8 path");
    let run = [
        "run",
        "--config",
        cfg,
        "--exit-when-idle",
        "9s",
        "--stats-json",
        stats_file,
    ];
    assert_ok(&share_worker(&run, &[]).await, "run");
    let stats: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats_path).expect("the stats file"))
            .expect("stats JSON");
    let requests = seen.lock().unwrap().clone();
    assert!(
        count(&stats, "moved") >= 6,
        "waited in the delay topic: {stats}"
    );
    assert_eq!(
        count(&stats, "batches"),
        1,
        "the fresh and the delayed records share one batch: {stats} {requests:?}"
    );
    let delay_topic = format!("{topic}.delay");
    let mut identities = std::collections::HashSet::new();
    for request in &requests {
        assert_eq!(request.records.len(), request.items.len(), "{request:?}");
        for item in &request.items {
            let expected = if item["delayed"] == true {
                &delay_topic
            } else {
                &topic
            };
            assert_eq!(
                &request.topic, expected,
                "a request names the topic of every record it carries: {request:?}"
            );
        }
        for record in &request.records {
            let (partition, offset) = record.split_once('-').expect("partition-offset");
            assert!(
                partition.parse::<i32>().is_ok() && offset.parse::<i64>().is_ok(),
                "{record}"
            );
            assert!(
                identities.insert((request.topic.clone(), record.clone())),
                "{} {record} named twice: {requests:?}",
                request.topic
            );
        }
    }
    assert_eq!(requests.len(), 2, "one request per topic: {requests:?}");
    let mut sent: Vec<i64> = requests.iter().flat_map(numbers).collect();
    sent.sort_unstable();
    let expected: Vec<i64> = (0..6).chain(100..106).collect();
    assert_eq!(sent, expected, "every record was sent once");

    assert_eq!(count(&stats, "accepted"), 6, "the even items: {stats}");
    assert_eq!(count(&stats, "dlq"), 6, "the odd items: {stats}");
    let letters = letters(&topic).await;
    let mut rejected: Vec<i64> = letters.keys().copied().collect();
    rejected.sort_unstable();
    assert_eq!(rejected, vec![1, 3, 5, 101, 103, 105], "{letters:?}");
    for (n, error) in &letters {
        assert_eq!(error, &format!("the endpoint: item {n} refused"));
    }
}

/// Per-item statuses the batch protocol does not define (a number, an unknown word, none at
/// all) in a 299 answer dead-letter their items alone, on the first attempt, with a reason naming
/// what the endpoint said; the items answered "ok" beside them are taken once. An HTTP status
/// HTTP does not define (777) rejects every record of its request, naming the status.
#[tokio::test]
async fn a_status_the_protocol_does_not_define_dead_letters_with_the_status_named() {
    let scratch = Scratch::new();
    let topic = unique("cli-batch-made-up");
    let other = unique("cli-batch-777");
    let group = unique("cli-batch-made-up-group");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    let seen = Arc::new(Mutex::new(Vec::new()));
    tokio::spawn(scripted_endpoint(listener, seen.clone(), |request| {
        if request.path == "/made-up" {
            return ("777 Made Up", serde_json::json!({}));
        }
        let results: Vec<serde_json::Value> = numbers(request)
            .iter()
            .map(|n| match n % 4 {
                0 => serde_json::json!({"status": "ok"}),
                1 => serde_json::json!({"status": 777}),
                2 => serde_json::json!({"status": "done"}),
                _ => serde_json::json!({"state": "ok"}),
            })
            .collect();
        ("299 Made Up", serde_json::json!({ "results": results }))
    }));
    let route = |path: &str| {
        format!(
            "handler = \"http\"\nurl = \"http://{address}{path}\"\nbatch = {{ max = 12, linger = \"200ms\" }}"
        )
    };
    let text = config(&group, &topic, &route("/bulk"))
        .replace("[retry]", "[retry]\nmax-attempts = 3")
        .replace("concurrency = 8", "concurrency = 24")
        + &format!("\n[[route]]\ntopic = \"{other}\"\n{}\n", route("/made-up"));
    let cfg = scratch.write("worker.toml", &text);
    let cfg = cfg.to_str().expect("utf-8 path");
    let items: Vec<String> = (0..12).map(|n| format!("{{\"n\": {n}}}")).collect();
    let items: Vec<&str> = items.iter().map(String::as_str).collect();
    setup_and_produce(&scratch, cfg, &topic, 1, &items, &[]).await;
    let others: Vec<String> = (100..103).map(|n| format!("{{\"n\": {n}}}")).collect();
    let others: Vec<&str> = others.iter().map(String::as_str).collect();
    setup_and_produce(&scratch, cfg, &other, 1, &others, &[]).await;

    let stats = run_until_idle(&scratch, cfg).await;
    let requests = seen.lock().unwrap().clone();
    let mut sent: Vec<i64> = requests.iter().flat_map(numbers).collect();
    sent.sort_unstable();
    let expected: Vec<i64> = (0..12).chain(100..103).collect();
    assert_eq!(sent, expected, "every item was sent once, none retried");
    assert_eq!(
        count(&stats, "accepted"),
        3,
        "the items answered ok: {stats}"
    );
    assert_eq!(count(&stats, "dlq"), 12, "{stats}");

    let letters_of_topic = letters(&topic).await;
    let mut rejected: Vec<i64> = letters_of_topic.keys().copied().collect();
    rejected.sort_unstable();
    assert_eq!(
        rejected,
        (0..12).filter(|n| n % 4 != 0).collect::<Vec<_>>(),
        "{letters_of_topic:?}"
    );
    for (n, error) in &letters_of_topic {
        let named = match n % 4 {
            1 => "the endpoint answered status 777, which the batch protocol does not define",
            2 => r#"the endpoint answered status "done", which the batch protocol does not define"#,
            _ => "the endpoint's result has no status",
        };
        assert!(error.starts_with(named), "item {n}: {error}");
    }
    let letters_of_other = letters(&other).await;
    assert_eq!(letters_of_other.len(), 3, "{letters_of_other:?}");
    for error in letters_of_other.values() {
        assert_eq!(error, "HTTP 777 <unknown status code>");
    }
}
