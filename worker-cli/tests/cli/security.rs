//! The binary over the broker's secured listeners (`scripts/kafka.sh env`): `setup`, `produce
//! --config`, `run` (share client, dead-letter producer), `status`, `check` and `dlq replay` over
//! SASL_SSL and mutual TLS; records from Kafka's own Java console producer; the refusals a
//! misconfigured worker meets, each one line within seconds; and no secret in any output.
//!
//! The SCRAM and OAUTHBEARER tests need those mechanisms (`worker-kafka/src/security/sasl/`,
//! `token.rs`); until they are built they fail at their first connection, saying so.

use std::process::Output;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::support::*;

/// A variable of `scripts/kafka.sh env` (scripts/test.sh exports them).
fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: eval \"$(bash scripts/kafka.sh env)\" first (scripts/test.sh does)"
        )
    })
}

/// How long a refused worker may take to say so.
const REFUSAL_BOUND: Duration = Duration::from_secs(15);

/// The exec route of these tests: payloads starting with `reject` are rejected (dead-lettered).
const ROUTE: &str = r#"handler = "exec"
command = ["sh", "-c", 'p=$(cat); case "$p" in reject*) exit 2;; esac']
reject-exit-codes = [2]
timeout = "10s""#;

/// A worker file for `bootstrap` with `security-protocol = protocol` and the security `tables`.
fn secured_config(
    bootstrap: &str,
    protocol: &str,
    tables: &str,
    group: &str,
    topic: &str,
) -> String {
    format!(
        r#"
[kafka]
bootstrap = "{bootstrap}"
client-id = "cli-security"
security-protocol = "{protocol}"

{tables}

[worker]
group = "{group}"
concurrency = 4
lock-duration = "20s"

[retry]
backoff-initial = "100ms"
backoff-max = "1s"

[dlq]
topic = "{{topic}}.dlq"

[[route]]
topic = "{topic}"
{ROUTE}
"#
    )
}

fn tls_table(client_cert: bool) -> String {
    let mut table = format!("[kafka.tls]\nca-file = \"{}\"\n", env("KAFKA_TLS_CA_FILE"));
    if client_cert {
        table.push_str(&format!(
            "cert-file = \"{}\"\nkey-file = \"{}\"\n",
            env("KAFKA_TLS_CERT_FILE"),
            env("KAFKA_TLS_KEY_FILE")
        ));
    }
    table
}

fn sasl_table(mechanism: &str, password: &str) -> String {
    format!(
        "[kafka.sasl]\nmechanism = \"{mechanism}\"\nusername = \"{}\"\npassword = \"{password}\"\n",
        env("KAFKA_SASL_USERNAME")
    )
}

/// Produces `lines` to `topic` with Kafka's Java console producer over a secured listener
/// (`properties`: the client properties file of `scripts/kafka.sh env`).
async fn java_produce(bootstrap: &str, topic: &str, properties: &str, lines: &[&str]) {
    console_produce(
        bootstrap,
        topic,
        &["--command-config", properties],
        format!("{}\n", lines.join("\n")).into_bytes(),
    )
    .await;
}

/// `produce --config` of `lines` to `topic`.
async fn produce_with_config(
    scratch: &Scratch,
    cfg: &str,
    topic: &str,
    lines: &[&str],
    what: &str,
) {
    let jobs = scratch.write("jobs.txt", &lines.join("\n"));
    let out = share_worker(
        &[
            "produce",
            "--config",
            cfg,
            "--topic",
            topic,
            "--file",
            jobs.to_str().expect("a UTF-8 path"),
        ],
        &[],
    )
    .await;
    assert_ok(&out, &format!("produce --config {what}"));
    assert!(
        text(&out.stdout).contains(&format!("produced {} records", lines.len())),
        "{}",
        text(&out.stdout)
    );
}

/// `run` until idle with `env`: its output and statistics.
async fn run_secured(
    scratch: &Scratch,
    cfg: &str,
    env: &[(&str, &str)],
    what: &str,
) -> (Output, Value) {
    let stats = scratch.0.join("stats.json");
    let out = share_worker(
        &[
            "run",
            "--config",
            cfg,
            "--exit-when-idle",
            "3s",
            "--stats-json",
            stats.to_str().expect("a UTF-8 path"),
        ],
        env,
    )
    .await;
    assert_ok(&out, &format!("run {what}"));
    let json = std::fs::read_to_string(&stats).expect("the stats file");
    (out, serde_json::from_str(&json).expect("stats JSON"))
}

