//! The binary and the broker's own dead-letter queue (Kafka 4.4's KIP-1191), on a real Kafka 4.4
//! broker (`KAFKA_DLQ_BOOTSTRAP`, started by `scripts/test.sh`): `check` reports it and warns of
//! the double write next to the worker's sink; `run` in broker mode REJECTs for it and logs every
//! reason; `dlq replay` replays its letters, reading a letter's original from the source topic by
//! offset when the letter does not hold it, and fails clearly when retention took the original.
//! The refusal of broker mode runs on `KAFKA_BOOTSTRAP` too, whatever release `KAFKA_VERSION` says
//! it is (default 4.2.2).

use std::time::Duration;

use rdkafka::admin::{AdminOptions, NewTopic, TopicReplication};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};
use serde_json::Value;
use worker_core::dlq::headers;
use worker_core::kafka::{Admin, BrokerDlq, KafkaSource, OffsetReset};
use worker_core::source::AckKind;

use crate::support::*;

const TOPIC_KEY: &str = "errors.deadletterqueue.topic.name";
const COPY_KEY: &str = "errors.deadletterqueue.copy.record.enable";

/// The Kafka 4.4 broker (see the suite's docs); without it the test fails saying so.
fn dlq_broker() -> String {
    std::env::var("KAFKA_DLQ_BOOTSTRAP").unwrap_or_else(|_| {
        panic!(
            "KAFKA_DLQ_BOOTSTRAP is not set: start a Kafka 4.4 broker with \
             `KAFKA_VERSION=4.4.0 KAFKA_PORT=9672 scripts/kafka.sh start` and set it to \
             127.0.0.1:9672 (scripts/test.sh does)"
        )
    })
}

/// Creates `topic` (one partition) on `bootstrap` with `configs`.
async fn create_topic(bootstrap: &str, topic: &str, configs: &[(&str, &str)]) {
    let mut new = NewTopic::new(topic, 1, TopicReplication::Fixed(1));
    for (key, value) in configs {
        new = new.set(key, value);
    }
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    for result in admin_client(bootstrap)
        .create_topics(&[new], &options)
        .await
        .expect("creating a topic")
    {
        result.unwrap_or_else(|(name, code)| panic!("creating {name}: {code}"));
    }
}

/// A source topic, a dead-letter topic that takes a share group's letters, and `groups` share
/// groups writing to it (reading from the start), the first `copying` of them copying records.
async fn broker_dlq_setup(
    name: &str,
    groups: usize,
    copying: usize,
) -> (String, String, Vec<String>) {
    let bootstrap = dlq_broker();
    let (topic, dlq) = (unique(name), unique(&format!("dlq.{name}")));
    create_topic(&bootstrap, &topic, &[]).await;
    create_topic(
        &bootstrap,
        &dlq,
        &[("errors.deadletterqueue.group.enable", "true")],
    )
    .await;
    let admin = Admin::connect(bootstrap.as_str())
        .await
        .expect("an admin client");
    let mut names = Vec::new();
    for i in 0..groups {
        let group = unique(&format!("{name}-group"));
        for (key, value) in [
            ("share.auto.offset.reset", "earliest"),
            (TOPIC_KEY, dlq.as_str()),
            (COPY_KEY, if i < copying { "true" } else { "false" }),
        ] {
            admin
                .set_group_config(&group, key, value)
                .await
                .expect("a group config");
        }
        wait_broker_dlq(&admin, &group, "is on", BrokerDlq::is_on).await;
        names.push(group);
    }
    (topic, dlq, names)
}

/// A record to produce: key, value and headers.
type Produced<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)]);

