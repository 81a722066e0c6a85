//! The two example workers end to end against the real broker: 1,000 jobs each, all processed, the
//! deliberately failing ones in the dead-letter topic (`examples/src/{sms,webhook}.rs`).

use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

use anyhow::Context;
use examples::demo_backoff;
use examples::email::{Email, FakeBulkApi, send_emails};
use examples::sms::{
    DemoJob, FakeGateway, Sms, demo_jobs, enqueue_demo, is_valid_number, send_sms, sms_lanes,
};
use examples::webhook::{Event, FakeEndpoints, service};
use rdkafka::Message;
use rdkafka::message::Headers;
use tests::{produce, producer, read_records, run_until_all_drained, run_until_drained, unique};
use worker_core::delay::DelayTopic;
use worker_core::dlq::KafkaDlqSink;
use worker_core::handler::{BatchJobDefinition, JobDefinition};
use worker_core::kafka::{Admin, DelayTopics, KafkaSource};
use worker_core::produce::JobProducer;
use worker_core::{RateLimit, Route, Worker};

const JOBS: usize = 1_000;

/// A topic with `payloads` in partition 0, its dead-letter topic, and a group reading from the start.
async fn prepared(name: &str, payloads: &[String]) -> anyhow::Result<(Admin, String, String)> {
    let admin = Admin::connect(tests::bootstrap())
        .await
        .context("connecting to the broker")?;
    let topic = unique(name);
    let group = unique(&format!("{name}-workers"));
    admin.create_topic(&topic, 1, 1).await?;
    admin.create_topic(&format!("{topic}.dlq"), 1, 1).await?;
    admin
        .set_group_config(&group, "share.auto.offset.reset", "earliest")
        .await?;
    produce(&producer(&[("linger.ms", "5")])?, &topic, Some(0), payloads).await?;
    Ok((admin, topic, group))
}

/// (source offset, reason) of every dead letter in `{topic}.dlq`.
async fn dead_letters(topic: &str, expected: usize) -> anyhow::Result<BTreeSet<(i64, String)>> {
    let letters = read_records(format!("{topic}.dlq"), expected, Duration::from_secs(1)).await?;
    letters
        .iter()
        .map(|letter| {
            let header = |key: &str| -> anyhow::Result<String> {
                let value = letter
                    .headers()
                    .and_then(|h| h.iter().find(|h| h.key == key).and_then(|h| h.value))
                    .with_context(|| format!("dead letter without {key}"))?;
                Ok(String::from_utf8(value.to_vec())?)
            };
            Ok((
                header("share.dlq.offset")?.parse()?,
                header("share.dlq.reason")?,
            ))
        })
        .collect()
}

/// The bulk e-mail sender: 300 messages in batches of up to 50, one call each; the invalid
/// addresses are dead-lettered, the greylisted ones retried once, and every valid message is sent
/// exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bulk_email_sender_sends_in_batches_and_answers_each_message() -> anyhow::Result<()> {
    let emails: Vec<Email> = (0..300)
        .map(|i| Email {
            to: match i % 30 {
                4 => format!("user{i}-at-nowhere"),
                9 => format!("user{i}@greylist.example"),
                _ => format!("user{i}@example.com"),
            },
            subject: format!("receipt {i}"),
        })
        .collect();
    let payloads: Vec<String> = emails
        .iter()
        .map(serde_json::to_string)
        .collect::<Result<_, _>>()?;
    let (admin, topic, group) = prepared("emails", &payloads).await?;
    let api = FakeBulkApi::new(Duration::from_millis(50));
    let dlq = KafkaDlqSink::builder(tests::bootstrap(), &group)
        .worker("email-test")
        .build()?;
    let worker = Worker::builder(
        KafkaSource::builder(tests::bootstrap(), &group)
            .topic(&topic)
            .build()
            .await?,
    )
    .add_route(Route::batched(
        topic.as_str(),
        send_emails::BATCH,
        send_emails.into_batch_service(api.clone()),
    ))
    .concurrency(200)
    .backoff(demo_backoff())
    .dlq(dlq)
    .build()?;
    let summary =
        run_until_drained(worker, &admin, &group, &topic, Duration::from_secs(60)).await?;

    let valid: Vec<&Email> = emails.iter().filter(|e| e.to.contains('@')).collect();
    let mut sent: Vec<String> = api.sent().into_iter().map(|e| e.to).collect();
    sent.sort();
    let mut expected: Vec<String> = valid.iter().map(|e| e.to.clone()).collect();
    expected.sort();
    assert_eq!(sent, expected, "every valid message sent exactly once");
    let letters = dead_letters(&topic, 10).await?;
    let invalid: BTreeSet<(i64, String)> = (0..300)
        .filter(|i| i % 30 == 4)
        .map(|i| (i, "rejected".to_owned()))
        .collect();
    assert_eq!(letters, invalid);
    assert_eq!(
        summary.retried, 10,
        "each greylisted message retried once: {summary:?}"
    );
    let calls = api.calls();
    assert!(calls.iter().all(|size| *size <= 50), "{calls:?}");
    assert!(
        calls.len() < 30,
        "{} calls for 300 messages and 10 retries: not batched",
        calls.len()
    );
    Ok(())
}

