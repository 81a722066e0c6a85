use std::path::Path;
use std::time::Duration;

use super::*;

mod listeners;
mod security;

const REFERENCE: &str = include_str!("../../../reference.toml");
const SMS: &str = include_str!("../../../../examples/sms.toml");

/// A file as a user wrote it, verbatim.
const ISSUE: &str = r#"
[kafka]
bootstrap = "127.0.0.1:9092"
client-id = "sms-worker"
[worker]
group = "sms-senders"
concurrency = 256
max-poll-records = 500
renew-at = 0.5
job-timeout = "5m"
shutdown-grace = "30s"
[retry]
max-attempts = 4
backoff-initial = "1s"
backoff-max = "5m"
backoff-multiplier = 2.0
jitter = true
assume-delivery-limit = 5
[dlq]
topic = "{topic}.dlq"
on-reject = true
[telemetry]
listen = "127.0.0.1:9464"
log-format = "pretty"
[[route]]
topic = "sms"
handler = "http"
url = "http://127.0.0.1:8080/send"
timeout = "10s"
concurrency = 64
[[route]]
topic = "emails"
handler = "exec"
command = ["/usr/local/bin/send-email", "--stdin"]
reject-exit-codes = [2]
timeout = "30s"
"#;

const MINIMAL: &str = r#"
[kafka]
bootstrap = "127.0.0.1:9092"

[worker]
group = "g"

[[route]]
topic = "t"
handler = "noop"
"#;

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::from_toml(text, Some(Path::new("worker.toml")), [])
}

#[test]
fn the_reference_file_parses_and_documents_every_key() {
    let config = parse(REFERENCE).unwrap();
    assert_eq!(config.routes.len(), 3);
    assert_eq!(config.worker.lock_duration, Some(Duration::from_secs(30)));
    // Every key the model prints is in the reference file.
    let printed = config.to_toml();
    for line in printed.lines() {
        if let Some((key, _)) = line.split_once(" = ") {
            assert!(
                REFERENCE.contains(&format!("\n{key} = ")),
                "reference.toml does not document `{key}`"
            );
        }
    }
    // The printed configuration parses back to the same thing.
    assert_eq!(parse(&printed).unwrap(), config);
}

#[test]
fn the_issue_file_and_the_example_parse() {
    let config = parse(ISSUE).unwrap();
    assert_eq!(config.kafka.client_id, "sms-worker");
    assert_eq!(config.worker.concurrency, 256);
    assert_eq!(config.worker.job_timeout, Duration::from_secs(300));
    assert_eq!(config.retry.max_attempts, Some(4));
    assert_eq!(config.backoff().max(), Duration::from_secs(300));
    assert_eq!(config.routes[0].handler, HandlerKind::Http);
    assert_eq!(
        config.routes[1].reject_exit_codes.as_deref(),
        Some(&[2][..])
    );
    assert_eq!(config.dlq_topics(), ["sms.dlq", "emails.dlq"]);
    let example = parse(SMS).unwrap();
    assert_eq!(example.routes[0].timeout, Some(Duration::from_secs(10)));
}

#[test]
fn defaults_fill_a_minimal_file() {
    let config = parse(MINIMAL).unwrap();
    assert_eq!(config.kafka.client_id, "share-worker");
    assert_eq!(config.worker.concurrency, 64);
    assert_eq!(config.worker.max_poll_records, 500);
    assert_eq!(config.worker.auto_offset_reset, OffsetReset::Earliest);
    assert!(config.dlq.is_none());
    assert!(config.dlq_topics().is_empty());
    assert_eq!(config.dlq_mode(), None);
    let source = config.source_builder().unwrap();
    assert_eq!(source.config().topics, ["t"]);
    assert_eq!(source.config().group, "g");
}

#[test]
fn environment_variables_override_keys() {
    let env = [
        ("SHARE_WORKER__WORKER__CONCURRENCY", "7"),
        ("SHARE_WORKER__WORKER__MAX_POLL_RECORDS", "9"),
        ("SHARE_WORKER__KAFKA__BOOTSTRAP", "10.0.0.1:9092"),
        ("SHARE_WORKER__RETRY__JITTER", "false"),
        ("UNRELATED", "1"),
    ]
    .map(|(k, v)| (k.to_owned(), v.to_owned()));
    let config = Config::from_toml(MINIMAL, None, env).unwrap();
    assert_eq!(config.worker.concurrency, 7);
    assert_eq!(config.worker.max_poll_records, 9);
    assert_eq!(config.kafka.bootstrap, "10.0.0.1:9092");
    assert!(!config.retry.jitter);
}

#[test]
fn a_bad_override_names_the_variable() {
    for (var, value) in [
        ("SHARE_WORKER__WORKER__CONCURRENCY", "0"),
        ("SHARE_WORKER__WORKER__CONCURRENCY", "many"),
        ("SHARE_WORKER__WORKER__NOPE", "1"),
    ] {
        let err =
            Config::from_toml(MINIMAL, None, [(var.to_owned(), value.to_owned())]).unwrap_err();
        assert!(err.to_string().contains(var), "{var}={value}: {err}");
    }
}