/// Produces `records` to partition 0 of `topic`.
async fn produce(bootstrap: &str, topic: &str, records: &[Produced<'_>]) {
    let producer: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("acks", "all")
        .create()
        .expect("a producer");
    for (key, value, extra) in records {
        let mut headers = OwnedHeaders::new();
        for (k, v) in *extra {
            headers = headers.insert(Header {
                key: k,
                value: Some(*v),
            });
        }
        producer
            .send(
                FutureRecord::to(topic)
                    .partition(0)
                    .key(*key)
                    .payload(*value)
                    .headers(headers),
                Duration::from_secs(30),
            )
            .await
            .expect("a produced record");
    }
}

/// Reads `count` records of `topic` as `group` and settles each: REJECT the offsets in `reject`,
/// ACCEPT the rest. Returns once the broker answered every acknowledgement.
async fn settle(group: &str, topic: &str, count: usize, reject: &[i64]) {
    let source = KafkaSource::builder(dlq_broker(), group)
        .topic(topic)
        .offset_reset(OffsetReset::Earliest)
        .build()
        .await
        .expect("a share source");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut settled = 0;
    while settled < count {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{settled} of {count} records of {topic}"
        );
        for delivery in source.fetch(10).await.expect("a fetch") {
            let kind = if reject.contains(&delivery.id.offset) {
                AckKind::Reject
            } else {
                AckKind::Accept
            };
            source
                .acknowledge(&delivery.id, kind)
                .await
                .expect("an acknowledgement");
            settled += 1;
        }
    }
    source.close().await.expect("closing the source");
}

/// The records of `topic` on the 4.4 broker once there are `count` (letters are written after
/// the REJECT is answered).
async fn wait_records(topic: &str, count: usize) -> Vec<Record> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let found = records_at(&dlq_broker(), topic).await;
        if found.len() >= count {
            return found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of {count} records in {topic}",
            found.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A config on `bootstrap` for `group` with one route on `topic` and the given `[dlq]` table.
fn broker_config(bootstrap: &str, group: &str, topic: &str, route: &str, dlq: &str) -> String {
    format!(
        r#"
[kafka]
bootstrap = "{bootstrap}"
client-id = "cli-broker-dlq"

[worker]
group = "{group}"
concurrency = 8

[retry]
backoff-initial = "100ms"
backoff-max = "1s"

{dlq}

[telemetry]
log-format = "json"

[[route]]
topic = "{topic}"
{route}
"#
    )
}

#[tokio::test]
async fn check_reports_the_broker_dlq_and_warns_when_the_worker_writes_too() {
    let bootstrap = dlq_broker();
    let scratch = Scratch::new();
    let (topic, dlq, groups) = broker_dlq_setup("cli-bdlq-check", 1, 1).await;
    let group = &groups[0];
    let noop = "handler = \"noop\"";
    let worker = scratch.write(
        "worker.toml",
        &broker_config(&bootstrap, group, &topic, noop, "[dlq]\nmode = \"worker\""),
    );
    let worker = worker.to_str().unwrap();
    assert_ok(
        &share_worker(&["setup", "--config", worker], &[]).await,
        "setup",
    );
    let out = share_worker(&["check", "--config", worker], &[]).await;
    assert_ok(&out, "check");
    let stdout = text(&out.stdout);
    for line in [
        format!(
            "# broker dead-letter queue (KIP-1191): on for share group {group}: the broker writes rejected and over-limit records to {dlq} with their key and value"
        ),
        format!(
            "# warning: the worker's dead-letter sink (dlq.mode = \"worker\": {topic}.dlq) and the broker's ({dlq}) are both on: every dead letter is written twice"
        ),
    ] {
        assert!(stdout.contains(&line), "no {line:?} in:\n{stdout}");
    }

    // Broker mode on that group: no warning.
    let broker = scratch.write(
        "broker.toml",
        &broker_config(&bootstrap, group, &topic, noop, "[dlq]\nmode = \"broker\""),
    );
    let out = share_worker(&["check", "--config", broker.to_str().unwrap()], &[]).await;
    assert_ok(&out, "check in broker mode");
    let stdout = text(&out.stdout);
    assert!(!stdout.contains("# warning"), "{stdout}");
    assert!(stdout.contains("mode = \"broker\""), "{stdout}");

    // Broker mode on a group without a broker DLQ fails, as `run` would.
    let bare = unique("cli-bdlq-check-bare");
    let refused = scratch.write(
        "refused.toml",
        &broker_config(&bootstrap, &bare, &topic, noop, "[dlq]\nmode = \"broker\""),
    );
    let out = share_worker(&["check", "--config", refused.to_str().unwrap()], &[]).await;
    assert!(!out.status.success(), "{}", text(&out.stdout));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("dlq.mode = \"broker\" needs the broker's dead-letter queue")
            && stderr.contains(&bare)
            && stderr.contains(TOPIC_KEY),
        "{stderr}"
    );
}

