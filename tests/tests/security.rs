//! The native share client over the broker's secured listeners (`scripts/kafka.sh env` names
//! them; `scripts/test.sh` exports them): TLS, mutual TLS, SASL, re-authentication, and failures
//! that stop at once with words an operator can act on.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use tests::{produce, producer, unique, wait_for};
use tower::service_fn;
use worker_core::kafka::{Admin, KafkaSource};
use worker_core::security::{OidcClientCredentials, SaslConfig, Security, TlsConfig, TokenSource};
use worker_core::source::AckKind;
use worker_core::{Job, Outcome, Worker};
use worker_kafka::ErrorKind;

fn env(name: &str) -> anyhow::Result<String> {
    std::env::var(name).with_context(|| {
        format!("{name} is not set: run `eval \"$(scripts/kafka.sh env)\"` (scripts/test.sh does)")
    })
}

fn ca() -> anyhow::Result<TlsConfig> {
    Ok(TlsConfig::ca_file(env("KAFKA_TLS_CA_FILE")?))
}

fn password() -> anyhow::Result<String> {
    env("KAFKA_SASL_PASSWORD")
}

/// A topic with `n` records and a share group reading it from the start.
async fn topic_with(n: usize) -> anyhow::Result<(String, String)> {
    let topic = unique("secure");
    let group = unique("secure-group");
    let admin = Admin::connect(tests::bootstrap()).await?;
    admin.create_topic(&topic, 1, 1).await?;
    admin
        .set_group_config(&group, "share.auto.offset.reset", "earliest")
        .await?;
    produce(
        &producer(&[])?,
        &topic,
        Some(0),
        (0..n).map(|i| i.to_string()),
    )
    .await?;
    Ok((topic, group))
}

/// Reads and accepts all `n` records through a source secured by `security`.
async fn consume(bootstrap: &str, security: Security, n: usize) -> anyhow::Result<()> {
    let (topic, group) = topic_with(n).await?;
    let source = KafkaSource::builder(bootstrap, group)
        .topic(topic)
        .security(security)
        .build()
        .await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut got = 0;
    while got < n {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "{got} of {n} records"
        );
        for d in source.fetch(100).await? {
            source.acknowledge(&d.id, AckKind::Accept).await?;
            got += 1;
        }
    }
    source.close().await?;
    Ok(())
}

#[tokio::test]
async fn records_flow_over_mutual_tls() -> anyhow::Result<()> {
    let tls = ca()?.client_cert(env("KAFKA_TLS_CERT_FILE")?, env("KAFKA_TLS_KEY_FILE")?);
    consume(&env("KAFKA_MTLS_BOOTSTRAP")?, Security::ssl(tls), 20).await
}

#[tokio::test]
async fn records_flow_over_sasl_ssl_with_plain() -> anyhow::Result<()> {
    let sasl = SaslConfig::plain(env("KAFKA_SASL_USERNAME")?, password()?);
    consume(
        &env("KAFKA_SASL_SSL_BOOTSTRAP")?,
        Security::sasl_ssl(sasl, ca()?),
        20,
    )
    .await
}

/// Connecting with `security` to `bootstrap` fails fast, with `kind` and words naming the broker.
async fn refused(
    bootstrap: &str,
    security: Security,
    kind: ErrorKind,
    words: &[&str],
) -> anyhow::Result<()> {
    let started = Instant::now();
    let err = KafkaSource::builder(bootstrap, unique("refused"))
        .topic("nothing")
        .security(security)
        .build()
        .await
        .err()
        .context("the connection must be refused")?;
    ensure!(
        started.elapsed() < Duration::from_secs(15),
        "took {:?}",
        started.elapsed()
    );
    ensure!(err.kind() == kind, "{:?}: {err}", err.kind());
    let text = err.to_string();
    for word in words.iter().chain([&bootstrap]) {
        ensure!(text.contains(word), "{word:?} not in {text:?}");
    }
    Ok(())
}

#[tokio::test]
async fn a_wrong_password_is_refused_with_the_brokers_words() -> anyhow::Result<()> {
    let sasl = SaslConfig::plain(env("KAFKA_SASL_USERNAME")?, "not-the-password");
    refused(
        &env("KAFKA_SASL_SSL_BOOTSTRAP")?,
        Security::sasl_ssl(sasl, ca()?),
        ErrorKind::Authentication,
        &["SASL PLAIN", "Invalid username or password"],
    )
    .await
}

#[tokio::test]
async fn a_missing_client_certificate_is_refused() -> anyhow::Result<()> {
    refused(
        &env("KAFKA_MTLS_BOOTSTRAP")?,
        Security::ssl(ca()?),
        ErrorKind::Authentication,
        &["client certificate"],
    )
    .await
}