/// Inserts `line` after the line `after` of the minimal file (or replaces it with `replace`).
fn broken(edit: impl Fn(&str) -> String) -> ConfigError {
    let text = edit(MINIMAL);
    match parse(&text) {
        Ok(_) => panic!("expected an error for:\n{text}"),
        Err(err) => err,
    }
}

#[track_caller]
fn assert_error(err: &ConfigError, key: &str, line: usize, says: &str) {
    let text = err.to_string();
    assert_eq!(err.key(), key, "{text}");
    assert_eq!(err.line(), Some(line), "{text}");
    assert!(
        text.starts_with(&format!("worker.toml:{line}: `{key}`")),
        "{text}"
    );
    assert!(text.contains(says), "expected {says:?} in: {text}");
}

#[test]
fn broken_files_name_the_key_and_the_line() {
    // Line numbers refer to MINIMAL after the edit; MINIMAL starts with an empty line.
    let cases: Vec<(String, &str, usize, &str)> = vec![
        // An unknown key.
        (
            MINIMAL.replace("group = \"g\"", "group = \"g\"\nconcurency = 4"),
            "worker.concurency",
            7,
            "unknown key; expected one of: group, concurrency",
        ),
        // A wrong type.
        (
            MINIMAL.replace("group = \"g\"", "group = \"g\"\nconcurrency = \"lots\""),
            "worker.concurrency",
            7,
            "expected usize",
        ),
        // A missing required key.
        (
            MINIMAL.replace("bootstrap = \"127.0.0.1:9092\"", ""),
            "kafka.bootstrap",
            2,
            "missing required key `bootstrap`",
        ),
        // A bad duration.
        (
            MINIMAL.replace(
                "group = \"g\"",
                "group = \"g\"\njob-timeout = \"5 parsecs\"",
            ),
            "worker.job-timeout",
            7,
            "expected a duration string",
        ),
        (
            MINIMAL.replace("group = \"g\"", "group = \"g\"\njob-timeout = 30"),
            "worker.job-timeout",
            7,
            "expected a duration string",
        ),
        // A bad enum value.
        (
            MINIMAL.replace("handler = \"noop\"", "handler = \"ftp\""),
            "route[0].handler",
            10,
            "unknown value \"ftp\"; expected one of: http, exec, noop",
        ),
        // Out of range.
        (
            MINIMAL.replace("group = \"g\"", "group = \"g\"\nconcurrency = 0"),
            "worker.concurrency",
            7,
            "expected at least 1",
        ),
        (
            MINIMAL.replace("group = \"g\"", "group = \"g\"\nrenew-at = 1.5"),
            "worker.renew-at",
            7,
            "between 0 and 1",
        ),
        (
            MINIMAL.replace(
                "[[route]]",
                "[retry]\nassume-delivery-limit = 1\n\n[[route]]",
            ),
            "retry.assume-delivery-limit",
            9,
            "expected at least 2",
        ),
        // An http route without url, an exec route without command.
        (
            MINIMAL.replace("handler = \"noop\"", "handler = \"http\""),
            "route[0].url",
            8,
            "missing required key `url`",
        ),
        (
            MINIMAL.replace("handler = \"noop\"", "handler = \"exec\""),
            "route[0].command",
            8,
            "missing required key `command`",
        ),
        // A key of another handler kind.
        (
            MINIMAL.replace(
                "handler = \"noop\"",
                "handler = \"noop\"\nurl = \"http://x\"",
            ),
            "route[0].url",
            11,
            "applies to handler = \"http\" only",
        ),
        // A redirect policy that does not exist, or on a route that sends no requests.
        (
            MINIMAL.replace(
                "handler = \"noop\"",
                "handler = \"http\"\nurl = \"http://x\"\non-redirect = \"follow\"",
            ),
            "route[0].on-redirect",
            12,
            "unknown value \"follow\"; expected one of: retry, reject",
        ),
        (
            MINIMAL.replace(
                "handler = \"noop\"",
                "handler = \"exec\"\ncommand = [\"x\"]\non-redirect = \"reject\"",
            ),
            "route[0].on-redirect",
            12,
            "applies to handler = \"http\" only",
        ),
        // Variables an exec command cannot be given.
        (
            MINIMAL.replace(
                "handler = \"noop\"",
                "handler = \"exec\"\ncommand = [\"x\"]\nenv-pass = [\"PATH\", \"A=B\"]",
            ),
            "route[0].env-pass",
            12,
            "expected environment variable names",
        ),
        (
            MINIMAL.replace(
                "handler = \"noop\"",
                "handler = \"exec\"\ncommand = [\"x\"]\nenv-pass = [\"SHARE_WORKER__KAFKA__BOOTSTRAP\"]",
            ),
            "route[0].env-pass",
            12,
            "set by the worker",
        ),
        (
            MINIMAL.replace(
                "handler = \"noop\"",
                "handler = \"http\"\nurl = \"http://x\"\nenv-pass = []",
            ),
            "route[0].env-pass",
            12,
            "applies to handler = \"exec\" only",
        ),
        // A program that could never start.
        (
            MINIMAL.replace(
                "handler = \"noop\"",
                "handler = \"exec\"\ncommand = [\"/bin/x\", \"a\\u0000b\"]",
            ),
            "route[0].command",
            11,
            "without NUL characters",
        ),
        // A bad dead-letter template.
        (
            format!("{MINIMAL}[dlq]\ntopic = \"{{partition}}.dlq\"\n"),
            "dlq.topic",
            12,
            "unknown placeholder",
        ),
        // Broker mode: the broker names the topic, and dead-letters every REJECT.
        (
            format!("{MINIMAL}[dlq]\nmode = \"broker\"\ntopic = \"{{topic}}.dlq\"\n"),
            "dlq.topic",
            13,
            "errors.deadletterqueue.topic.name",
        ),
        (
            format!("{MINIMAL}[dlq]\nmode = \"broker\"\non-reject = false\n"),
            "dlq.on-reject",
            13,
            "the broker dead-letters every REJECT",
        ),
        (
            format!("{MINIMAL}[dlq]\nmode = \"kafka\"\n"),
            "dlq.mode",
            12,
            "expected one of: worker, broker",
        ),
        // A telemetry endpoint that is no URL.
        (
            format!("{MINIMAL}[telemetry]\notlp-endpoint = \"collector:4318\"\n"),
            "telemetry.otlp-endpoint",
            12,
            "expected an http:// or https:// URL",
        ),
        // A status line more often than anyone reads it.
        (
            format!("{MINIMAL}[telemetry]\nreport-every = \"1ms\"\n"),
            "telemetry.report-every",
            12,
            "expected at least 100ms",
        ),
        // The worker's dashboard without a listener to serve it on.
        (
            format!("{MINIMAL}[telemetry]\nui = true\n"),
            "telemetry.ui",
            12,
            "served on `telemetry.listen`, and none is set",
        ),
        // A dashboard off loopback without a token, actionable or not.
        (
            format!("{MINIMAL}[ui]\nallow-actions = true\nlisten = \"0.0.0.0:9400\"\n"),
            "ui.listen",
            13,
            "`ui.listen` = 0.0.0.0:9400 is not on loopback: set `ui.token` or `ui.token-file`",
        ),
        (
            format!("{MINIMAL}[ui]\nlisten = \"0.0.0.0:9400\"\n"),
            "ui.listen",
            12,
            "is not on loopback",
        ),
        (
            format!(
                "{MINIMAL}[telemetry]\nlisten = \"0.0.0.0:9464\"\nui = true\n[ui]\nallow-actions = true\n"
            ),
            "telemetry.ui",
            13,
            "`telemetry.listen` = 0.0.0.0:9464 is not on loopback",
        ),
        // A token that can be guessed.
        (
            format!("{MINIMAL}[ui]\ntoken = \"s3cr3t\"\n"),
            "ui.token",
            12,
            "expected at least 32 characters, found 6",
        ),
        (
            format!("{MINIMAL}[ui]\ntoken = \"t\"\ntoken-file = \"/run/token\"\n"),
            "ui.token-file",
            13,
            "set `token` or `token-file`, not both",
        ),
    ];
    assert!(cases.len() >= 8);
    for (text, key, line, says) in cases {
        let err = match parse(&text) {
            Ok(_) => panic!("expected an error for:\n{text}"),
            Err(err) => err,
        };
        assert_error(&err, key, line, says);
    }
    // Whole sections missing: no line to point at, but the key is named.
    let err = broken(|m| m.replace("[[route]]\ntopic = \"t\"\nhandler = \"noop\"\n", ""));
    assert!(err.to_string().contains("route"), "{err}");
    let err = broken(|m| m.replace("[worker]\ngroup = \"g\"\n", ""));
    assert_eq!(err.key(), "worker", "{err}");
}

