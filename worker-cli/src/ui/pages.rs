//! The dashboard's HTML, server-rendered with maud: every interpolated value is HTML-escaped
//! by the template engine, so letters' keys, values and headers show as text, never as markup.

use maud::{DOCTYPE, Markup, html};
use worker_core::dlq::headers::MarkerKind;

use super::charts::{Series, chart};
use super::dlq_index::IndexState;
use super::jobs::{Job, State, verb};
use super::letters::{Filter, Full, Page, Row};
use super::sampler::{Point, Samples};
use crate::replay::scan::LetterStatus;

/// What every page shows in its header.
#[derive(Debug)]
pub(crate) struct Chrome<'a> {
    pub(crate) group: &'a str,
    pub(crate) embedded: bool,
    pub(crate) actions: bool,
    pub(crate) every_ms: u128,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tab {
    Overview,
    Dlq,
    None,
}

pub(crate) fn layout(chrome: &Chrome<'_>, tab: Tab, title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · share-worker" }
                link rel="stylesheet" href="/ui/assets/app.css";
            }
            body {
                header {
                    span.brand { "share-worker" }
                    nav {
                        a href="/ui" class=[(tab == Tab::Overview).then_some("active")] { "Overview" }
                        a href="/ui/dlq" class=[(tab == Tab::Dlq).then_some("active")] { "Dead letters" }
                    }
                    span.mode {
                        "group " strong { (chrome.group) } " · "
                        @if chrome.embedded { "this worker's dashboard" } @else { "standalone dashboard" }
                        " · "
                        @if chrome.actions { "actions on" } @else { "read-only" }
                    }
                }
                main { (body) }
                script src="/ui/assets/app.js" {}
            }
        }
    }
}

/// A page that only says something (errors, refusals).
pub(crate) fn message(chrome: &Chrome<'_>, title: &str, text: &str) -> Markup {
    layout(
        chrome,
        Tab::None,
        title,
        html! { h1 { (title) } p.card { (text) } },
    )
}

pub(crate) fn login(chrome: &Chrome<'_>, csrf: &str, why: Option<&str>) -> Markup {
    layout(
        chrome,
        Tab::None,
        "Sign in",
        html! {
            h1 { "Sign in" }
            div.card {
                @if let Some(why) = why { p.error { (why) } }
                p { "This dashboard needs its token (" code { "ui.token" } ")." }
                form method="post" action="/ui/login" {
                    input type="hidden" name="csrf" value=(csrf);
                    input type="password" name="token" autocomplete="current-password" placeholder="token" required;
                    " " button type="submit" { "Sign in" }
                }
            }
        },
    )
}

pub(crate) fn overview(chrome: &Chrome<'_>, samples: &Samples, routes: Markup) -> Markup {
    layout(
        chrome,
        Tab::Overview,
        "Overview",
        html! {
            h1 { "Share group " (chrome.group) }
            div #live data-refresh="/ui/live/overview" data-every=(chrome.every_ms) {
                (overview_live(samples))
            }
            (routes)
        },
    )
}

