//! A share group that does not allow renewing locks (Kafka 4.3+'s group config
//! `share.renew.acknowledge.enable = false`): the worker refuses at start a job timeout the lock
//! cannot cover, naming the group and the setting, and otherwise runs without sending RENEW. Kafka
//! 4.2 has no such switch: the broker refuses the config and RENEW stays available.
//!
//! Which of the two the broker is comes from `KAFKA_VERSION` (default 4.2.2), which
//! `scripts/test.sh` sets for each broker of its version matrix.

use std::convert::Infallible;
use std::time::Duration;

use anyhow::{Context, ensure};
use tests::{produce, producer, unique};
use tower::service_fn;
use worker_core::kafka::{Admin, GroupRenewal, KafkaSource, OffsetReset};
use worker_core::{ErrorKind, Job, Outcome, Worker};

const LOCK: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_without_renewal_refuses_a_job_timeout_beyond_its_lock() -> anyhow::Result<()> {
    let admin = Admin::connect(tests::bootstrap()).await?;
    let topic = unique("no-renew");
    let group = unique("no-renew-group");
    admin.create_topic(&topic, 1, 1).await?;
    admin
        .set_group_config(&group, "share.record.lock.duration.ms", "5000")
        .await?;
    let switched = admin
        .set_group_config(&group, "share.renew.acknowledge.enable", "false")
        .await;
    let version = std::env::var("KAFKA_VERSION").unwrap_or_else(|_| "4.2.2".to_owned());
    if version.starts_with("4.2.") {
        ensure!(
            switched.is_err(),
            "Kafka {version} accepted share.renew.acknowledge.enable"
        );
        ensure!(
            admin.renewal(&group).await?
                == GroupRenewal {
                    enabled: true,
                    lock: LOCK
                },
            "RENEW is always there on Kafka {version}"
        );
        return Ok(());
    }
    switched.context("setting share.renew.acknowledge.enable = false")?;
    ensure!(
        admin.renewal(&group).await?
            == GroupRenewal {
                enabled: false,
                lock: LOCK
            }
    );

    let worker = |job_timeout: Duration| {
        let (group, topic) = (group.clone(), topic.clone());
        async move {
            let source = KafkaSource::builder(tests::bootstrap(), group.as_str())
                .topic(topic.as_str())
                .offset_reset(OffsetReset::Earliest)
                .build()
                .await?;
            // Each handler runs 3 s: past the half of the lock where the worker would renew.
            let handler = service_fn(|_job: Job| async {
                tokio::time::sleep(Duration::from_secs(3)).await;
                Ok::<_, Infallible>(Outcome::Accept)
            });
            anyhow::Ok(
                Worker::builder(source)
                    .route(topic.as_str(), handler)
                    .job_timeout(job_timeout)
                    .build()?,
            )
        }
    };

    // A 10 s job timeout cannot fit in a 5 s lock that nobody may renew.
    let refused = tokio::time::timeout(
        Duration::from_secs(30),
        worker(Duration::from_secs(10)).await?.run(),
    )
    .await
    .context("a worker whose job timeout outlives an unrenewable lock started")?;
    let err = refused
        .err()
        .context("a worker whose job timeout outlives an unrenewable lock ran")?;
    let text = err.to_string();
    ensure!(err.kind() == ErrorKind::Config, "{err:?}");
    ensure!(
        text.contains(&group) && text.contains("share.renew.acknowledge.enable"),
        "the error names neither the group nor the setting: {text}"
    );

    // A 4 s one does: records are handled, and no RENEW is sent.
    produce(&producer(&[])?, &topic, None, ["a", "b", "c"]).await?;
    let worker = worker(Duration::from_secs(4)).await?;
    let summary =
        tests::run_until_drained(worker, &admin, &group, &topic, Duration::from_secs(60)).await?;
    ensure!(summary.accepted == 3, "{summary:?}");
    ensure!(
        summary.renewals == 0 && summary.renewal_failures == 0,
        "renewals sent to a group that refuses them: {summary:?}"
    );
    Ok(())
}
