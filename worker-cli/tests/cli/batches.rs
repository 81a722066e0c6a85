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