/// The part of the overview that refreshes.
pub(crate) fn overview_live(samples: &Samples) -> Markup {
    let lag = samples.total_lag();
    html! {
        @match &samples.group {
            None => { p.card.muted { "sampling the group…" } }
            Some(Err(why)) => { p.card.error { (why) } }
            Some(Ok(group)) => {
                div.card.stats {
                    div.stat { div.n #group-state { (group.state) } div.l { "state" } }
                    div.stat { div.n #member-count { (group.members.len()) } div.l { "members" } }
                    div.stat { div.n #total-lag { @match lag { Some(l) => (l), None => "–" } } div.l { "lag (records not settled)" } }
                    div.stat { div.n { (group.epoch) } div.l { "epoch" } }
                }
                h2 { "Members" }
                @if group.members.is_empty() {
                    p.muted { "no active members" }
                } @else {
                    table #members {
                        thead { tr { th { "member id" } th { "client id" } th { "host" } th { "assignment" } } }
                        tbody {
                            @for m in &group.members {
                                tr {
                                    td { code.member-id { (m.member_id) } }
                                    td { (m.client_id) }
                                    td { (m.host) }
                                    td { code { (assignment(&m.assignment)) } }
                                }
                            }
                        }
                    }
                }
            }
        }
        @if !samples.lanes.is_empty() {
            h2 { "Lanes" }
            table #lanes {
                thead { tr { th { "topic" } th.num { "priority" } th.num { "weight" } th.num { "lag" } th.num { "handled/s" } th.num { "slots now" } } }
                tbody {
                    @for lane in &samples.lanes {
                        tr {
                            td { (lane.topic) }
                            td.num { (optional(lane.priority)) }
                            td.num { (optional(lane.weight)) }
                            td.num.lag { (optional(samples.topic_lag(&lane.topic))) }
                            td.num.rate {
                                @match samples.handled_per_s.get(&lane.topic) {
                                    Some(rate) => (format!("{rate:.1}")),
                                    None => "–",
                                }
                            }
                            td.num.slots { (optional(samples.slots.get(&lane.topic))) }
                        }
                    }
                }
            }
        }
        @if !samples.schedules.is_empty() || samples.schedules_error.is_some() {
            h2 { "Periodic jobs" }
            @if let Some(why) = &samples.schedules_error { p.error { "reading the firings: " (why) } }
            table #schedules {
                thead { tr { th { "name" } th { "schedule" } th { "topic" } th { "last firing (UTC)" } th { "next firing (UTC)" } } }
                tbody {
                    @for job in &samples.schedules {
                        tr {
                            td.name { (job.name) }
                            td { (job.when) }
                            td { (job.topic) }
                            td.last {
                                (utc_time(job.last))
                                @if job.overdue { span.error.overdue { " — no tick fired since " (utc_time(job.last)) } }
                            }
                            td.next { (utc_time(job.next)) }
                        }
                    }
                }
            }
        }
        h2 { "Partitions" }
        table #partitions {
            thead { tr { th { "topic" } th.num { "partition" } th.num { "start offset" } th.num { "lag" } } }
            tbody {
                @for p in &samples.offsets {
                    tr {
                        td { (p.topic) }
                        td.num { (p.partition) }
                        td.num { (known(p.start_offset)) }
                        td.num.lag { (known(p.lag)) }
                    }
                }
            }
        }
        h2 { "Last " (samples.history.len()) " samples" }
        div.grid { (charts(samples)) }
        @if !samples.embedded {
            p.muted {
                "Standalone dashboard: processed/retried rates and handler latency come from a worker's own "
                code { "/ui" } " (" code { "telemetry.ui = true" } "); this process runs no worker."
            }
        }
    }
}

fn charts(samples: &Samples) -> Markup {
    let series = |f: fn(&Point) -> Option<f64>| samples.history.iter().map(f).collect();
    let lag = chart(
        "chart-lag",
        "Lag",
        "records",
        &[Series {
            name: "lag",
            class: "s0",
            values: series(|p| p.lag.map(|l| l as f64)),
        }],
    );
    let dead = Series {
        name: "dead-lettered/s",
        class: "s2",
        values: series(|p| p.dead_lettered_per_s),
    };
    html! {
        (lag)
        @if samples.embedded {
            (chart("chart-rates", "Records/s", "/s", &[
                Series { name: "processed", class: "s0", values: series(|p| p.processed_per_s) },
                Series { name: "retried", class: "s1", values: series(|p| p.retried_per_s) },
                Series { name: "dead-lettered", class: "s2", values: dead.values.clone() },
            ]))
            (chart("chart-latency", "Handler latency", "ms", &[
                Series { name: "p50", class: "s3", values: series(|p| p.p50_ms) },
                Series { name: "p99", class: "s1", values: series(|p| p.p99_ms) },
            ]))
        } @else {
            (chart("chart-dead", "Dead letters written", "/s", &[dead]))
        }
    }
}