/// MINIMAL with its route turned into an http route to `url` with the `extra` lines.
fn http_route(url: &str, extra: &str) -> String {
    MINIMAL.replace(
        "handler = \"noop\"",
        &format!("handler = \"http\"\nurl = \"{url}\"\n{extra}"),
    )
}

#[test]
fn tls_files_belong_to_https_routes_and_come_in_pairs() {
    let config = parse(&http_route(
        "https://hooks.example/send",
        "ca-file = \"ca.pem\"\ncert-file = \"/etc/c.pem\"\nkey-file = \"/etc/k.pem\"",
    ))
    .unwrap();
    let route = &config.routes[0];
    assert_eq!(route.ca_file.as_deref(), Some(Path::new("ca.pem")));
    assert_eq!(route.cert_file.as_deref(), Some(Path::new("/etc/c.pem")));
    assert_eq!(route.key_file.as_deref(), Some(Path::new("/etc/k.pem")));
    // Validation reads no file: the binary does, at start.
    assert_eq!(parse(&config.to_toml()).unwrap(), config);

    let https = "https://hooks.example/send";
    let cases = [
        (
            http_route(https, "cert-file = \"c.pem\""),
            "route[0].cert-file",
            12,
            "expected `key-file` too",
        ),
        (
            http_route(https, "key-file = \"k.pem\""),
            "route[0].key-file",
            12,
            "expected `cert-file` too",
        ),
        (
            http_route(https, "ca-file = \"\""),
            "route[0].ca-file",
            12,
            "expected the path of a PEM file",
        ),
        // Over plain http the files would never be used.
        (
            http_route("http://hooks.example/send", "ca-file = \"ca.pem\""),
            "route[0].ca-file",
            12,
            "applies to https:// URLs only",
        ),
        (
            MINIMAL.replace(
                "handler = \"noop\"",
                "handler = \"exec\"\ncommand = [\"x\"]\ncert-file = \"c.pem\"",
            ),
            "route[0].cert-file",
            12,
            "applies to handler = \"http\" only",
        ),
        (
            format!("{MINIMAL}[telemetry]\notlp-ca-file = \"ca.pem\"\n"),
            "telemetry.otlp-ca-file",
            12,
            "and none is set",
        ),
        (
            format!(
                "{MINIMAL}[telemetry]\notlp-endpoint = \"http://c:4318\"\notlp-ca-file = \"ca.pem\"\n"
            ),
            "telemetry.otlp-ca-file",
            13,
            "applies to an https:// `otlp-endpoint` only",
        ),
    ];
    for (text, key, line, says) in cases {
        let err = match parse(&text) {
            Ok(_) => panic!("expected an error for:\n{text}"),
            Err(err) => err,
        };
        assert_error(&err, key, line, says);
    }
    // An error about a route's url never quotes it: it may hold the endpoint's credentials.
    for (url, extra, says) in [
        (
            "ftp://user:pw-s3cret@hooks.example/x?token=t0k3n",
            "",
            "found the scheme \"ftp\"",
        ),
        (
            "user:pw-s3cret@hooks.example/x?token=t0k3n",
            "",
            "found no scheme",
        ),
        (
            "http://user:pw-s3cret@hooks.example/x?token=t0k3n",
            "ca-file = \"ca.pem\"",
            "this route's url is http://",
        ),
    ] {
        let err = parse(&http_route(url, extra)).expect_err(url).to_string();
        assert!(err.contains(says), "{err}");
        assert!(!err.contains("s3cret") && !err.contains("t0k3n"), "{err}");
    }
    let telemetry = format!(
        "{MINIMAL}[telemetry]\notlp-endpoint = \"https://c:4318\"\notlp-ca-file = \"ca.pem\"\n"
    );
    assert_eq!(
        parse(&telemetry).unwrap().telemetry.otlp_ca_file.as_deref(),
        Some(Path::new("ca.pem"))
    );
}