/// The SMS lanes: a marketing blast is being sent when one-time passwords arrive; every password
/// is sent while most of the blast still waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_time_passwords_are_sent_ahead_of_a_marketing_blast() -> anyhow::Result<()> {
    let blast: Vec<String> = (0..600)
        .map(|i| {
            let sms = Sms {
                to: format!("+4915{i:08}"),
                text: "spring sale".into(),
            };
            serde_json::to_string(&sms)
        })
        .collect::<Result<_, _>>()?;
    let (admin, marketing, group) = prepared("sms-marketing", &blast).await?;
    let passwords = unique("sms-otp");
    admin.create_topic(&passwords, 1, 1).await?;
    let gateway = FakeGateway::new(Duration::from_millis(20), Duration::from_millis(300));
    let source = KafkaSource::builder(tests::bootstrap(), &group)
        .topic(&marketing)
        .topic(&passwords)
        .build()
        .await?;
    let [otp, bulk] = sms_lanes(&gateway, &passwords, &marketing);
    let worker = Worker::builder(source)
        .add_route(otp)
        .add_route(bulk)
        .concurrency(8)
        .build()?;
    let shutdown = worker.shutdown_handle();
    let running = tokio::spawn(worker.run());
    tests::wait_for(
        "the blast to be sending",
        Duration::from_secs(30),
        async || Ok(gateway.sent().len() >= 50),
    )
    .await?;
    let codes: Vec<String> = (0..20)
        .map(|i| {
            let sms = Sms {
                to: format!("+4917{i:08}"),
                text: format!("your code is {i:06}"),
            };
            serde_json::to_string(&sms)
        })
        .collect::<Result<_, _>>()?;
    produce(&producer(&[])?, &passwords, Some(0), &codes).await?;
    tests::wait_for(
        "every password to be sent",
        Duration::from_secs(30),
        async || {
            Ok(gateway
                .sent()
                .iter()
                .filter(|sms| sms.text.starts_with("your code"))
                .count()
                == 20)
        },
    )
    .await?;
    let blast_sent = gateway
        .sent()
        .iter()
        .filter(|sms| sms.text == "spring sale")
        .count();
    shutdown.shutdown();
    running.await??;
    assert!(
        blast_sent < 400,
        "{blast_sent} of the 600 marketing messages went before the last password"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sms_worker_sends_every_valid_message_and_dead_letters_the_rest() -> anyhow::Result<()>
{
    // Every 100th number is malformed (rejected), every 250th payload is not JSON (decode), and
    // the ~10% of numbers ending in 7 are rate-limited once (retried after the 429's delay). The
    // example enqueues its own jobs with the typed enqueue, keyed by number; its worker sends at
    // most one message per second per number.
    let jobs = demo_jobs(JOBS);
    let (admin, topic, group) = prepared("sms", &[]).await?;
    let delay_topic = format!("{topic}.delay");
    for delay in DelayTopic::default().tiers(&topic, &group) {
        admin.create_topic(&delay, 1, 1).await?;
    }
    let producer = JobProducer::builder(tests::bootstrap()).build()?;
    enqueue_demo(&producer, &topic, &jobs).await?;
    let gateway = FakeGateway::new(Duration::from_millis(20), Duration::from_millis(300));
    let dlq = KafkaDlqSink::builder(tests::bootstrap(), &group)
        .worker("sms-test")
        .build()?;
    let worker = Worker::builder(
        KafkaSource::builder(tests::bootstrap(), &group)
            .topic(&topic)
            .delay_topics(DelayTopic::default())
            .build()
            .await?,
    )
    .add_route(
        Route::new(topic.as_str(), send_sms.into_service(gateway.clone()))
            .key_rate_limit(RateLimit::per_second(1)),
    )
    .concurrency(100)
    .backoff(demo_backoff())
    .delay(producer)
    .dlq(dlq)
    .build()?;
    // Retries beyond the worker's hold room go through the delay topic: both must drain.
    let summary = run_until_all_drained(
        worker,
        &admin,
        &group,
        &[&topic, &delay_topic],
        Duration::from_secs(120),
    )
    .await?;

    let valid: HashSet<String> = jobs
        .iter()
        .filter_map(|job| match job {
            DemoJob::Sms(sms) if is_valid_number(&sms.to) => Some(sms.to.clone()),
            _ => None,
        })
        .collect();
    let sent: HashSet<String> = gateway.sent().into_iter().map(|sms| sms.to).collect();
    assert_eq!(sent, valid, "every valid message was sent");
    let throttled = valid.iter().filter(|to| to.ends_with('7')).count() as u64;
    assert_eq!(
        summary.retried, throttled,
        "each 429 was retried once: {summary:?}"
    );

    let expected: BTreeSet<(i64, String)> = (0..JOBS as i64)
        .filter_map(|i| match i {
            i if i % 250 == 5 => Some((i, "decode".to_owned())),
            i if i % 100 == 13 => Some((i, "rejected".to_owned())),
            _ => None,
        })
        .collect();
    assert_eq!(dead_letters(&topic, expected.len()).await?, expected);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_notifier_delivers_every_event_and_times_out_hung_endpoints()
-> anyhow::Result<()> {
    // Every 100th event's endpoint hangs on the first delivery (the timeout layer cuts it off and
    // it is retried); every 200th event (offset 7, 207, ...) has a plain-http URL and is rejected.
    let events: Vec<Event> = (0..JOBS as u64)
        .map(|id| Event {
            id,
            url: if id % 200 == 7 {
                format!("http://hooks.example/{id}")
            } else {
                format!("https://hooks.example/{id}")
            },
            kind: "order.shipped".into(),
        })
        .collect();
    let payloads: Vec<String> = events
        .iter()
        .map(|e| serde_json::to_string(e).unwrap_or_else(|err| err.to_string()))
        .collect();
    let (admin, topic, group) = prepared("webhooks", &payloads).await?;
    let endpoints = FakeEndpoints::new(Duration::from_millis(5), 100);
    let dlq = KafkaDlqSink::builder(tests::bootstrap(), &group)
        .worker("webhook-test")
        .build()?;
    let worker = Worker::builder(
        KafkaSource::builder(tests::bootstrap(), &group)
            .topic(&topic)
            .build()
            .await?,
    )
    .route(
        topic.as_str(),
        service(endpoints.clone(), Duration::from_millis(500), 2_000),
    )
    .concurrency(100)
    .backoff(demo_backoff())
    .dlq(dlq)
    .build()?;
    let summary =
        run_until_drained(worker, &admin, &group, &topic, Duration::from_secs(120)).await?;

    let deliveries = endpoints.deliveries();
    for event in events.iter().filter(|e| e.url.starts_with("https://")) {
        let expected = if event.id % 100 == 0 { 2 } else { 1 };
        assert_eq!(
            deliveries.get(&event.id),
            Some(&expected),
            "event {}",
            event.id
        );
    }
    assert_eq!(
        summary.retries_scheduled, 10,
        "the ten hung deliveries were retried: {summary:?}"
    );
    let expected: BTreeSet<(i64, String)> = (0..JOBS as i64)
        .filter(|i| i % 200 == 7)
        .map(|i| (i, "rejected".to_owned()))
        .collect();
    assert_eq!(dead_letters(&topic, expected.len()).await?, expected);
    Ok(())
}

/// The secured notifier over the broker's SASL_SSL listener with SCRAM-SHA-512, configured the way
/// a deployment configures it (the `KAFKA_*` variables): every notification handled, the
/// undeliverable ones dead-lettered over the same secured connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_secured_notifier_runs_over_sasl_ssl_from_its_variables() -> anyhow::Result<()> {
    use examples::secured::{Connection, worker};
    let env = |name: &str| {
        std::env::var(name).with_context(|| {
            format!(
                "{name} is not set: run `eval \"$(scripts/kafka.sh env)\"` (scripts/test.sh does)"
            )
        })
    };
    let vars = std::collections::HashMap::from([
        ("KAFKA_BOOTSTRAP", env("KAFKA_SASL_SSL_BOOTSTRAP")?),
        ("KAFKA_SECURITY_PROTOCOL", "sasl_ssl".to_owned()),
        ("KAFKA_TLS_CA_FILE", env("KAFKA_TLS_CA_FILE")?),
        ("KAFKA_SASL_MECHANISM", "SCRAM-SHA-512".to_owned()),
        ("KAFKA_SASL_USERNAME", env("KAFKA_SASL_USERNAME")?),
        ("KAFKA_SASL_PASSWORD", env("KAFKA_SASL_PASSWORD")?),
    ]);
    let connection =
        Connection::from_vars(|name| vars.get(name).cloned()).map_err(anyhow::Error::msg)?;
    let payloads: Vec<String> = (0..100)
        .map(|i| {
            if i % 10 == 3 {
                "undeliverable".to_owned()
            } else {
                format!("notification {i}")
            }
        })
        .collect();
    let (admin, topic, group) = prepared("secured", &payloads).await?;
    let worker = worker(&connection, &group, &topic).await?;
    let summary =
        run_until_drained(worker, &admin, &group, &topic, Duration::from_secs(60)).await?;
    assert_eq!(summary.accepted, 90, "{summary:?}");
    assert_eq!(summary.rejected, 10, "{summary:?}");
    let expected: BTreeSet<(i64, String)> = (0..10)
        .map(|i| (i * 10 + 3, "rejected".to_owned()))
        .collect();
    assert_eq!(dead_letters(&topic, expected.len()).await?, expected);
    let refused = Connection::from_vars(|name| match name {
        "KAFKA_BOOTSTRAP" => Some("127.0.0.1:1".to_owned()),
        _ => None,
    })
    .expect_err("sasl_ssl needs a user");
    assert_eq!(refused, "KAFKA_SASL_USERNAME is not set");
    Ok(())
}
