//! The dead-letter pages of `share-worker ui`: a poison run's letters with their reasons, one
//! letter in full, and one replayed from the page back to its topic, where a worker accepts it.

use std::path::Path;

use serde::Deserialize;

use crate::support::*;
use crate::ui::browser::{
    Chromium, click_and_wait, eval, page_text, screenshot, tick, wait_listening, wait_until,
};

#[derive(Debug, Deserialize)]
struct Letter {
    at: String,
    reason: String,
    status: String,
}

const LETTERS: &str = r#"JSON.parse(JSON.stringify([...document.querySelectorAll('#letters tr.letter')].map(tr => ({
    at: tr.dataset.partition + ':' + tr.dataset.offset,
    reason: tr.querySelector('td.reason').textContent,
    status: tr.querySelector('.badge').textContent,
}))))"#;

/// An exec handler that rejects `poison-reject` records and fails `poison-retry` ones while
/// `dir/poison-on` exists, and otherwise appends the record to `dir/accepted.txt`.
fn handler(dir: &Path) -> String {
    let script = format!(
        r#"#!/bin/sh
payload=$(cat)
if [ -e '{dir}/poison-on' ]; then
  case "$payload" in
    *poison-reject*) exit 2 ;;
    *poison-retry*) exit 1 ;;
  esac
fi
printf '%s\n' "$payload" >> '{dir}/accepted.txt'
"#,
        dir = dir.display()
    );
    let path = dir.join("handler.sh");
    std::fs::write(&path, script).expect("writing the handler");
    format!(
        "handler = \"exec\"\ncommand = [\"sh\", \"{}\"]\nreject-exit-codes = [2]",
        path.display()
    )
}

/// A worker's config on a new topic (`name`) with the dashboard on a free port, in a scratch
/// directory: the handler's TOML comes from `handler` (which may write files there), `ui` adds
/// lines to `[ui]`.
struct DashboardBed {
    scratch: Scratch,
    topic: String,
    dlq: String,
    port: u16,
    cfg: String,
}

impl DashboardBed {
    fn new(name: &str, handler: impl FnOnce(&Path) -> String, ui: &str) -> Self {
        let scratch = Scratch::new();
        let topic = unique(name);
        let group = unique(&format!("{name}-group"));
        let port = reserve_port();
        let text = config(&group, &topic, &handler(&scratch.0)).replace(
            "[dlq]",
            &format!("[ui]\nlisten = \"127.0.0.1:{port}\"\n{ui}\n[dlq]"),
        );
        let cfg = scratch.write("worker.toml", &text);
        let cfg = cfg.to_str().expect("utf-8 path").to_owned();
        Self {
            dlq: format!("{topic}.dlq"),
            scratch,
            topic,
            port,
            cfg,
        }
    }

    /// Writes `count` letters of `size` bytes with `headers` (`key=value`) to the dead-letter
    /// topic: letters are records with provenance headers.
    async fn write_letters(&self, count: &str, size: &str, headers: &[&str]) {
        let bootstrap = bootstrap();
        let mut args = vec![
            "produce",
            "--bootstrap",
            &bootstrap,
            "--topic",
            &self.dlq,
            "--count",
            count,
            "--size",
            size,
        ];
        for header in headers {
            args.extend(["--header", header]);
        }
        assert_ok(&share_worker(&args, &[]).await, "writing letters");
    }

    /// `share-worker setup` with `partitions` per topic.
    async fn setup(&self, partitions: &str) {
        let args = ["setup", "--config", &self.cfg, "--partitions", partitions];
        assert_ok(&share_worker(&args, &[]).await, "setup");
    }
}