#[test]
fn route_safety_keys_have_careful_defaults() {
    let config = parse(ISSUE).unwrap();
    assert_eq!(config.routes[0].on_redirect, None, "retry unless set");
    assert_eq!(OnRedirect::default(), OnRedirect::Retry);
    assert_eq!(config.routes[1].env_pass(), DEFAULT_ENV_PASS);
    assert!(!DEFAULT_ENV_PASS.iter().any(|n| n.contains("SECRET")));
    let config = parse(REFERENCE).unwrap();
    assert_eq!(config.routes[0].on_redirect, Some(OnRedirect::Retry));
    let text = MINIMAL.replace(
        "handler = \"noop\"",
        "handler = \"exec\"\ncommand = [\"x\"]\nenv-pass = []",
    );
    assert!(parse(&text).unwrap().routes[0].env_pass().is_empty());
    let text = MINIMAL.replace(
        "handler = \"noop\"",
        "handler = \"http\"\nurl = \"http://x\"\non-redirect = \"reject\"",
    );
    assert_eq!(
        parse(&text).unwrap().routes[0].on_redirect,
        Some(OnRedirect::Reject)
    );
}

#[test]
fn syntax_errors_and_unreadable_files_are_errors_not_panics() {
    let err = parse("[kafka]\nbootstrap = \"x\"\n[worker\ngroup = 1").unwrap_err();
    assert_eq!(err.line(), Some(3), "{err}");
    assert!(
        err.to_string().starts_with("worker.toml:3: invalid TOML"),
        "{err}"
    );
    let err = Config::load(Path::new("/nonexistent/worker.toml")).unwrap_err();
    assert!(err.to_string().contains("cannot read"), "{err}");
}