#[tokio::test]
async fn run_in_broker_mode_rejects_for_the_broker_and_logs_each_reason() {
    let bootstrap = dlq_broker();
    let scratch = Scratch::new();
    let (topic, dlq, groups) = broker_dlq_setup("cli-bdlq-run", 1, 1).await;
    produce(
        &bootstrap,
        &topic,
        &[("a", "+15550000", &[]), ("b", "not a number", &[])],
    )
    .await;
    let route = r#"handler = "exec"
command = ["sh", "-c", "read v; case $v in +*) exit 0;; *) echo \"bad number: $v\" >&2; exit 2;; esac"]
reject-exit-codes = [2]"#;
    let cfg = scratch.write(
        "broker.toml",
        &broker_config(
            &bootstrap,
            &groups[0],
            &topic,
            route,
            "[dlq]\nmode = \"broker\"",
        ),
    );
    let stats = scratch.0.join("stats.json");
    let out = share_worker(
        &[
            "run",
            "--config",
            cfg.to_str().unwrap(),
            "--exit-when-idle",
            "3s",
            "--stats-json",
            stats.to_str().unwrap(),
        ],
        &[],
    )
    .await;
    assert_ok(&out, "run");
    let stderr = text(&out.stderr);
    assert!(stderr.contains("(+1 to the broker's dlq)"), "{stderr}");
    let stats: Value = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    assert_eq!(
        (
            count(&stats, "accepted"),
            count(&stats, "dlq_broker"),
            count(&stats, "dlq")
        ),
        (1, 1, 0)
    );

    // One log line names the record, the reason and the error the broker's letter lacks.
    let handoffs: Vec<Value> = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| {
            l["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("for the broker's dead-letter queue"))
        })
        .collect();
    assert_eq!(handoffs.len(), 1, "{stderr}");
    let fields = &handoffs[0]["fields"];
    assert_eq!(fields["topic"], Value::from(topic.as_str()), "{fields}");
    assert_eq!(
        (fields["partition"].as_i64(), fields["offset"].as_i64()),
        (Some(0), Some(1)),
        "{fields}"
    );
    assert_eq!(fields["reason"], "rejected", "{fields}");
    assert!(
        fields["error"]
            .as_str()
            .is_some_and(|e| e.contains("bad number: not a number")),
        "{fields}"
    );

    let letters = wait_records(&dlq, 1).await;
    let letter = &letters[0];
    assert_eq!(letter.header(headers::BROKER_OFFSET), Some(&b"1"[..]));
    assert_eq!(
        letter.header(headers::BROKER_MESSAGE),
        Some(headers::BROKER_REJECTED.as_bytes())
    );
    assert_eq!(letter.value_text(), "not a number");
}