#[tokio::test]
async fn the_dead_letter_pages_list_a_poison_runs_letters_and_replay_one_to_a_worker() {
    let bed = DashboardBed::new(
        "ui-dlq",
        handler,
        "allow-actions = true\nsample-every = \"500ms\"\n",
    );
    let DashboardBed {
        scratch,
        topic,
        dlq,
        port,
        ..
    } = &bed;
    let cfg = bed.cfg.as_str();
    std::fs::write(scratch.0.join("poison-on"), "").expect("the poison flag");
    let lines = [
        "ok-1",
        "poison-reject-1 <b>bold</b>",
        "ok-2",
        "poison-reject-2 <script>alert(1)</script>",
        "poison-retry-1",
        "ok-3",
    ];
    setup_and_produce(scratch, cfg, topic, 1, &lines, &[]).await;
    let stats = run_until_idle(scratch, cfg).await;
    assert_eq!(count(&stats, "dead_lettered"), 3, "{stats}");

    let log = scratch.0.join("ui.log");
    let _ui = spawn(&["ui", "--config", cfg], &log);
    let base = format!("http://127.0.0.1:{port}");
    wait_listening(&format!("{base}/ui/login")).await;
    let browser = Chromium::launch().await;
    let list = format!("{base}/ui/dlq/{dlq}");
    let page = browser.open(&list).await;
    // The letters, once the dashboard has read the topic to its end (their status is known).
    let mut letters: Vec<Letter> = Vec::new();
    let deadline = tokio::time::Instant::now() + crate::ui::browser::PAGE_DEADLINE;
    while letters.len() != 3 || letters.iter().any(|l| l.status != "pending") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "letters: {letters:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        page.reload().await.expect("reloading");
        letters = eval(&page, LETTERS).await;
    }
    let mut reasons: Vec<&str> = letters.iter().map(|l| l.reason.as_str()).collect();
    reasons.sort_unstable();
    assert_eq!(reasons, ["handler_error", "rejected", "rejected"]);
    let shown = page_text(&page).await;
    assert!(
        shown.contains("<script>alert(1)</script>"),
        "the value shows as text: {shown}"
    );
    let injected: usize = eval(
        &page,
        "document.querySelectorAll('#letters script, #letters b').length",
    )
    .await;
    assert_eq!(injected, 0, "no letter is rendered as HTML");
    let by_reason: String =
        eval(&page, "document.querySelector('table.by-reason').innerText").await;
    assert!(
        by_reason.contains("rejected\t2") && by_reason.contains("handler_error\t1"),
        "{by_reason}"
    );
    screenshot(&page, "dead-letters").await;

    // One letter in full, with every header.
    let first = letters
        .iter()
        .find(|l| l.reason == "rejected")
        .expect("a rejected letter");
    let (partition, offset) = first.at.split_once(':').expect("partition:offset");
    let letter = browser.open(&format!("{list}/{partition}/{offset}")).await;
    let headers: String = eval(&letter, "document.querySelector('#headers').innerText").await;
    for header in [
        "share.dlq.reason",
        "share.dlq.topic",
        "share.dlq.delivery.count",
        "share.dlq.failed.at",
    ] {
        assert!(headers.contains(header), "{header} in {headers}");
    }
    let value: String = eval(&letter, "document.querySelector('#value').textContent").await;
    assert!(value.starts_with("poison-reject-"), "{value}");
    screenshot(&letter, "dead-letter").await;

    // Replay it from the list: select, confirm, and watch the action finish.
    std::fs::remove_file(scratch.0.join("poison-on")).expect("clearing the poison flag");
    let replayed_value = value.clone();
    let checkbox = format!("input[name=letter][value='{}']", first.at);
    tick(&page, &checkbox).await;
    click_and_wait(&page, "button[value=replay-selected]", "#confirm").await;
    let confirm = page_text(&page).await;
    assert!(
        confirm.contains(&format!("the letter {partition}@{offset}")),
        "{confirm}"
    );
    screenshot(&page, "replay-confirm").await;
    click_and_wait(&page, "#confirm", "#job-state").await;
    let summary: String = wait_until(
        &page,
        "the replay done",
        "document.querySelector('#job-state')?.dataset.state === 'done' ? document.querySelector('#job-summary').textContent : ''",
        |s: &String| !s.is_empty(),
    )
    .await;
    assert!(summary.starts_with("replayed 1,"), "{summary}");
    screenshot(&page, "replay-done").await;
    let audit = std::fs::read_to_string(&log).expect("the dashboard's log");
    assert!(
        audit.lines().any(|l| l.contains("share_worker::audit")
            && l.contains("dashboard action done")
            && l.contains("replay")
            && l.contains(&format!("the letter {partition}@{offset}"))),
        "{audit}"
    );

    // The record is back on its topic: a worker accepts it.
    let stats = run_until_idle(scratch, cfg).await;
    assert_eq!(count(&stats, "accepted"), 1, "{stats}");
    let accepted = std::fs::read_to_string(scratch.0.join("accepted.txt")).expect("the ledger");
    assert!(accepted.lines().any(|l| l == replayed_value), "{accepted}");
    // And the page says the letter is replayed.
    let list_page = browser.open(&list).await;
    let deadline = tokio::time::Instant::now() + crate::ui::browser::PAGE_DEADLINE;
    loop {
        let letters: Vec<Letter> = eval(&list_page, LETTERS).await;
        if letters
            .iter()
            .any(|l| l.at == first.at && l.status == "replayed")
        {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("{letters:?} on {}", page_text(&list_page).await);
        }
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        list_page.reload().await.expect("reloading");
    }
}