#[test]
fn what_the_file_accepts_the_builder_accepts() {
    use std::convert::Infallible;

    use worker_core::testing::MemoryBroker;
    use worker_core::{Job, Worker};

    let edges = MINIMAL.replace(
        "group = \"g\"",
        "group = \"g\"\nconcurrency = 1\nmax-poll-records = 1\nrenew-at = 0.999\njob-timeout = \"1ms\"\n\
         [retry]\nmax-attempts = 1\nbackoff-initial = \"1ms\"\nbackoff-max = \"1ms\"\nbackoff-multiplier = 1.0",
    );
    for text in [REFERENCE, ISSUE, MINIMAL, edges.as_str()] {
        let config = parse(text).unwrap();
        let broker = MemoryBroker::new();
        let mut builder = config.configure(Worker::builder(broker.member("m")));
        if config.control.is_some() {
            // `run` follows the control topic; the routes' breakers only need controls.
            builder = builder.controls(worker_core::control::Controls::manual().0);
        }
        for section in &config.routes {
            builder = builder.add_route(config.route(
                section,
                tower::service_fn(|_: Job| async {
                    Ok::<_, Infallible>(worker_core::Outcome::Accept)
                }),
            ));
        }
        if let Err(err) = builder.build() {
            panic!("the builder refused a valid file: {err}\n{text}");
        }
    }
}

/// The file and the library refuse the same values with the same words (both apply
/// `worker_core::checks`): a rule changed on one side only fails here.
#[test]
fn the_file_and_the_builder_refuse_the_same_values() {
    use std::convert::Infallible;

    use worker_core::policy::Backoff;
    use worker_core::testing::MemoryBroker;
    use worker_core::{Job, Worker, WorkerBuilder};

    type Setter = Box<
        dyn Fn(
            WorkerBuilder<worker_core::testing::MemoryMember>,
        ) -> WorkerBuilder<worker_core::testing::MemoryMember>,
    >;
    let secs = Duration::from_secs;
    let backoff = |initial, max, factor| Backoff::exponential(initial, max).factor(factor);
    let cases: Vec<(&str, &str, Setter)> = vec![
        ("worker", "concurrency = 0", Box::new(|b| b.concurrency(0))),
        ("worker", "concurrency = 1", Box::new(|b| b.concurrency(1))),
        (
            "worker",
            "concurrency = 4294967296",
            Box::new(|b| b.concurrency(1 << 32)),
        ),
        (
            "worker",
            "max-poll-records = 0",
            Box::new(|b| b.max_poll_records(0)),
        ),
        (
            "worker",
            "max-poll-records = 1",
            Box::new(|b| b.max_poll_records(1)),
        ),
        ("worker", "renew-at = 0.0", Box::new(|b| b.renew_at(0.0))),
        ("worker", "renew-at = 0.01", Box::new(|b| b.renew_at(0.01))),
        ("worker", "renew-at = 1.0", Box::new(|b| b.renew_at(1.0))),
        ("worker", "renew-at = -0.5", Box::new(|b| b.renew_at(-0.5))),
        (
            "worker",
            "job-timeout = \"0s\"",
            Box::new(|b| b.job_timeout(Duration::ZERO)),
        ),
        (
            "worker",
            "job-timeout = \"1ms\"",
            Box::new(|b| b.job_timeout(Duration::from_millis(1))),
        ),
        (
            "worker",
            "max-delay = \"0s\"",
            Box::new(|b| b.max_delay(Duration::ZERO)),
        ),
        ("retry", "max-attempts = 0", Box::new(|b| b.max_attempts(0))),
        ("retry", "max-attempts = 1", Box::new(|b| b.max_attempts(1))),
        (
            "retry",
            "assume-delivery-limit = 1",
            Box::new(|b| b.assume_delivery_limit(1)),
        ),
        (
            "retry",
            "assume-delivery-limit = 2",
            Box::new(|b| b.assume_delivery_limit(2)),
        ),
        (
            "retry",
            "backoff-initial = \"0s\"",
            Box::new(move |b| b.backoff(backoff(Duration::ZERO, secs(300), 2.0))),
        ),
        (
            "retry",
            "backoff-initial = \"10s\"\nbackoff-max = \"5s\"",
            Box::new(move |b| b.backoff(backoff(secs(10), secs(5), 2.0))),
        ),
        (
            "retry",
            "backoff-multiplier = 0.5",
            Box::new(move |b| b.backoff(backoff(secs(1), secs(300), 0.5))),
        ),
        (
            "retry",
            "backoff-multiplier = 1.0",
            Box::new(move |b| b.backoff(backoff(secs(1), secs(300), 1.0))),
        ),
    ];
    for (section, line, set) in cases {
        let text = if section == "worker" {
            MINIMAL.replace("group = \"g\"", &format!("group = \"g\"\n{line}"))
        } else {
            format!("{MINIMAL}\n[{section}]\n{line}\n")
        };
        let file = parse(&text).map(|_| ()).map_err(|err| err.to_string());
        let broker = MemoryBroker::new();
        let builder = Worker::builder(broker.member("m")).route(
            "t",
            tower::service_fn(|_: Job| async { Ok::<_, Infallible>(worker_core::Outcome::Accept) }),
        );
        let library = set(builder)
            .build()
            .map(|_| ())
            .map_err(|err| err.to_string());
        match (&file, &library) {
            (Ok(()), Ok(())) => {}
            (Err(file), Err(library)) => {
                let why = |text: &str| text[text.find("expected").unwrap_or(0)..].trim().to_owned();
                assert_eq!(why(file), why(library), "{section}: {line}");
            }
            _ => panic!("{section}: {line}: the file says {file:?}, the library {library:?}"),
        }
    }
}