/// Waits up to 15 s until what the broker says of `group`'s dead-letter queue is `ready`.
async fn wait_broker_dlq(
    admin: &Admin,
    group: &str,
    what: &str,
    ready: impl Fn(&BrokerDlq) -> bool,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !ready(&admin.broker_dlq(group).await.expect("the broker DLQ")) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the broker DLQ of {group} never {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Names `dlq` as `group`'s broker dead-letter topic and waits until the broker says so.
async fn name_broker_dlq(admin: &Admin, group: &str, dlq: &str) {
    admin
        .set_group_config(group, TOPIC_KEY, dlq)
        .await
        .expect("a group config");
    wait_broker_dlq(admin, group, &format!("names {dlq}"), |d| {
        d.topic.as_deref() == Some(dlq)
    })
    .await;
}

#[tokio::test]
async fn setup_in_broker_mode_creates_the_dead_letter_topic_the_group_names() {
    let bootstrap = dlq_broker();
    let admin = Admin::connect(bootstrap.as_str())
        .await
        .expect("an admin client");
    let scratch = Scratch::new();
    let topic = unique("cli-bdlq-setup");
    let (dlq, group) = (unique("dlq.cli-bdlq-setup"), unique("cli-bdlq-setup-group"));
    name_broker_dlq(&admin, &group, &dlq).await;
    let cfg = scratch.write(
        "broker.toml",
        &broker_config(
            &bootstrap,
            &group,
            &topic,
            "handler = \"noop\"",
            "[dlq]\nmode = \"broker\"",
        ),
    );
    let cfg = cfg.to_str().unwrap();
    let on = format!("# broker dead-letter queue (KIP-1191): on for share group {group}");

    let out = share_worker(&["setup", "--config", cfg], &[]).await;
    assert_ok(&out, "setup");
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(&format!(
            "topic {dlq}: created (3 partitions, replication 1, errors.deadletterqueue.group.enable=true)"
        )) && stdout.contains(&on),
        "{stdout}"
    );
    assert_ok(
        &share_worker(&["check", "--config", cfg], &[]).await,
        "check in broker mode after setup",
    );
    // Once there, it is left as it is.
    let out = share_worker(&["setup", "--config", cfg], &[]).await;
    assert_ok(&out, "setup again");
    let stdout = text(&out.stdout);
    assert!(
        !stdout.contains(&format!("topic {dlq}: created")) && stdout.contains(&on),
        "{stdout}"
    );

    // A name the broker refuses (not under the cluster's `dlq.` prefix) is not created: said.
    let (refused, other) = (
        unique("cli-bdlq-setup-refused"),
        unique("cli-bdlq-setup-other"),
    );
    name_broker_dlq(&admin, &other, &refused).await;
    let cfg = scratch.write(
        "refused.toml",
        &broker_config(
            &bootstrap,
            &other,
            &topic,
            "handler = \"noop\"",
            "[dlq]\nmode = \"broker\"",
        ),
    );
    let out = share_worker(&["setup", "--config", cfg.to_str().unwrap()], &[]).await;
    assert_ok(&out, "setup with a refused name");
    let stdout = text(&out.stdout);
    assert!(
        !stdout.contains(&format!("topic {refused}: created"))
            && stdout.contains("# warning: dlq.mode = \"broker\" cannot run yet")
            && stdout.contains("does not start with the cluster's"),
        "{stdout}"
    );
}

/// A group whose broker dead-letter topic is the route's own topic, or its delay topic, would
/// hand every REJECT back as work: `setup` refuses it, naming the topic.
#[tokio::test]
async fn setup_refuses_a_broker_dlq_the_worker_reads() {
    let bootstrap = dlq_broker();
    let admin = Admin::connect(bootstrap.as_str())
        .await
        .expect("an admin client");
    let scratch = Scratch::new();
    let topic = unique("dlq.cli-bdlq-loop");
    for (i, named) in [topic.clone(), format!("{topic}.delay")].iter().enumerate() {
        let group = unique("cli-bdlq-loop-group");
        name_broker_dlq(&admin, &group, named).await;
        let cfg = scratch.write(
            &format!("loop-{i}.toml"),
            &broker_config(
                &bootstrap,
                &group,
                &topic,
                "handler = \"noop\"",
                "[dlq]\nmode = \"broker\"\n\n[delay]",
            ),
        );
        let out = share_worker(&["setup", "--config", cfg.to_str().unwrap()], &[]).await;
        assert!(!out.status.success(), "setup accepted {named}");
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains(&format!(
                "the broker's dead-letter topic (errors.deadletterqueue.topic.name) is {named}, which the worker reads"
            )),
            "{stderr}"
        );
    }
}

#[tokio::test]
async fn run_refuses_broker_mode_without_a_broker_dlq() {
    let version = std::env::var("KAFKA_VERSION").unwrap_or_else(|_| "4.2.2".to_owned());
    let older = version.starts_with("4.2.") || version.starts_with("4.3.");
    let scratch = Scratch::new();
    let topic = unique("cli-bdlq-refused");
    let group = unique("cli-bdlq-refused-group");
    let cfg = scratch.write(
        "broker.toml",
        &broker_config(
            &bootstrap(),
            &group,
            &topic,
            "handler = \"noop\"",
            "[dlq]\nmode = \"broker\"",
        ),
    );
    let cfg = cfg.to_str().unwrap();
    assert_ok(
        &share_worker(&["setup", "--config", cfg], &[]).await,
        "setup",
    );
    let out = share_worker(&["run", "--config", cfg, "--exit-when-idle", "3s"], &[]).await;
    assert!(!out.status.success(), "broker mode ran on Kafka {version}");
    let stderr = text(&out.stderr);
    let says = if older {
        "older than Kafka 4.4"
    } else {
        "is not set"
    };
    assert!(
        stderr.contains(&format!("share group {group}: broker dead letters"))
            && stderr.contains(TOPIC_KEY)
            && stderr.contains(says),
        "Kafka {version}: {stderr}"
    );
}