/// The records of the secured tests: two accepted, one rejected into the dead-letter topic.
const RECORDS: [&str; 3] = ["ok-1", "reject-1", "ok-2"];

/// setup over the secured listener, `produce`, run: two records accepted, one dead-lettered (read
/// back in plain TCP with its reason).
async fn setup_produce_run_check(
    scratch: &Scratch,
    cfg: &str,
    topic: &str,
    what: &str,
    produce: impl std::future::Future<Output = ()>,
) -> Output {
    let out = share_worker(&["setup", "--config", cfg, "--partitions", "1"], &[]).await;
    assert_ok(&out, &format!("setup {what}"));
    produce.await;
    let (out, stats) = run_secured(scratch, cfg, &[], what).await;
    assert_eq!(count(&stats, "accepted"), 2, "{what}: {stats}");
    assert_eq!(count(&stats, "rejected"), 1, "{what}: {stats}");
    assert_eq!(count(&stats, "dlq"), 1, "{what}: {stats}");
    let letters = read_headers(&format!("{topic}.dlq"), 1).await;
    assert_eq!(
        header_value(&letters[0], "share.dlq.reason").as_deref(),
        Some("rejected"),
        "{what}"
    );
    out
}

/// (a) SASL_SSL with PLAIN: records from the Java console producer over SASL_SSL (SCRAM-SHA-512),
/// the worker over SASL_SSL (PLAIN) writing its dead letter there, `status` and `dlq replay` too;
/// the password, given in the file, appears in no output, not even at `RUST_LOG=debug`.
#[tokio::test]
async fn run_over_sasl_ssl_with_plain_writes_dead_letters_and_no_password() {
    let scratch = Scratch::new();
    let topic = unique("cli-sasl-plain");
    let group = unique("cli-sasl-plain-group");
    let bootstrap = env("KAFKA_SASL_SSL_BOOTSTRAP");
    let password = env("KAFKA_SASL_PASSWORD");
    let tables = format!("{}\n{}", tls_table(false), sasl_table("PLAIN", &password));
    let cfg_path = scratch.write(
        "worker.toml",
        &secured_config(&bootstrap, "sasl_ssl", &tables, &group, &topic),
    );
    let cfg = cfg_path.to_str().expect("a UTF-8 path");
    let out = share_worker(&["setup", "--config", cfg, "--partitions", "1"], &[]).await;
    assert_ok(&out, "setup over SASL_SSL");
    java_produce(
        &bootstrap,
        &topic,
        &env("KAFKA_CLIENT_PROPERTIES"),
        &RECORDS,
    )
    .await;

    let (out, stats) = run_secured(&scratch, cfg, &[("RUST_LOG", "debug")], "over SASL_SSL").await;
    assert_eq!(count(&stats, "accepted"), 2, "{stats}");
    assert_eq!(count(&stats, "dlq"), 1, "{stats}");
    let letters = read_headers(&format!("{topic}.dlq"), 1).await;
    assert_eq!(
        header_value(&letters[0], "share.dlq.reason").as_deref(),
        Some("rejected")
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        !stdout.contains(&password),
        "the password on stdout:\n{stdout}"
    );
    assert!(
        !stderr.contains(&password),
        "the password on stderr:\n{stderr}"
    );

    let out = share_worker(&["status", "--config", cfg, "--json"], &[]).await;
    assert_ok(&out, "status over SASL_SSL");
    let dlq = format!("{topic}.dlq");
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
    assert_ok(&out, "dlq replay over SASL_SSL");
    assert!(
        text(&out.stdout).contains("would replay 1,"),
        "{}",
        text(&out.stdout)
    );
    assert!(!text(&out.stdout).contains(&password));
    assert!(!text(&out.stderr).contains(&password));
}