/// docs/binary.md shows the reference file whole: the copy there is the file itself.
#[test]
fn the_binary_guide_shows_the_reference_file_as_it_is() {
    let guide = include_str!("../../../../docs/binary.md");
    let block = guide
        .split("```toml\n")
        .find(|block| block.starts_with("# share-worker configuration: every key"))
        .and_then(|block| block.split("```").next())
        .expect("docs/binary.md shows the reference file in a ```toml block");
    assert!(
        block == REFERENCE,
        "docs/binary.md's copy of reference.toml differs from the file: copy the file into it"
    );
}

/// README.md's example configuration loads as it is.
#[test]
fn the_readme_configuration_loads() {
    let readme = include_str!("../../../../README.md");
    let block = readme
        .split("```toml\n")
        .find(|block| block.starts_with("# worker.toml"))
        .and_then(|block| block.split("```").next())
        .expect("README.md shows a worker.toml");
    let config = parse(block).unwrap_or_else(|err| panic!("README.md's worker.toml: {err}"));
    assert_eq!(config.routes[0].topic, "sms");
}

#[test]
fn broker_mode_has_no_worker_sink_and_worker_mode_names_its_default_topic() {
    let broker = parse(&format!("{MINIMAL}[dlq]\nmode = \"broker\"\n")).unwrap();
    assert_eq!(broker.dlq_mode(), Some(DlqMode::Broker));
    assert!(broker.dlq_topics().is_empty(), "the broker names its topic");
    assert!(broker.dlq_sink().unwrap().is_none());
    assert!(!broker.to_toml().contains("{topic}.dlq"));
    assert_eq!(parse(&broker.to_toml()).unwrap(), broker);

    let worker = parse(&format!("{MINIMAL}[dlq]\n")).unwrap();
    assert_eq!(worker.dlq_mode(), Some(DlqMode::Worker));
    assert_eq!(worker.dlq_topics(), ["t.dlq"]);
    let printed = worker.to_toml();
    assert!(printed.contains("mode = \"worker\""), "{printed}");
    assert!(printed.contains("topic = \"{topic}.dlq\""), "{printed}");
    assert_eq!(parse(&printed).unwrap(), worker);
}

/// Read-only by default; an actionable dashboard off loopback is fine with a token, and the
/// token is never printed.
#[test]
fn the_dashboard_is_read_only_by_default_and_its_token_is_never_shown() {
    let config = parse(MINIMAL).unwrap();
    assert!(!config.ui.allow_actions);
    assert!(!config.telemetry.ui);
    assert_eq!(config.ui.listen.to_string(), "127.0.0.1:9400");
    assert_eq!(config.ui_token().unwrap(), None);
    let text = format!(
        "{MINIMAL}[ui]\nallow-actions = true\nlisten = \"0.0.0.0:9400\"\nbehind-tls-proxy = true\ntoken = \"s3cr3t-ui-0123456789abcdef-0123456\"\n"
    );
    let config = parse(&text).unwrap();
    assert_eq!(
        config.ui_token().unwrap().map(|t| t.expose().to_owned()),
        Some("s3cr3t-ui-0123456789abcdef-0123456".to_owned())
    );
    assert!(!format!("{config:?}").contains("s3cr3t-ui"));
    assert!(!config.to_toml().contains("s3cr3t-ui"));
}