#[tokio::test]
async fn replay_takes_broker_letters_with_the_record_or_reads_it_by_offset() {
    let bootstrap = dlq_broker();
    let scratch = Scratch::new();
    let (topic, dlq, groups) = broker_dlq_setup("cli-bdlq-replay", 2, 1).await;
    produce(
        &bootstrap,
        &topic,
        &[
            ("k0", "copied", &[("h", "0")]),
            ("k1", "original", &[("h", "1")]),
        ],
    )
    .await;
    // The copying group rejects offset 0, the other offset 1: one letter of each kind.
    settle(&groups[0], &topic, 2, &[0]).await;
    settle(&groups[1], &topic, 2, &[1]).await;
    let letters = wait_records(&dlq, 2).await;
    assert!(
        letters.iter().any(|l| l.value.is_none()) && letters.iter().any(|l| l.value.is_some()),
        "{letters:?}"
    );

    // A configuration replays the letters of its own group only: one per group here.
    let configs: Vec<String> = groups
        .iter()
        .enumerate()
        .map(|(i, group)| {
            let cfg = scratch.write(
                &format!("replay-{i}.toml"),
                &broker_config(
                    &bootstrap,
                    group,
                    &topic,
                    "handler = \"noop\"",
                    "[dlq]\nmode = \"broker\"",
                ),
            );
            cfg.to_str().unwrap().to_owned()
        })
        .collect();
    let cfg = configs[0].as_str();
    let out = share_worker(
        &[
            "dlq",
            "replay",
            "--config",
            cfg,
            "--topic",
            &dlq,
            "--dry-run",
        ],
        &[],
    )
    .await;
    assert_ok(&out, "a dry run");
    let stdout = text(&out.stdout);
    assert_eq!(
        stdout.matches("(reason broker_rejected)").count(),
        1,
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "a broker's letter of the group \"{}\" (__dlq.errors.group), not of the configured group",
            groups[1]
        )),
        "{stdout}"
    );
    let out = share_worker(
        &[
            "dlq",
            "replay",
            "--config",
            cfg,
            "--topic",
            &dlq,
            "--reason",
            "broker_delivery_limit",
        ],
        &[],
    )
    .await;
    assert_ok(&out, "a replay of another reason");
    assert!(
        text(&out.stdout).contains("replayed 0, skipped 2 (other reason 2"),
        "{}",
        text(&out.stdout)
    );

    // The letter without the record is only a pointer: followed when the operator says so.
    let out = share_worker(
        &["dlq", "replay", "--config", &configs[1], "--topic", &dlq],
        &[],
    )
    .await;
    assert_ok(&out, "a replay that does not follow offsets");
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("replayed 0, skipped 0")
            && stdout.contains("refused 2")
            && stdout.contains(&format!(
                "a broker's letter without the record: its __dlq.errors.topic, __dlq.errors.partition and __dlq.errors.offset point at {topic}/0@1"
            )),
        "{stdout}"
    );
    assert_eq!(
        records_at(&bootstrap, &topic).await.len(),
        2,
        "nothing replayed"
    );
    for (cfg, extra) in [
        (&configs[0], None),
        (&configs[1], Some("--follow-broker-offsets")),
    ] {
        let args = [
            &["dlq", "replay", "--config", cfg, "--topic", &dlq][..],
            extra.as_slice(),
        ]
        .concat();
        let out = share_worker(&args, &[]).await;
        assert_ok(&out, "replay");
        assert!(
            text(&out.stdout).contains("replayed 1, skipped 0"),
            "{}",
            text(&out.stdout)
        );
    }
    let all = records_at(&bootstrap, &topic).await;
    assert_eq!(all.len(), 4, "{all:?}");
    let replayed = |value: &str| all[2..].iter().find(|r| r.value_text() == value);
    let copied = replayed("copied").expect("the copied letter, replayed");
    assert_eq!(copied.key.as_deref(), Some(&b"k0"[..]));
    assert_eq!(copied.header("h"), None, "the broker never copies headers");
    assert_eq!(copied.header("share.replay.count"), Some(&b"1"[..]));
    let read = replayed("original").expect("the original of the headers-only letter, replayed");
    assert_eq!(read.key.as_deref(), Some(&b"k1"[..]));
    assert_eq!(
        read.header("h"),
        Some(&b"1"[..]),
        "read from the source topic, headers and all"
    );
    assert!(
        read.headers
            .iter()
            .all(|(k, _)| !k.starts_with(headers::BROKER_PREFIX)),
        "{read:?}"
    );

    let out = share_worker(&["dlq", "replay", "--config", cfg, "--topic", &dlq], &[]).await;
    assert_ok(&out, "a second replay");
    assert!(
        text(&out.stdout).contains("already replayed 2"),
        "{}",
        text(&out.stdout)
    );
}