/// (b) Mutual TLS: setup, `produce --config` and run over the listener that requires a client
/// certificate.
#[tokio::test]
async fn run_over_mutual_tls_writes_dead_letters() {
    let scratch = Scratch::new();
    let topic = unique("cli-mtls");
    let group = unique("cli-mtls-group");
    let cfg_path = scratch.write(
        "worker.toml",
        &secured_config(
            &env("KAFKA_MTLS_BOOTSTRAP"),
            "ssl",
            &tls_table(true),
            &group,
            &topic,
        ),
    );
    let cfg = cfg_path.to_str().expect("a UTF-8 path");
    setup_produce_run_check(
        &scratch,
        cfg,
        &topic,
        "over mutual TLS",
        produce_with_config(&scratch, cfg, &topic, &RECORDS, "over mutual TLS"),
    )
    .await;
}

/// (c) The same over SASL_SSL with a SCRAM mechanism or OAUTHBEARER (`tables`).
async fn run_with_mechanism(mechanism: &str, tables: &str) {
    let scratch = Scratch::new();
    let name = mechanism.to_ascii_lowercase();
    let topic = unique(&format!("cli-{name}"));
    let group = unique(&format!("cli-{name}-group"));
    let tables = format!("{}\n{tables}", tls_table(false));
    let cfg_path = scratch.write(
        "worker.toml",
        &secured_config(
            &env("KAFKA_SASL_SSL_BOOTSTRAP"),
            "sasl_ssl",
            &tables,
            &group,
            &topic,
        ),
    );
    let cfg = cfg_path.to_str().expect("a UTF-8 path");
    let what = format!(
        "over SASL_SSL with {mechanism} (needs the {mechanism} mechanism: worker-kafka/src/security/sasl/)"
    );
    setup_produce_run_check(
        &scratch,
        cfg,
        &topic,
        &what,
        produce_with_config(&scratch, cfg, &topic, &RECORDS, &what),
    )
    .await;
}

#[tokio::test]
async fn run_over_sasl_ssl_with_scram_sha_256() {
    let tables = sasl_table("SCRAM-SHA-256", &env("KAFKA_SASL_PASSWORD"));
    run_with_mechanism("SCRAM-SHA-256", &tables).await;
}

#[tokio::test]
async fn run_over_sasl_ssl_with_scram_sha_512() {
    let tables = sasl_table("SCRAM-SHA-512", &env("KAFKA_SASL_PASSWORD"));
    run_with_mechanism("SCRAM-SHA-512", &tables).await;
}

/// `data` in base64url without padding, as JWTs are written.
fn base64url(data: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
        }
    }
    out
}