#[tokio::test]
async fn a_plaintext_client_on_a_tls_listener_is_told_so() -> anyhow::Result<()> {
    refused(
        &env("KAFKA_SASL_SSL_BOOTSTRAP")?,
        Security::plaintext(),
        ErrorKind::Authentication,
        &["answered in TLS", "security-protocol"],
    )
    .await
}

#[tokio::test]
async fn a_certificate_from_another_ca_is_not_trusted() -> anyhow::Result<()> {
    // The system roots did not sign the broker's throw-away CA.
    let dir = std::env::temp_dir().join(unique("other-ca"));
    std::fs::create_dir_all(&dir)?;
    let key = dir.join("ca.key");
    let cert = dir.join("ca.pem");
    let made = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=not-the-brokers-ca",
            "-keyout",
        ])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()?;
    ensure!(
        made.status.success(),
        "openssl: {}",
        String::from_utf8_lossy(&made.stderr)
    );
    let result = refused(
        &env("KAFKA_MTLS_BOOTSTRAP")?,
        Security::ssl(TlsConfig::ca_file(&cert)),
        ErrorKind::Authentication,
        &["not trusted", "tls.ca-file"],
    )
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// The broker limits SASL sessions to 10 s (`connections.max.reauth.ms`): a worker that runs for
/// more than three such periods, with records whose locks are renewed all along, authenticates
/// again on every connection before its session ends — no share session is lost and no record
/// is delivered twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_authenticated_again_before_they_run_out() -> anyhow::Result<()> {
    const RECORDS: usize = 30;
    let _ = tracing_subscriber::fmt()
        .with_env_filter("info,worker_core=debug")
        .try_init();
    let (topic, group) = topic_with(RECORDS).await?;
    let admin = Admin::connect(tests::bootstrap()).await?;
    admin
        .set_group_config(&group, "share.record.lock.duration.ms", "3000")
        .await?;
    let sasl = SaslConfig::plain(env("KAFKA_SASL_USERNAME")?, password()?);
    let source = KafkaSource::builder(env("KAFKA_SASL_SSL_BOOTSTRAP")?, group.clone())
        .topic(topic.clone())
        .security(Security::sasl_ssl(sasl, ca()?))
        .build()
        .await?;
    let counts = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = counts.clone();
    let started = Instant::now();
    let worker = Worker::builder(source)
        .route(
            topic.as_str(),
            service_fn(move |job: Job| {
                let seen = seen.clone();
                async move {
                    seen.lock().expect("counts").push(job.attempt());
                    // Half the records run past three re-authentication periods, renewed.
                    let hold = if job.id().offset % 2 == 0 { 33 } else { 1 };
                    tokio::time::sleep(Duration::from_secs(hold)).await;
                    Ok::<_, std::convert::Infallible>(Outcome::Accept)
                }
            }),
        )
        .concurrency(RECORDS)
        .build()?;
    let shutdown = worker.shutdown_handle();
    let running = tokio::spawn(worker.run());
    wait_for(
        "every record accepted",
        Duration::from_secs(90),
        async || Ok(admin.share_group_lag(&group, &topic).await? == 0),
    )
    .await?;
    shutdown.shutdown();
    let summary = running.await??;
    ensure!(
        started.elapsed() > Duration::from_secs(30),
        "ran {:?}",
        started.elapsed()
    );
    ensure!(summary.accepted == RECORDS as u64, "{summary:?}");
    ensure!(summary.ack_failures.total() == 0, "{summary:?}");
    ensure!(summary.renewal_failures == 0, "{summary:?}");
    ensure!(summary.possible_duplicates == 0, "{summary:?}");
    ensure!(summary.renewals > 0, "{summary:?}");
    let counts = counts.lock().expect("counts").clone();
    ensure!(
        counts.len() == RECORDS,
        "{} handler calls: redeliveries",
        counts.len()
    );
    ensure!(counts.iter().all(|c| *c == 1), "{counts:?}");
    Ok(())
}

#[tokio::test]
async fn records_flow_over_sasl_ssl_with_scram_sha_256() -> anyhow::Result<()> {
    let sasl = SaslConfig::scram_sha256(env("KAFKA_SASL_USERNAME")?, password()?);
    consume(
        &env("KAFKA_SASL_SSL_BOOTSTRAP")?,
        Security::sasl_ssl(sasl, ca()?),
        20,
    )
    .await
}

#[tokio::test]
async fn records_flow_over_sasl_ssl_with_scram_sha_512() -> anyhow::Result<()> {
    let sasl = SaslConfig::scram_sha512(env("KAFKA_SASL_USERNAME")?, password()?);
    consume(
        &env("KAFKA_SASL_SSL_BOOTSTRAP")?,
        Security::sasl_ssl(sasl, ca()?),
        20,
    )
    .await
}