#[tokio::test]
async fn replay_fails_clearly_when_retention_took_a_broker_letters_original() {
    let bootstrap = dlq_broker();
    let scratch = Scratch::new();
    let (topic, dlq, groups) = broker_dlq_setup("cli-bdlq-gone", 1, 0).await;
    produce(
        &bootstrap,
        &topic,
        &[("k0", "lost", &[]), ("k1", "kept", &[])],
    )
    .await;
    settle(&groups[0], &topic, 2, &[0]).await;
    let letters = wait_records(&dlq, 1).await;
    assert!(
        letters[0].value.is_none(),
        "a headers-only letter: {letters:?}"
    );
    // What retention does to old segments, done at once: delete everything before offset 2.
    let mut before = TopicPartitionList::new();
    before
        .add_partition_offset(&topic, 0, Offset::Offset(2))
        .unwrap();
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let deleted = admin_client(&bootstrap)
        .delete_records(&before, &options)
        .await
        .expect("DeleteRecords");
    assert_eq!(
        deleted.elements()[0].offset(),
        Offset::Offset(2),
        "{deleted:?}"
    );

    let cfg = scratch.write(
        "replay.toml",
        &broker_config(
            &bootstrap,
            &groups[0],
            &topic,
            "handler = \"noop\"",
            "[dlq]\nmode = \"broker\"",
        ),
    );
    let out = share_worker(
        &[
            "dlq",
            "replay",
            "--config",
            cfg.to_str().unwrap(),
            "--topic",
            &dlq,
            "--follow-broker-offsets",
        ],
        &[],
    )
    .await;
    assert!(!out.status.success(), "{}", text(&out.stdout));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        stdout.contains("replayed 0,") && stdout.contains("failed 1"),
        "{stdout}"
    );
    let letter = format!("{dlq}/0@{}", letters[0].offset);
    for says in [
        letter.as_str(),
        &format!("its original {topic}/0@0 cannot be read"),
        &format!("{topic}/0@0 is gone: {topic}/0 now starts at offset 2"),
    ] {
        assert!(stderr.contains(says), "no {says:?} in:\n{stderr}");
    }
    assert_eq!(
        records_at(&bootstrap, &dlq).await.len(),
        1,
        "the letter is left as it was, unmarked"
    );
}

#[tokio::test]
async fn the_dashboard_lists_the_groups_broker_letters_by_the_brokers_reason() {
    let bootstrap = dlq_broker();
    let scratch = Scratch::new();
    let (topic, dlq, groups) = broker_dlq_setup("cli-bdlq-ui", 1, 0).await;
    produce(&bootstrap, &topic, &[("k0", "poison", &[])]).await;
    settle(&groups[0], &topic, 1, &[0]).await;
    wait_records(&dlq, 1).await;
    let port = reserve_port();
    let text_cfg =
        broker_config(
            &bootstrap,
            &groups[0],
            &topic,
            "handler = \"noop\"",
            "[dlq]\nmode = \"broker\"",
        ) + &format!("\n[ui]\nlisten = \"127.0.0.1:{port}\"\nsample-every = \"500ms\"\n");
    let cfg = scratch.write("ui.toml", &text_cfg);
    let _ui = tokio::process::Command::new(BIN)
        .args(["ui", "--config", cfg.to_str().unwrap()])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("starting share-worker ui");
    // The group's broker DLQ is one of the dashboard's topics, its letters counted by reason and
    // source, and listed with the broker as their writer.
    let counts = format!("http://127.0.0.1:{port}/ui/live/dlq/{dlq}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let answer = crate::support::get(&counts).await;
        if let Some((200, body)) = &answer
            && body.contains(">broker_rejected<")
            && body.contains(&format!(">{topic}<"))
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{counts}: {answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let page = crate::support::get(&format!("http://127.0.0.1:{port}/ui/dlq/{dlq}")).await;
    let (status, body) = page.expect("the letters page");
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("broker_rejected") && body.contains(headers::BROKER_REJECTED),
        "{body}"
    );
}
