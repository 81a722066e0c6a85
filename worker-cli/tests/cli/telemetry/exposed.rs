//! The listeners off loopback, through the binary: HTTPS with a certificate rotated under a
//! running worker, the `Host` allow-list, failed sign-ins throttled per client address (behind
//! trusted proxies, per forwarded client; a forged `X-Forwarded-For` changes nothing otherwise),
//! audit lines naming the forwarded client, tokens too short for `check`, and no dashboard off
//! loopback without a token, nor over plain HTTP without `ui.allow-plain-http`.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use reqwest::StatusCode;

use super::listener::{Running, route_config};
use crate::support::*;

/// A dashboard token of 32 characters, the fewest allowed.
const TOKEN: &str = "cli-exposed-token-0123456789abcd";
/// How often the listener looks at its certificate files (`telemetry/certs.rs`).
const CERT_RECHECK: Duration = Duration::from_secs(5);
/// Room for a loaded machine on top of a deadline.
const SLACK: Duration = Duration::from_secs(5);

/// A throw-away CA and a server certificate it signed for `localhost` and `127.0.0.1`, as PEM.
struct Pki {
    ca: String,
    cert: String,
    key: String,
}

impl Pki {
    fn new(name: &str) -> Self {
        let ca_key = KeyPair::generate().expect("a CA key");
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        ca.distinguished_name
            .push(DnType::CommonName, format!("share-worker {name} CA"));
        let ca_pem = ca.self_signed(&ca_key).expect("the CA certificate").pem();
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate().expect("a key");
        let mut params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
                .expect("parameters");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params
            .distinguished_name
            .push(DnType::CommonName, format!("share-worker {name}"));
        let cert = params.signed_by(&key, &issuer).expect("a certificate");
        Self {
            ca: ca_pem,
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }

    /// Writes the certificate, then the key, as a rotation does (not atomically).
    fn install(&self, cert: &Path, key: &Path) {
        std::fs::write(cert, &self.cert).expect("writing the certificate");
        std::fs::write(key, &self.key).expect("writing the key");
    }

    /// A client that trusts this CA only.
    fn client(&self) -> reqwest::Client {
        let ca = reqwest::Certificate::from_pem(self.ca.as_bytes()).expect("the CA");
        reqwest::Client::builder()
            .tls_certs_only([ca])
            .build()
            .expect("an HTTPS client")
    }
}

/// GETs `url` with `client`, `host` as `Host` if given: the status and body, or the error.
async fn get(
    client: &reqwest::Client,
    url: &str,
    host: Option<&str>,
) -> Result<(u16, String), String> {
    let mut request = client.get(url);
    if let Some(host) = host {
        request = request.header("host", host);
    }
    let response = request.send().await.map_err(|err| format!("{err:?}"))?;
    let status = response.status().as_u16();
    Ok((
        status,
        response.text().await.map_err(|err| err.to_string())?,
    ))
}

/// Asks until `client` gets 200 from `url`, within `within`; how long it took.
async fn until_ok(client: &reqwest::Client, url: &str, within: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let answer = get(client, url, None).await;
        if matches!(answer, Ok((200, _))) {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "{url} not 200 within {within:?}; last: {answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn the_telemetry_listener_serves_https_a_rotated_certificate_and_its_allowed_hosts() {
    let scratch = Scratch::new();
    let (cert, key): (PathBuf, PathBuf) = (scratch.0.join("tls.crt"), scratch.0.join("tls.key"));
    let first = Pki::new("first");
    first.install(&cert, &key);
    let telemetry = format!(
        "tls-cert-file = \"{}\"\ntls-key-file = \"{}\"\nallowed-hosts = [\"worker-7.example.com\"]",
        cert.display(),
        key.display()
    );
    let worker = Running::start_with(&route_config("cli-listener-tls"), None, &telemetry).await;
    let url = format!("https://127.0.0.1:{}/healthz", worker.port);
    let trusts_first = first.client();
    until_ok(&trusts_first, &url, Duration::from_secs(30)).await;
    assert_eq!(
        get(&trusts_first, &url, None).await,
        Ok((200, "ok\n".to_owned()))
    );
    // Plain HTTP gets no answer from the HTTPS listener.
    let plain = format!("http://127.0.0.1:{}/healthz", worker.port);
    let answer = get(&reqwest::Client::new(), &plain, None).await;
    assert!(answer.is_err(), "{answer:?}");

    // The kubelet's Host (the pod's IP and port) and listed names are answered; others 421.
    for (host, status) in [
        ("10.1.2.3:9464", 200),
        ("localhost", 200),
        ("worker-7.example.com", 200),
        ("WORKER-7.example.com:443", 200),
        ("evil.example", 421),
        ("evil.example:9464", 421),
    ] {
        let answer = get(&trusts_first, &url, Some(host)).await;
        assert!(
            matches!(&answer, Ok((s, _)) if *s == status),
            "Host {host}: {answer:?}"
        );
        if status == 421 {
            let body = answer.map(|(_, body)| body).unwrap_or_default();
            assert!(body.contains("`telemetry.allowed-hosts`"), "{body}");
        }
    }

    // A new certificate from another CA is served without a restart.
    let second = Pki::new("second");
    let trusts_second = second.client();
    let answer = get(&trusts_second, &url, None).await;
    assert!(answer.is_err(), "the new CA is not trusted yet: {answer:?}");
    second.install(&cert, &key);
    // A handshake in the middle of the rotation may see the new certificate with the old key
    // (kept out), so the new pair shows at the second look at the latest.
    let took = until_ok(&trusts_second, &url, 2 * CERT_RECHECK + SLACK).await;
    // A new client: the old one may resume its TLS session, which shows no certificate.
    let answer = get(&first.client(), &url, None).await;
    assert!(answer.is_err(), "the old certificate is gone: {answer:?}");
    eprintln!("the new certificate was served {took:?} after it was written");
}

/// A client from 127.0.0.`from` that shows redirects instead of following them.
fn client_from(from: u8) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(IpAddr::from([127, 0, 0, from]))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("an HTTP client")
}

/// The CSRF token in a page's forms.
fn csrf(page: &str) -> String {
    page.split_once("name=\"csrf\" value=\"")
        .and_then(|(_, rest)| rest.split('"').next())
        .expect("a form with a CSRF token")
        .to_owned()
}

#[tokio::test]
async fn the_dashboard_throttles_failed_sign_ins_per_address_and_answers_its_allowed_hosts_only() {
    let scratch = Scratch::new();
    let port = reserve_port();
    let text = config(
        &unique("cli-throttle-group"),
        &unique("cli-throttle"),
        "handler = \"noop\"",
    )
    .replace(
        "[dlq]",
        &format!(
            "[ui]\nlisten = \"127.0.0.1:{port}\"\ntoken = \"{TOKEN}\"\nallowed-hosts = [\"dash.example.com\"]\n\n[dlq]"
        ),
    );
    let cfg = scratch.write("worker.toml", &text);
    let _ui = spawn(
        &["ui", "--config", cfg.to_str().expect("utf-8 path")],
        &cfg.with_extension("log"),
    );
    let base = format!("http://127.0.0.1:{port}");
    let login = format!("{base}/ui/login");
    let deadline = Instant::now() + Duration::from_secs(60);
    let page = loop {
        if let Ok((200, page)) = get(&client_from(1), &login, None).await {
            break page;
        }
        assert!(Instant::now() < deadline, "the dashboard never listened");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let csrf = csrf(&page);
    let sign_in_as = |from: u8, forwarded: Option<String>, token: &str| {
        let mut request = client_from(from)
            .post(&login)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("csrf={csrf}&token={token}"));
        if let Some(forwarded) = forwarded {
            request = request.header("x-forwarded-for", forwarded);
        }
        request.send()
    };
    let sign_in = |from: u8, token: &str| sign_in_as(from, None, token);

    // Five wrong tokens from one address, then even the right one is refused for a while;
    // without `ui.trusted-proxies` a forged X-Forwarded-For (another each time) changes nothing.
    for n in 0..5 {
        let forged = Some(format!("203.0.113.{n}"));
        let refused = sign_in_as(1, forged, "wrong").await.expect("POST");
        assert_eq!(refused.status(), StatusCode::UNAUTHORIZED, "attempt {n}");
    }
    let throttled = sign_in_as(1, Some("198.51.100.1".to_owned()), TOKEN)
        .await
        .expect("POST");
    assert_eq!(throttled.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry_after: u64 = throttled
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("a Retry-After in seconds");
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    let body = throttled.text().await.unwrap_or_default();
    assert!(body.contains("too many failed sign-ins"), "{body}");
    let bearer = client_from(1)
        .get(format!("{base}/ui"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("GET");
    assert_eq!(bearer.status(), StatusCode::TOO_MANY_REQUESTS);

    // Another address signs in; its session works from the throttled address too.
    let signed_in = sign_in(2, TOKEN).await.expect("POST");
    assert_eq!(signed_in.status(), StatusCode::SEE_OTHER);
    let cookie = signed_in
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .expect("a session cookie")
        .to_owned();
    for flag in ["Path=/ui", "Max-Age=43200", "HttpOnly", "SameSite=Strict"] {
        assert!(cookie.contains(flag), "{cookie}");
    }
    assert!(!cookie.contains("Secure"), "plain HTTP: {cookie}");
    let session = cookie.split(';').next().expect("NAME=VALUE");
    let page = client_from(1)
        .get(format!("{base}/ui"))
        .header("cookie", session)
        .send()
        .await
        .expect("GET");
    assert_eq!(page.status(), StatusCode::OK);

    // Wrong bearer tokens are failed sign-ins too.
    for _ in 0..5 {
        let wrong = client_from(3)
            .get(format!("{base}/ui"))
            .bearer_auth("not-the-token")
            .send()
            .await
            .expect("GET");
        assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    }
    let throttled = sign_in(3, TOKEN).await.expect("POST");
    assert_eq!(throttled.status(), StatusCode::TOO_MANY_REQUESTS);

    // Hosts: IP literals, localhost and the listed name; another name is refused.
    for (host, status) in [
        (format!("127.0.0.1:{port}"), 200),
        (format!("localhost:{port}"), 200),
        (format!("dash.example.com:{port}"), 200),
        ("evil.example".to_owned(), 421),
    ] {
        let answer = get(&client_from(4), &login, Some(&host)).await;
        assert!(
            matches!(&answer, Ok((s, _)) if *s == status),
            "Host {host}: {answer:?}"
        );
        if status == 421 {
            let body = answer.map(|(_, body)| body).unwrap_or_default();
            assert!(body.contains("`ui.allowed-hosts`"), "{body}");
        }
    }
}

#[tokio::test]
async fn check_refuses_a_dashboard_token_shorter_than_32_characters() {
    let scratch = Scratch::new();
    let short = &TOKEN[..31];
    let file = config(
        &unique("cli-short-token-group"),
        &unique("cli-short-token"),
        "handler = \"noop\"",
    )
    .replace("[dlq]", &format!("[ui]\ntoken = \"{short}\"\n\n[dlq]"));
    let line = file
        .lines()
        .position(|l| l.starts_with("token = "))
        .expect("the token's line")
        + 1;
    let cfg = scratch.write("short.toml", &file);
    let out = share_worker(
        &["check", "--config", cfg.to_str().expect("utf-8 path")],
        &[],
    )
    .await;
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "short.toml:{line}: `ui.token`: expected at least 32 characters, found 31"
        )),
        "{stderr}"
    );
    assert!(!stderr.contains(short), "the token is not shown: {stderr}");
    // 32 characters pass the file's checks (the rest of `check` needs the broker).
    let ok = scratch.write("ok.toml", &file.replace(short, TOKEN));
    let out = share_worker(
        &["check", "--config", ok.to_str().expect("utf-8 path")],
        &[],
    )
    .await;
    assert!(
        text(&out.stdout).contains("# configuration: valid"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test]
async fn a_token_less_dashboard_off_loopback_does_not_start() {
    let scratch = Scratch::new();
    let base = config(
        &unique("cli-open-group"),
        &unique("cli-open"),
        "handler = \"noop\"",
    );
    let standalone = scratch.write(
        "ui.toml",
        &base.replace("[dlq]", "[ui]\nlisten = \"0.0.0.0:0\"\n\n[dlq]"),
    );
    let embedded = scratch.write(
        "run.toml",
        &base.replace(
            "[dlq]",
            "[telemetry]\nlisten = \"0.0.0.0:0\"\nui = true\n\n[dlq]",
        ),
    );
    for (command, cfg, key, listen) in [
        ("ui", &standalone, "ui.listen", "`ui.listen` = 0.0.0.0:0"),
        (
            "run",
            &embedded,
            "telemetry.ui",
            "`telemetry.listen` = 0.0.0.0:0",
        ),
    ] {
        let started = Instant::now();
        let out = share_worker(
            &[command, "--config", cfg.to_str().expect("utf-8 path")],
            &[],
        )
        .await;
        assert!(!out.status.success(), "{command} started");
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains(&format!("`{key}`"))
                && stderr.contains(&format!("the dashboard on {listen} is not on loopback")),
            "{command}: {stderr}"
        );
        assert!(started.elapsed() < Duration::from_secs(10), "{command}");
    }
    // A telemetry listener off loopback without the dashboard needs no token.
    let probes_only = scratch.write(
        "probes.toml",
        &base.replace("[dlq]", "[telemetry]\nlisten = \"0.0.0.0:0\"\n\n[dlq]"),
    );
    let out = share_worker(
        &[
            "check",
            "--config",
            probes_only.to_str().expect("utf-8 path"),
        ],
        &[],
    )
    .await;
    assert!(
        text(&out.stdout).contains("# configuration: valid"),
        "{}",
        text(&out.stderr)
    );
}

/// Behind a trusted proxy (`ui.trusted-proxies`, here 127.0.0.1) each client the proxy forwards
/// for is throttled on its own and named in audit lines; a peer that is no proxy (127.0.0.2)
/// forges a header in vain.
#[tokio::test]
async fn behind_a_trusted_proxy_each_forwarded_client_is_throttled_and_audited_on_its_own() {
    let scratch = Scratch::new();
    let port = reserve_port();
    let topic = unique("cli-proxied");
    let text = config(&unique("cli-proxied-group"), &topic, "handler = \"noop\"").replace(
        "[dlq]",
        &format!(
            "[ui]\nlisten = \"127.0.0.1:{port}\"\ntoken = \"{TOKEN}\"\nallow-actions = true\ntrusted-proxies = [\"127.0.0.1/32\", \"10.0.0.0/8\"]\n\n[dlq]"
        ),
    );
    let cfg = scratch.write("worker.toml", &text);
    let cfg = cfg.to_str().expect("utf-8 path");
    assert_ok(
        &share_worker(&["setup", "--config", cfg], &[]).await,
        "setup",
    );
    let log = scratch.0.join("ui.log");
    let _ui = spawn(&["ui", "--config", cfg], &log);
    let base = format!("http://127.0.0.1:{port}");
    let login = format!("{base}/ui/login");
    let deadline = Instant::now() + Duration::from_secs(60);
    let page = loop {
        if let Ok((200, page)) = get(&client_from(1), &login, None).await {
            break page;
        }
        assert!(Instant::now() < deadline, "the dashboard never listened");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let csrf = csrf(&page);
    let sign_in = |from: u8, forwarded: &str, token: &str| {
        client_from(from)
            .post(&login)
            .header("content-type", "application/x-www-form-urlencoded")
            .header("x-forwarded-for", forwarded.to_owned())
            .body(format!("csrf={csrf}&token={token}"))
            .send()
    };

    // Client A, through the proxy (what A wrote itself is left of what the proxies appended),
    // locks itself out.
    for n in 0..5 {
        let forged = format!("192.0.2.{n}, 203.0.113.1, 10.1.2.3");
        let refused = sign_in(1, &forged, "wrong").await.expect("POST");
        assert_eq!(refused.status(), StatusCode::UNAUTHORIZED, "attempt {n}");
    }
    let throttled = sign_in(1, "203.0.113.1", TOKEN).await.expect("POST");
    assert_eq!(throttled.status(), StatusCode::TOO_MANY_REQUESTS);
    let bearer = client_from(1)
        .get(format!("{base}/ui"))
        .bearer_auth(TOKEN)
        .header("x-forwarded-for", "203.0.113.1")
        .send()
        .await
        .expect("GET");
    assert_eq!(bearer.status(), StatusCode::TOO_MANY_REQUESTS);
    // Client B, through the same proxy, is not locked out; nor is the proxy itself.
    let signed_in = sign_in(1, "203.0.113.2", TOKEN).await.expect("POST");
    assert_eq!(signed_in.status(), StatusCode::SEE_OTHER);
    let direct = client_from(1)
        .get(format!("{base}/ui"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("GET");
    assert_eq!(direct.status(), StatusCode::OK);
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        logged
            .lines()
            .any(|l| l.contains("a sign-in with a wrong token")
                && l.contains("203.0.113.1 via 127.0.0.1:")),
        "{logged}"
    );

    // 127.0.0.2 is no proxy: naming another client each time, it still locks out itself only.
    for n in 0..5 {
        let forged = format!("203.0.113.{}", 10 + n);
        let refused = sign_in(2, &forged, "wrong").await.expect("POST");
        assert_eq!(refused.status(), StatusCode::UNAUTHORIZED, "attempt {n}");
    }
    let throttled = sign_in(2, "203.0.113.99", TOKEN).await.expect("POST");
    assert_eq!(throttled.status(), StatusCode::TOO_MANY_REQUESTS);
    let other = sign_in(1, "203.0.113.10", TOKEN).await.expect("POST");
    assert_eq!(
        other.status(),
        StatusCode::SEE_OTHER,
        "a forged name locked nobody out"
    );

    // An action's audit line names the forwarded client (and the proxy it came through).
    let act = |from: u8, forwarded: &str| {
        client_from(from)
            .post(format!("{base}/ui/dlq/{topic}.dlq/act"))
            .bearer_auth(TOKEN)
            .header("content-type", "application/x-www-form-urlencoded")
            .header("x-forwarded-for", forwarded.to_owned())
            .body(format!("csrf={csrf}&action=skip&scope=selected&letter=0:0"))
            .send()
    };
    let accepted = act(1, "198.51.100.23, 10.9.9.9").await.expect("POST");
    assert_eq!(accepted.status(), StatusCode::SEE_OTHER);
    let started = |logged: &str, client: &str| {
        logged
            .lines()
            .any(|l| l.contains("dashboard action started") && l.contains(client))
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let logged = std::fs::read_to_string(&log).unwrap_or_default();
        if started(&logged, "\"198.51.100.23 via 127.0.0.1:") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no audit line naming 198.51.100.23:\n{logged}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // From a peer that is no proxy (127.0.0.3) the line names the peer, whatever the header
    // says.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // One action at a time: the first may still be running.
        let answer = act(3, "198.51.100.24").await.expect("POST");
        if answer.status() == StatusCode::SEE_OTHER {
            break;
        }
        assert_eq!(answer.status(), StatusCode::CONFLICT);
        assert!(Instant::now() < deadline, "the first action never finished");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let logged = std::fs::read_to_string(&log).unwrap_or_default();
        if started(&logged, "\"127.0.0.3:") {
            assert!(!logged.contains("198.51.100.24"), "{logged}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no audit line naming 127.0.0.3:\n{logged}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Off loopback, a dashboard over plain HTTP does not start unless `ui.allow-plain-http` says
/// so; the error names the address and both ways out.
#[tokio::test]
async fn a_dashboard_off_loopback_over_plain_http_starts_only_with_allow_plain_http() {
    let scratch = Scratch::new();
    let base = config(
        &unique("cli-plain-group"),
        &unique("cli-plain"),
        "handler = \"noop\"",
    );
    let port = reserve_port();
    let standalone = format!("[ui]\nlisten = \"0.0.0.0:{port}\"\ntoken = \"{TOKEN}\"\n");
    let ui = scratch.write(
        "ui.toml",
        &base.replace("[dlq]", &format!("{standalone}\n[dlq]")),
    );
    let embedded = scratch.write(
        "run.toml",
        &base.replace(
            "[dlq]",
            &format!("[telemetry]\nlisten = \"0.0.0.0:0\"\nui = true\n\n[ui]\ntoken = \"{TOKEN}\"\n\n[dlq]"),
        ),
    );
    for (command, cfg, key, table, listen) in [
        ("ui", &ui, "ui.listen", "ui", format!("0.0.0.0:{port}")),
        (
            "run",
            &embedded,
            "telemetry.ui",
            "telemetry",
            "0.0.0.0:0".to_owned(),
        ),
    ] {
        let started = Instant::now();
        let out = share_worker(
            &[command, "--config", cfg.to_str().expect("utf-8 path")],
            &[],
        )
        .await;
        assert!(!out.status.success(), "{command} started");
        let stderr = text(&out.stderr);
        for says in [
            format!("`{key}`"),
            format!(
                "the dashboard on `{table}.listen` = {listen} is not on loopback and would be served over plain HTTP"
            ),
            format!("`{table}.tls-cert-file` and `{table}.tls-key-file`"),
            format!("`{table}.behind-tls-proxy = true`"),
            "set `ui.allow-plain-http = true`".to_owned(),
        ] {
            assert!(stderr.contains(&says), "{command}: {says:?} in {stderr}");
        }
        assert!(started.elapsed() < Duration::from_secs(10), "{command}");
    }
    // With the flag it starts, and warns.
    let allowed = scratch.write(
        "allowed.toml",
        &base.replace(
            "[dlq]",
            &format!("{standalone}allow-plain-http = true\n\n[dlq]"),
        ),
    );
    let log = scratch.0.join("allowed.log");
    let _ui = spawn(
        &["ui", "--config", allowed.to_str().expect("utf-8 path")],
        &log,
    );
    let login = format!("http://127.0.0.1:{port}/ui/login");
    until_ok(&client_from(1), &login, Duration::from_secs(60)).await;
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        logged.contains(&format!(
            "the dashboard on 0.0.0.0:{port} is served over plain HTTP (ui.allow-plain-http)"
        )),
        "{logged}"
    );
}