#[tokio::test]
async fn a_wrong_scram_password_is_refused_with_the_brokers_words() -> anyhow::Result<()> {
    let sasl = SaslConfig::scram_sha512(env("KAFKA_SASL_USERNAME")?, "not-the-password");
    refused(
        &env("KAFKA_SASL_SSL_BOOTSTRAP")?,
        Security::sasl_ssl(sasl, ca()?),
        ErrorKind::Authentication,
        &["SCRAM-SHA-512", "invalid credentials"],
    )
    .await
}

#[tokio::test]
async fn records_flow_over_sasl_ssl_with_an_oauthbearer_token() -> anyhow::Result<()> {
    let token = worker_kafka::test_util::unsecured_jwt("worker", Duration::from_secs(600));
    let sasl = SaslConfig::oauthbearer(TokenSource::Static(token.into()));
    consume(
        &env("KAFKA_SASL_SSL_BOOTSTRAP")?,
        Security::sasl_ssl(sasl, ca()?),
        20,
    )
    .await
}

/// A loopback OIDC token endpoint (client-credentials grant) issuing unsecured JWTs that live
/// `lifetime`; counts the tokens it issued.
struct TokenEndpoint {
    url: String,
    issued: Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl TokenEndpoint {
    async fn start(lifetime: Duration) -> anyhow::Result<Self> {
        use axum::routing::post;
        let issued = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = issued.clone();
        let app = axum::Router::new().route(
            "/token",
            post(move |body: String| {
                let count = count.clone();
                async move {
                    assert!(body.contains("grant_type=client_credentials"), "{body}");
                    count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let token = worker_kafka::test_util::unsecured_jwt("worker", lifetime);
                    axum::Json(serde_json::json!({
                        "access_token": token,
                        "token_type": "Bearer",
                        "expires_in": lifetime.as_secs(),
                    }))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/token", listener.local_addr()?);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { url, issued, task })
    }
}

/// OAUTHBEARER through the client-credentials grant, with tokens that live 15 s on a broker that
/// limits sessions to 10 s: the worker fetches fresh tokens as they age and authenticates its
/// connections again with them; nothing is lost or delivered twice over 25 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauthbearer_tokens_from_a_token_endpoint_are_renewed_and_sessions_reauthenticated()
-> anyhow::Result<()> {
    const RECORDS: usize = 10;
    let endpoint = TokenEndpoint::start(Duration::from_secs(15)).await?;
    let (topic, group) = topic_with(RECORDS).await?;
    let admin = Admin::connect(tests::bootstrap()).await?;
    admin
        .set_group_config(&group, "share.record.lock.duration.ms", "3000")
        .await?;
    let sasl = SaslConfig::oauthbearer(TokenSource::ClientCredentials(OidcClientCredentials::new(
        endpoint.url.clone(),
        "worker",
        "client-secret",
    )));
    let source = KafkaSource::builder(env("KAFKA_SASL_SSL_BOOTSTRAP")?, group.clone())
        .topic(topic.clone())
        .security(Security::sasl_ssl(sasl, ca()?))
        .build()
        .await?;
    let counts = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = counts.clone();
    let worker = Worker::builder(source)
        .route(
            topic.as_str(),
            service_fn(move |job: Job| {
                seen.lock().expect("counts").push(job.attempt());
                async move {
                    tokio::time::sleep(Duration::from_secs(25)).await;
                    Ok::<_, std::convert::Infallible>(Outcome::Accept)
                }
            }),
        )
        .concurrency(RECORDS)
        .build()?;
    let shutdown = worker.shutdown_handle();
    let running = tokio::spawn(worker.run());
    wait_for(
        "every record accepted",
        Duration::from_secs(90),
        async || Ok(admin.share_group_lag(&group, &topic).await? == 0),
    )
    .await?;
    shutdown.shutdown();
    let summary = running.await??;
    endpoint.task.abort();
    let issued = endpoint.issued.load(std::sync::atomic::Ordering::SeqCst);
    ensure!(
        issued >= 2,
        "{issued} tokens issued over 25 s of 15 s tokens"
    );
    ensure!(summary.accepted == RECORDS as u64, "{summary:?}");
    ensure!(summary.ack_failures.total() == 0, "{summary:?}");
    ensure!(summary.renewal_failures == 0, "{summary:?}");
    let counts = counts.lock().expect("counts").clone();
    ensure!(counts == vec![1; RECORDS], "redelivered: {counts:?}");
    Ok(())
}