/// The letters of one page (`partition:offset` and reason) and the next page's link, from a
/// page's HTML.
fn rows_and_next(page: &str) -> (Vec<(String, String)>, Option<String>) {
    let rows = page
        .split("<tr class=\"letter\" data-partition=\"")
        .skip(1)
        .filter_map(|row| {
            let (partition, rest) = row.split_once("\" data-offset=\"")?;
            let offset = rest.split('"').next()?;
            let reason = rest
                .split("<td class=\"reason\">")
                .nth(1)?
                .split('<')
                .next()?;
            Some((format!("{partition}:{offset}"), reason.to_owned()))
        })
        .collect();
    let next = page
        .split("id=\"next-page\" href=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .map(|href| href.replace("&amp;", "&"));
    (rows, next)
}

/// A dead-letter topic larger than a page: pages of 50 follow on from each other with their
/// filter, every letter once, and a page of 600 KB letters carries previews, not values.
#[tokio::test]
async fn pages_are_bounded_follow_on_with_their_filter_and_cut_large_values() {
    let bed = DashboardBed::new("ui-pages", |_| "handler = \"noop\"".to_owned(), "");
    bed.setup("2").await;
    let source = format!("share.dlq.topic={}", bed.topic);
    for (reason, count, size) in [
        ("rejected", "70", "64"),
        ("handler_error", "50", "64"),
        ("decode", "3", "600000"),
    ] {
        let reason = format!("share.dlq.reason={reason}");
        bed.write_letters(count, size, &[&reason, &source]).await;
    }
    let _ui = spawn(&["ui", "--config", &bed.cfg], &bed.scratch.0.join("ui.log"));
    let base = format!("http://127.0.0.1:{}", bed.port);
    wait_listening(&format!("{base}/ui/login")).await;
    let client = crate::ui::browser::http();
    let get = |path: String| {
        let client = client.clone();
        let url = format!("{base}{path}");
        async move {
            let response = client.get(&url).send().await.expect("GET");
            assert_eq!(response.status(), reqwest::StatusCode::OK, "{url}");
            response.text().await.expect("a page")
        }
    };

    let mut seen = std::collections::BTreeSet::new();
    let mut path = format!("/ui/dlq/{}?reason=rejected", bed.dlq);
    let mut pages = Vec::new();
    loop {
        let page = get(path.clone()).await;
        let (rows, next) = rows_and_next(&page);
        assert!(
            rows.len() <= 50,
            "a page holds at most 50 letters: {}",
            rows.len()
        );
        pages.push(rows.len());
        for (at, reason) in rows {
            assert_eq!(reason, "rejected", "only the filter's letters");
            assert!(seen.insert(at.clone()), "{at} on two pages");
        }
        match next {
            Some(next) => {
                assert!(
                    next.contains("reason=rejected"),
                    "the next page keeps the filter: {next}"
                );
                path = next;
            }
            None => break,
        }
        assert!(pages.len() < 10, "pages never end: {pages:?}");
    }
    assert_eq!(seen.len(), 70, "every rejected letter once: {pages:?}");
    assert_eq!(pages.first(), Some(&50), "{pages:?}");

    let large = get(format!("/ui/dlq/{}?reason=decode", bed.dlq)).await;
    let (rows, _) = rows_and_next(&large);
    assert_eq!(rows.len(), 3);
    assert!(
        large.len() < 64 * 1024,
        "3 letters of 600 KB make a page of {} bytes",
        large.len()
    );
    assert!(large.contains("(600000 B)"), "the size is shown");
}

/// The number in the `class` stat of a counts fragment (`<div class="n letters">42</div>`).
fn stat<'a>(counts: &'a str, class: &str) -> Option<&'a str> {
    counts
        .split(&format!("<div class=\"{class}\">"))
        .nth(1)?
        .split('<')
        .next()
}

/// The dashboard's counts of a dead-letter topic take in every record, both those it reads when
/// it starts and those written while it follows the topic, however often it looks the topic up
/// meanwhile (a look-up must not take a record from the reader's queue).
#[tokio::test]
async fn the_counts_take_in_every_letter_read_at_start_and_while_following() {
    const BATCH: u64 = 40_000;
    let bed = DashboardBed::new(
        "ui-count",
        |_| "handler = \"noop\"".to_owned(),
        "sample-every = \"500ms\"\n",
    );
    bed.setup("1").await;
    let batch = BATCH.to_string();
    let letters = || bed.write_letters(&batch, "100", &["share.dlq.reason=rejected"]);
    let client = crate::ui::browser::http();
    let counts_url = format!("http://127.0.0.1:{}/ui/live/dlq/{}", bed.port, bed.dlq);
    // Waits until the counts are caught up with `expected` letters read.
    let caught_up_with = |expected: u64| {
        let (client, url) = (client.clone(), counts_url.clone());
        async move {
            let deadline = tokio::time::Instant::now() + crate::ui::browser::PAGE_DEADLINE;
            loop {
                let counts = client.get(&url).send().await.expect("GET").text().await;
                let counts = counts.expect("the counts");
                let read = stat(&counts, "n letters").and_then(|n| n.parse::<u64>().ok());
                let caught_up = counts.contains("<div class=\"n\">yes</div>");
                if caught_up && read == Some(expected) {
                    return;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "expected {expected} letters read and caught up: {counts}"
                );
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        }
    };

    letters().await;
    let _ui = spawn(&["ui", "--config", &bed.cfg], &bed.scratch.0.join("ui.log"));
    wait_listening(&format!("http://127.0.0.1:{}/ui/login", bed.port)).await;
    caught_up_with(BATCH).await;
    letters().await;
    caught_up_with(2 * BATCH).await;
}