#[test]
fn rate_limits_key_concurrency_and_delay_topics_are_read() {
    let text = MINIMAL.replace(
        "group = \"g\"",
        "group = \"g\"\nrate = \"1000/s\"\nburst = 50",
    ) + "rate = \"100/s\"\nrate-per-key = \"1/s\"\nburst-per-key = 1\nkey-concurrency = 1\n\
           [delay]\nmax-hold = \"10s\"\n";
    let config = parse(&text).unwrap();
    assert_eq!(config.worker.rate.map(|r| r.count()), Some(1000));
    assert_eq!(config.worker.burst, Some(50));
    let route = &config.routes[0];
    assert_eq!(
        route.rate_per_key.map(|r| r.period()),
        Some(Duration::from_secs(1))
    );
    assert_eq!(route.key_concurrency, Some(1));
    assert_eq!(
        config.delay_topics(),
        ["t.delay", "t.delay.hours", "t.delay.days"]
    );
    let delay = config.delay.as_ref().unwrap();
    assert_eq!(
        (delay.topic.as_str(), delay.max_hold),
        ("{topic}.delay", Duration::from_secs(10))
    );
    // `to_toml` prints what parses back.
    assert_eq!(parse(&config.to_toml()).unwrap(), config);
    let guarded =
        parse(&(MINIMAL.to_owned() + "cool-down = true\nbreaker = { min-calls = 5 }\n[control]\n"))
            .unwrap();
    let breaker = guarded.routes[0].breaker.expect("a breaker");
    assert_eq!(
        breaker.breaker(),
        worker_core::Breaker {
            min_calls: 5,
            ..worker_core::Breaker::default()
        },
        "the keys left out are the library's defaults"
    );
    assert!(guarded.routes[0].cool_down);
    let batched = parse(
        &(MINIMAL.replace("\"noop\"", "\"http\"\nurl = \"http://127.0.0.1:1/\"")
            + "batch = { max = 64, format = \"ndjson\" }\n"),
    );
    let batch = batched.unwrap().routes[0].batch.expect("a batch");
    assert_eq!(
        (batch.max, batch.linger, batch.format, batch.by_key),
        (64, Duration::from_millis(200), BatchFormat::Ndjson, false)
    );
    let too_big = parse(
        &(MINIMAL.replace("\"noop\"", "\"http\"\nurl = \"http://127.0.0.1:1/\"")
            + "batch = { max = 65 }\n"),
    )
    .unwrap_err()
    .to_string();
    assert!(
        too_big.contains("`route[0].batch.max`: a batch fills only with records the worker holds"),
        "{too_big}"
    );
    let lanes = parse(&(MINIMAL.to_owned() + "priority = 0\nweight = 3\n")).unwrap();
    assert_eq!(
        (lanes.routes[0].priority, lanes.routes[0].weight),
        (Some(0), Some(3))
    );
    let per_group =
        parse(&(MINIMAL.to_owned() + "[delay]\ntopic = \"{topic}.{group}.delay\"\n")).unwrap();
    assert_eq!(
        per_group.delay_topics(),
        ["t.g.delay", "t.g.delay.hours", "t.g.delay.days"]
    );
}