/// Milliseconds since the epoch as `2026-12-05 14:30:40`, or `–`.
fn utc_time(millis: Option<i64>) -> String {
    millis
        .and_then(|ms| u64::try_from(ms).ok())
        .map(|ms| std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
        .map_or_else(
            || "–".to_owned(),
            |at| {
                humantime::format_rfc3339_seconds(at)
                    .to_string()
                    .replacen('T', " ", 1)
                    .trim_end_matches('Z')
                    .to_owned()
            },
        )
}

fn optional(v: Option<impl std::fmt::Display>) -> String {
    v.map_or_else(|| "–".to_owned(), |v| v.to_string())
}

fn known(v: i64) -> String {
    if v < 0 {
        "–".to_owned()
    } else {
        v.to_string()
    }
}

fn assignment(pairs: &[(String, i32)]) -> String {
    let mut out: Vec<String> = Vec::new();
    for (topic, partition) in pairs {
        match out.last_mut() {
            Some(last) if last.starts_with(&format!("{topic}:")) => {
                last.push_str(&format!(",{partition}"));
            }
            _ => out.push(format!("{topic}:{partition}")),
        }
    }
    if out.is_empty() {
        "–".to_owned()
    } else {
        out.join(" ")
    }
}

/// One dead-letter topic's counts.
pub(crate) fn counts(topic: &str, state: &IndexState) -> Markup {
    let (replayed, skipped) = state.markers.done();
    html! {
        div.card.counts data-topic=(topic) {
            @if let Some(problem) = &state.problem { p.error { (problem) } }
            @if state.markers.overflowed() {
                p.error { "Its letters and markers interleave more than " (crate::replay::markers::MAX_RUNS) " times: which letters are done is not tracked past that, so no letter shows a status." }
            }
            div.stats {
                div.stat { div.n.letters { (state.letters) } div.l { "letters read" } }
                div.stat { div.n { (state.letters.saturating_sub(replayed + skipped)) } div.l { "pending" } }
                div.stat { div.n { (replayed) } div.l { "replayed" } }
                div.stat { div.n { (skipped) } div.l { "skipped" } }
                div.stat { div.n { (state.records()) } div.l { "records in the topic" } }
                div.stat { div.n { @if state.caught_up() { "yes" } @else { "reading…" } } div.l { "caught up" } }
            }
            div.grid {
                table.by-reason {
                    thead { tr { th { "reason" } th.num { "letters" } } }
                    tbody { @for (reason, n) in &state.reasons { tr { td.reason { (reason) } td.num { (n) } } } }
                }
                table.by-source {
                    thead { tr { th { "source topic" } th.num { "letters" } } }
                    tbody { @for (source, n) in &state.sources { tr { td { (source) } td.num { (n) } } } }
                }
            }
        }
    }
}

pub(crate) fn dlq_topics(chrome: &Chrome<'_>, topics: &[(String, Markup)]) -> Markup {
    layout(
        chrome,
        Tab::Dlq,
        "Dead letters",
        html! {
            h1 { "Dead-letter topics" }
            @if topics.is_empty() { p.card.muted { "No dead-letter topic is configured ([dlq])." } }
            @for (topic, counts) in topics {
                h2 { a href={"/ui/dlq/" (topic)} { (topic) } }
                div data-refresh={"/ui/live/dlq/" (topic)} data-every=(chrome.every_ms) { (counts) }
            }
        },
    )
}

/// The values a page's filter form and links carry.
#[derive(Debug, Default)]
pub(crate) struct FilterText {
    pub(crate) reason: String,
    pub(crate) since: String,
    pub(crate) until: String,
}

impl FilterText {
    pub(crate) fn query(&self) -> String {
        let mut out = form_urlencoded::Serializer::new(String::new());
        for (k, v) in [
            ("reason", &self.reason),
            ("since", &self.since),
            ("until", &self.until),
        ] {
            if !v.is_empty() {
                out.append_pair(k, v);
            }
        }
        out.finish()
    }
}

/// The query of the page after this one.
fn next_query(filter: &FilterText, from: &str) -> String {
    let mut query = filter.query();
    if !query.is_empty() {
        query.push('&');
    }
    query.push_str(
        &form_urlencoded::Serializer::new(String::new())
            .append_pair("from", from)
            .finish(),
    );
    query
}

fn status_text(status: Option<LetterStatus>) -> (&'static str, &'static str) {
    match status {
        None => ("?", "badge"),
        Some(LetterStatus::Pending) => ("pending", "badge warn"),
        Some(LetterStatus::Done(MarkerKind::Replayed)) => ("replayed", "badge ok"),
        Some(LetterStatus::Done(_)) => ("skipped", "badge"),
    }
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn letters(
    chrome: &Chrome<'_>,
    topic: &str,
    counts: Markup,
    filter: &FilterText,
    page: Result<&Page, String>,
    status: &dyn Fn(&Row) -> Option<LetterStatus>,
    reasons: &[String],
) -> Markup {
    let base = format!("/ui/dlq/{topic}");
    html! {
        h1 { "Dead letters of " (topic) }
        div data-refresh={"/ui/live/dlq/" (topic)} data-every=(chrome.every_ms) { (counts) }
        form.filters method="get" action=(base) {
            label { "reason"
                select name="reason" {
                    option value="" { "any" }
                    @for r in reasons { option value=(r) selected[*r == filter.reason] { (r) } }
                }
            }
            label { "written since (UTC, or e.g. 1h)" input name="since" value=(filter.since) placeholder="2026-01-31T12:00 or 1h"; }
            label { "until" input name="until" value=(filter.until) placeholder="now"; }
            button.secondary type="submit" { "Filter" }
            a href=(base) { "clear" }
        }
        @match page {
            Err(why) => { p.card.error { (why) } }
            Ok(page) => {
                form method="get" action={(base) "/confirm"} {
                    @for (k, v) in [("reason", &filter.reason), ("since", &filter.since), ("until", &filter.until)] {
                        @if !v.is_empty() { input type="hidden" name=(k) value=(v); }
                    }
                    @if chrome.actions {
                        div.actions {
                            button type="submit" name="do" value="replay-selected" { "Replay selected" }
                            button.secondary type="submit" name="do" value="skip-selected" { "Skip selected" }
                            button.secondary type="submit" name="do" value="replay-filter" { "Replay all matching the filter" }
                            button.danger type="submit" name="do" value="skip-filter" { "Skip all matching the filter" }
                        }
                    }
                    table #letters {
                        thead { tr {
                            @if chrome.actions { th { input type="checkbox" data-select-all aria-label="select all"; } }
                            th { "partition/offset" } th { "status" } th { "reason" } th { "error" } th.num { "deliveries" }
                            th { "failed at" } th { "source" } th { "worker" } th { "handler" } th { "key" } th { "value" }
                        } }
                        tbody {
                            @for row in &page.rows {
                                @let (text, class) = status_text(status(row));
                                tr.letter data-partition=(row.partition) data-offset=(row.offset) {
                                    @if chrome.actions {
                                        td { input type="checkbox" name="letter" value={(row.partition) ":" (row.offset)}; }
                                    }
                                    td { a href={(base) "/" (row.partition) "/" (row.offset)} { (row.partition) "@" (row.offset) } }
                                    td { span class=(class) { (text) } }
                                    td.reason { (row.reason) }
                                    td.error-text { (row.error) }
                                    td.num { (row.delivery_count) }
                                    td { (row.failed_at) }
                                    td { (row.source) }
                                    td { (row.worker) }
                                    td { (row.handler) }
                                    td { code { (row.key) } }
                                    td { code.value-preview { (row.value) } " " span.muted { "(" (row.value_bytes) " B)" } }
                                }
                            }
                        }
                    }
                }
                p.pager.muted {
                    (page.rows.len()) " letters shown of " (page.looked_at) " looked at. "
                    @if let Some(next) = &page.next {
                        a #next-page href={(base) "?" (next_query(filter, &next.to_string()))} { "next page →" }
                    } @else { "End of the topic." }
                }
            }
        }
    }
}

pub(crate) fn letter(
    chrome: &Chrome<'_>,
    topic: &str,
    full: &Full,
    status: Option<LetterStatus>,
) -> Markup {
    let row = &full.row;
    let (text, class) = status_text(status);
    let at = format!("{}:{}", row.partition, row.offset);
    layout(
        chrome,
        Tab::Dlq,
        "Dead letter",
        html! {
            h1 { (topic) " " (row.partition) "@" (row.offset) " " span class=(class) { (text) } }
            @if chrome.actions {
                div.actions {
                    form.inline method="get" action={"/ui/dlq/" (topic) "/confirm"} {
                        input type="hidden" name="letter" value=(at);
                        button type="submit" name="do" value="replay-selected" { "Replay…" }
                        " "
                        button.secondary type="submit" name="do" value="skip-selected" { "Skip…" }
                    }
                }
            }
            div.card {
                table.fields {
                    tbody {
                        tr { th { "reason" } td.reason { (row.reason) } }
                        tr { th { "error" } td { (row.error) } }
                        tr { th { "delivery count" } td { (row.delivery_count) } }
                        tr { th { "failed at" } td { (row.failed_at) } }
                        tr { th { "source topic" } td { (row.source) } }
                        tr { th { "worker" } td { (row.worker) } }
                        tr { th { "handler" } td { (row.handler) } }
                        tr { th { "key" } td { code { (row.key) } } }
                        tr { th { "value size" } td { (row.value_bytes) " bytes" } }
                    }
                }
            }
            h2 { "Value" }
            pre.value #value { (row.value) }
            h2 { "Headers" }
            @match &full.headers {
                None => { p.error { "A header name is not UTF-8: the headers cannot be read." } }
                Some(headers) => {
                    table #headers {
                        thead { tr { th { "name" } th { "value" } } }
                        tbody { @for (k, v) in headers { tr { td { code { (k) } } td { code { (v) } } } } }
                    }
                }
            }
        },
    )
}