/// An unsecured JWT (`alg: none`, empty signature) for `sub`, valid for an hour: what the broker's
/// unsecured OAUTHBEARER validator accepts.
fn unsecured_jwt(sub: &str) -> String {
    let exp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_secs()
        + 3600;
    format!(
        "{}.{}.",
        base64url(br#"{"alg":"none"}"#),
        base64url(format!(r#"{{"sub":"{sub}","exp":{exp}}}"#).as_bytes())
    )
}

#[tokio::test]
async fn run_over_sasl_ssl_with_oauthbearer_from_a_token_file() {
    assert_eq!(base64url(br#"{"alg":"none"}"#), "eyJhbGciOiJub25lIn0");
    let scratch = Scratch::new();
    let token = scratch.write("token", &unsecured_jwt("worker"));
    let tables = format!(
        "[kafka.sasl]\nmechanism = \"OAUTHBEARER\"\n\n[kafka.sasl.oauth]\ntoken-file = \"{}\"\n",
        token.display()
    );
    run_with_mechanism("OAUTHBEARER", &tables).await;
}

/// A CA certificate that signed nothing the broker has, made by openssl in `scratch`.
fn untrusted_ca(scratch: &Scratch) -> String {
    let ca = scratch.0.join("untrusted-ca.pem");
    let key = scratch.0.join("untrusted-ca.key");
    let out = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args(["-nodes", "-days", "1", "-subj", "/CN=not the broker's CA"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&ca)
        .output()
        .expect("running openssl (required by scripts/kafka.sh too)");
    assert_ok(&out, "openssl req -x509");
    ca.to_str().expect("a UTF-8 path").to_owned()
}

/// Runs `run` on `config`: it must fail within [`REFUSAL_BOUND`], its last line on stderr the
/// error, naming everything in `says`.
async fn refused(scratch: &Scratch, config: &str, says: &[&str]) {
    let cfg = scratch.write("refused.toml", config);
    let started = Instant::now();
    let out = share_worker(
        &["run", "--config", cfg.to_str().expect("a UTF-8 path")],
        &[],
    )
    .await;
    let took = started.elapsed();
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "run succeeded:\n{stderr}");
    assert!(took < REFUSAL_BOUND, "took {took:?} to fail:\n{stderr}");
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|line| line.starts_with("share-worker: error:"))
        .collect();
    let [line] = errors.as_slice() else {
        panic!("expected one error line:\n{stderr}");
    };
    for words in says {
        assert!(line.contains(words), "expected {words:?} in: {line}");
    }
}

/// (d) A wrong password, a CA that did not sign the broker's certificate, no client certificate
/// on the mutual-TLS listener, plaintext to a TLS port: each one line naming the broker and the
/// mechanism or certificate, within seconds.
#[tokio::test]
async fn refusals_end_the_run_at_once_in_one_line() {
    let scratch = Scratch::new();
    let topic = unique("cli-refused");
    let group = unique("cli-refused-group");
    let sasl_ssl = env("KAFKA_SASL_SSL_BOOTSTRAP");
    let mtls = env("KAFKA_MTLS_BOOTSTRAP");
    let password = env("KAFKA_SASL_PASSWORD");

    let wrong = format!(
        "{}\n{}",
        tls_table(false),
        sasl_table("PLAIN", "not-the-password")
    );
    refused(
        &scratch,
        &secured_config(&sasl_ssl, "sasl_ssl", &wrong, &group, &topic),
        &[
            &format!("SASL PLAIN authentication with broker {sasl_ssl} failed"),
            "Invalid username or password",
        ],
    )
    .await;

    let ca = untrusted_ca(&scratch);
    let untrusted = format!(
        "[kafka.tls]\nca-file = \"{ca}\"\n\n{}",
        sasl_table("PLAIN", &password)
    );
    refused(
        &scratch,
        &secured_config(&sasl_ssl, "sasl_ssl", &untrusted, &group, &topic),
        &[
            &format!("broker {sasl_ssl}"),
            "certificate is not trusted",
            "tls.ca-file",
        ],
    )
    .await;

    refused(
        &scratch,
        &secured_config(&mtls, "ssl", &tls_table(false), &group, &topic),
        &[
            &format!("broker {mtls}"),
            "refused the TLS connection",
            "client certificate",
        ],
    )
    .await;

    refused(
        &scratch,
        &secured_config(&sasl_ssl, "plaintext", "", &group, &topic),
        &[
            &format!("broker {sasl_ssl} answered in TLS"),
            "ssl or sasl_ssl",
        ],
    )
    .await;
}

/// (e) `check` on a file with a password: connects over SASL_SSL, prints the configuration with
/// the password as `***`, and the password nowhere.
#[tokio::test]
async fn check_prints_no_password() {
    let scratch = Scratch::new();
    let topic = unique("cli-check-secret");
    let group = unique("cli-check-secret-group");
    let bootstrap = env("KAFKA_SASL_SSL_BOOTSTRAP");
    let password = env("KAFKA_SASL_PASSWORD");
    let tables = format!("{}\n{}", tls_table(false), sasl_table("PLAIN", &password));
    let cfg_path = scratch.write(
        "worker.toml",
        &secured_config(&bootstrap, "sasl_ssl", &tables, &group, &topic),
    );
    let cfg = cfg_path.to_str().expect("a UTF-8 path");
    let out = share_worker(&["setup", "--config", cfg, "--partitions", "1"], &[]).await;
    assert_ok(&out, "setup over SASL_SSL");
    let out = share_worker(&["check", "--config", cfg], &[("RUST_LOG", "debug")]).await;
    assert_ok(&out, "check over SASL_SSL");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(stdout.contains("share groups with RENEW"), "{stdout}");
    assert!(stdout.contains("password = \"***\""), "{stdout}");
    assert!(
        stdout.contains("security-protocol = \"sasl_ssl\""),
        "{stdout}"
    );
    assert!(
        !stdout.contains(&password),
        "the password on stdout:\n{stdout}"
    );
    assert!(
        !stderr.contains(&password),
        "the password on stderr:\n{stderr}"
    );
}