#[test]
fn broken_limits_and_delays_name_the_key_and_the_line() {
    // MINIMAL's route ends at line 10; a key appended there is on line 11.
    let route = |extra: &str| MINIMAL.to_owned() + extra;
    let cases: Vec<(String, &str, usize, &str)> = vec![
        (
            route("rate = \"fast\"\n"),
            "route[0].rate",
            11,
            "expected a rate like \"100/s\"",
        ),
        (route("rate = \"0/s\"\n"), "route[0].rate", 11, "above 0"),
        (
            route("burst = 5\n"),
            "route[0].burst",
            11,
            "applies with `rate` only",
        ),
        (
            route("rate-per-key = \"1/s\"\nburst-per-key = 0\n"),
            "route[0].burst-per-key",
            12,
            "expected at least 1",
        ),
        (
            route("key-concurrency = 0\n"),
            "route[0].key-concurrency",
            11,
            "expected at least 1",
        ),
        (
            route("batch = { max = 0 }\n"),
            "route[0].batch.max",
            11,
            "expected 1 to 10000, found 0",
        ),
        (
            route("batch = { max = 2 }\n"),
            "route[0].batch",
            11,
            "applies to handler = \"http\" only",
        ),
        (
            route("weight = 0\n"),
            "route[0].weight",
            11,
            "expected 1 to 1000, found 0",
        ),
        (
            route("priority = 256\n"),
            "route[0].priority",
            11,
            "expected u8",
        ),
        (
            route("[delay]\ntopic = \"delays\"\n"),
            "delay.topic",
            12,
            "must contain {topic}",
        ),
        (
            route("[delay]\nmax-hold = \"0s\"\n"),
            "delay.max-hold",
            12,
            "expected a duration above 0",
        ),
        (
            route("[delay]\nmax-holds = \"1m\"\n"),
            "delay.max-holds",
            12,
            "unknown key",
        ),
        (
            MINIMAL.replace("group = \"g\"", "group = \"g\"\nburst = 3"),
            "worker.burst",
            7,
            "applies with `rate` only",
        ),
        // The control topic is a topic of its own, with a name Kafka accepts.
        (
            route("[control]\ntopic = \"t\"\n"),
            "control.topic",
            12,
            "is a route topic",
        ),
        (
            route("[dlq]\ntopic = \"{topic}.dlq\"\n[control]\ntopic = \"t.dlq\"\n"),
            "control.topic",
            14,
            "is a dead-letter topic",
        ),
        (
            route("[delay]\ntopic = \"{topic}.later\"\n[control]\ntopic = \"t.later\"\n"),
            "control.topic",
            14,
            "is a delay topic",
        ),
        (
            route("[control]\ntopic = \"{group}/control\"\n"),
            "control.topic",
            12,
            "'/' is not allowed",
        ),
        (
            route("[control]\ntopic = \"{grp}.control\"\n"),
            "control.topic",
            12,
            "'{' is not allowed",
        ),
        // A breaker and a cool-down pause the route through the control topic.
        (
            route("breaker = { min-calls = 5 }\n"),
            "route[0].breaker",
            11,
            "add a [control] table",
        ),
        (
            route("cool-down = true\n"),
            "route[0].cool-down",
            11,
            "add a [control] table",
        ),
        (
            route("breaker = { failure-ratio = 1.5 }\n[control]\n"),
            "route[0].breaker",
            11,
            "`failure-ratio` 1.5 is not above 0",
        ),
        (
            route("breaker = { open-for = \"10ms\" }\n[control]\n"),
            "route[0].breaker",
            11,
            "shorter than 1s",
        ),
        (
            route("breaker = { ratio = 0.5 }\n[control]\n"),
            "route[0].breaker.ratio",
            11,
            "unknown",
        ),
        // [[cron]]: the table starts on line 11, its keys from line 12.
        (
            route("[[cron]]\nname = \"r\"\ntopic = \"t\"\n"),
            "cron[0].every",
            11,
            "expected `every` or `schedule`, one of them",
        ),
        (
            route("[[cron]]\nname = \"r\"\ntopic = \"t\"\nevery = \"500ms\"\n"),
            "cron[0].every",
            14,
            "expected at least 1s",
        ),
        (
            route("[[cron]]\nname = \"r\"\ntopic = \"t\"\nschedule = \"at noon\"\n"),
            "cron[0].schedule",
            14,
            "not a cron expression",
        ),
        (
            route("[[cron]]\nname = \"r\"\ntopic = \"t\"\nschedule = \"0 0 30 2 *\"\n"),
            "cron[0].schedule",
            14,
            "never matches a time",
        ),
        (
            route(
                "[[cron]]\nname = \"r\"\ntopic = \"t\"\nschedule = \"0 9 * * *\"\ntimezone = \"Mars\"\n",
            ),
            "cron[0].timezone",
            15,
            "not an IANA time zone",
        ),
        (
            route("[[cron]]\nname = \"r\"\ntopic = \"t\"\nevery = \"1m\"\ntimezone = \"UTC\"\n"),
            "cron[0].timezone",
            15,
            "applies with `schedule` only",
        ),
        (
            route("[[cron]]\nname = \"a report\"\ntopic = \"t\"\nevery = \"1m\"\n"),
            "cron[0].name",
            12,
            "expected 1 to 32 of a-z A-Z 0-9 . _ -",
        ),
        (
            route(
                "[[cron]]\nname = \"r\"\ntopic = \"t\"\nevery = \"1m\"\n[[cron]]\nname = \"r\"\ntopic = \"u\"\nevery = \"1m\"\n",
            ),
            "cron[1].name",
            16,
            "two [[cron]] have this name",
        ),
    ];
    for (text, key, line, says) in cases {
        let err = match parse(&text) {
            Ok(_) => panic!("expected an error for:\n{text}"),
            Err(err) => err,
        };
        assert_error(&err, key, line, says);
    }
}

/// A file that sets nothing gets the library's defaults: the TOML layer has none of its own.
#[test]
fn unset_keys_take_the_librarys_defaults() {
    use worker_core::defaults;
    let config = parse(&format!("{MINIMAL}[delay]\n")).unwrap();
    let (kafka, worker) = (&config.kafka, &config.worker);
    assert_eq!(kafka.client_id, defaults::CLIENT_ID);
    assert_eq!(kafka.max_wait, defaults::MAX_WAIT);
    assert_eq!(kafka.request_timeout, defaults::REQUEST_TIMEOUT);
    assert_eq!(worker.concurrency, defaults::CONCURRENCY);
    assert_eq!(worker.max_poll_records, defaults::MAX_POLL_RECORDS);
    assert_eq!(worker.renew_at, defaults::RENEW_AT);
    assert_eq!(worker.job_timeout, defaults::JOB_TIMEOUT);
    assert_eq!(worker.shutdown_grace, defaults::SHUTDOWN_GRACE);
    assert_eq!(worker.max_delay, defaults::MAX_DELAY);
    assert_eq!(config.retry.backoff_initial, defaults::BACKOFF_INITIAL);
    assert_eq!(config.retry.backoff_max, defaults::BACKOFF_MAX);
    assert_eq!(config.retry.backoff_multiplier, defaults::BACKOFF_FACTOR);
    let delay = config.delay.as_ref().expect("a [delay] table");
    assert_eq!(delay.max_hold, defaults::MAX_HOLD);
}