/// The page that asks before an action.
pub(crate) fn confirm(
    chrome: &Chrome<'_>,
    topic: &str,
    action: &str,
    what: &str,
    fields: &[(&str, String)],
    csrf: &str,
) -> Markup {
    let (title, explain) = match action {
        "replay" => (
            "Replay dead letters?",
            "Each selected letter is republished to the topic it came from (a route topic) and then marked replayed in the dead-letter topic, as `share-worker dlq replay` does. Letters already replayed or skipped are left alone.",
        ),
        _ => (
            "Skip dead letters?",
            "Each selected letter is marked skipped (handled): it stays in the topic but is never replayed. This cannot be undone from here.",
        ),
    };
    layout(
        chrome,
        Tab::Dlq,
        title,
        html! {
            h1 { (title) }
            div.card {
                p { strong { (what) } " from " code { (topic) } }
                p.muted { (explain) }
                form method="post" action={"/ui/dlq/" (topic) "/act"} {
                    input type="hidden" name="csrf" value=(csrf);
                    input type="hidden" name="action" value=(action);
                    @for (k, v) in fields { input type="hidden" name=(k) value=(v); }
                    div.actions {
                        button #confirm type="submit" class=[(action != "replay").then_some("danger")] {
                            @if action == "replay" { "Replay" } @else { "Skip" }
                        }
                        a href={"/ui/dlq/" (topic)} { "cancel" }
                    }
                }
            }
        },
    )
}

pub(crate) fn job(chrome: &Chrome<'_>, job: &Job) -> Markup {
    layout(
        chrome,
        Tab::Dlq,
        "Action",
        html! {
            h1 { "Action " (job.id) ": " (verb(job.request.action)) " " (job.what) }
            p.muted { "on " a href={"/ui/dlq/" (job.request.dlq)} { (job.request.dlq) } ", asked by " (job.who) }
            div #job data-refresh={"/ui/live/jobs/" (job.id)} data-every="1000" { (job_status(job)) }
        },
    )
}

pub(crate) fn job_status(job: &Job) -> Markup {
    html! {
        @match job.state() {
            State::Running { pass, read, total } => {
                p.card #job-state data-state="running" { "running: " (pass) " " (read) "/" (total) }
            }
            State::Done { tally, summary } => {
                div.card #job-state data-state="done" data-final="1" {
                    p { strong { "done" } ": " span #job-summary { (summary) } }
                    @if tally.failed > 0 { p.error { (tally.failed) " failed: see the worker's log." } }
                }
            }
            State::Failed(why) => {
                p.card.error #job-state data-state="failed" data-final="1" { "failed: " (why) }
            }
        }
        @let notes = job.notes();
        @if !notes.is_empty() {
            ul.notes { @for n in notes { li { code { (n) } } } }
        }
    }
}

/// A filter as words, for confirmation pages and audit lines.
pub(crate) fn describe_filter(filter: &Filter, text: &FilterText) -> String {
    let mut parts = vec!["all letters".to_owned()];
    if filter.reason.is_some() {
        parts.push(format!("with reason {}", text.reason));
    }
    if filter.since_ms.is_some() {
        parts.push(format!("written since {}", text.since));
    }
    if filter.until_ms.is_some() {
        parts.push(format!("written before {}", text.until));
    }
    parts.join(" ")
}
