//! HTTPS: http routes with `ca-file` and a client certificate (`cert-file`, `key-file`), the
//! system's roots, TLS failures as retries with the certificate error in the dead letter, TLS files
//! checked at start, and OTLP export to an https collector with `otlp-ca-file`. A throw-away CA
//! (rcgen) signs the servers' and the client's certificates; the servers are `fake_http`'s behind
//! tokio-rustls.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::fake_http::{Exports, Seen, collector, collector_connection, connection, serve};
use crate::support::*;

/// PEM files of a throw-away CA, a server certificate for `localhost` and `127.0.0.1`, one for
/// another name only and a client certificate, all signed by the CA, in a scratch directory.
pub(crate) struct Pki {
    pub(crate) ca: PathBuf,
    pub(crate) server_cert: PathBuf,
    pub(crate) server_key: PathBuf,
    misnamed_cert: PathBuf,
    misnamed_key: PathBuf,
    pub(crate) client_cert: PathBuf,
    pub(crate) client_key: PathBuf,
}

impl Pki {
    pub(crate) fn new(scratch: &Scratch) -> Self {
        let ca_key = KeyPair::generate().expect("a CA key");
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        ca.distinguished_name
            .push(DnType::CommonName, "share-worker test CA");
        let ca_pem = ca.self_signed(&ca_key).expect("the CA certificate").pem();
        let issuer = Issuer::new(ca, ca_key);
        let leaf = |names: &[&str], usage: ExtendedKeyUsagePurpose| {
            let key = KeyPair::generate().expect("a key");
            let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
            let mut params = CertificateParams::new(names).expect("parameters");
            params.extended_key_usages = vec![usage];
            params
                .distinguished_name
                .push(DnType::CommonName, "share-worker test");
            let cert = params.signed_by(&key, &issuer).expect("a certificate");
            (cert.pem(), key.serialize_pem())
        };
        let (server_cert, server_key) = leaf(
            &["localhost", "127.0.0.1"],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let (misnamed_cert, misnamed_key) =
            leaf(&["elsewhere.test"], ExtendedKeyUsagePurpose::ServerAuth);
        let (client_cert, client_key) = leaf(&["worker.test"], ExtendedKeyUsagePurpose::ClientAuth);
        Self {
            ca: scratch.write("ca.pem", &ca_pem),
            server_cert: scratch.write("server.pem", &server_cert),
            server_key: scratch.write("server.key", &server_key),
            misnamed_cert: scratch.write("misnamed.pem", &misnamed_cert),
            misnamed_key: scratch.write("misnamed.key", &misnamed_key),
            client_cert: scratch.write("client.pem", &client_cert),
            client_key: scratch.write("client.key", &client_key),
        }
    }

    /// A TLS acceptor with the server certificate; with `client_auth`, it requires a client
    /// certificate signed by the CA.
    fn acceptor(&self, client_auth: bool) -> TlsAcceptor {
        self.acceptor_with(&self.server_cert, &self.server_key, client_auth)
    }

    /// A TLS acceptor with the certificate for another name.
    fn misnamed_acceptor(&self) -> TlsAcceptor {
        self.acceptor_with(&self.misnamed_cert, &self.misnamed_key, false)
    }

    fn acceptor_with(&self, cert: &Path, key: &Path, client_auth: bool) -> TlsAcceptor {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let chain = CertificateDer::pem_file_iter(cert)
            .expect("the server certificate")
            .collect::<Result<Vec<_>, _>>()
            .expect("the server certificate");
        let key = PrivateKeyDer::from_pem_file(key).expect("the server key");
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("TLS versions");
        let builder = if client_auth {
            let mut roots = RootCertStore::empty();
            for ca in CertificateDer::pem_file_iter(&self.ca).expect("the CA") {
                roots.add(ca.expect("the CA")).expect("a trust anchor");
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .expect("a client verifier");
            builder.with_client_cert_verifier(verifier)
        } else {
            builder.with_no_client_auth()
        };
        let config = builder
            .with_single_cert(chain, key)
            .expect("the server certificate and key");
        TlsAcceptor::from(Arc::new(config))
    }

    fn path(path: &Path) -> &str {
        path.to_str().expect("utf-8 path")
    }
}

/// Accepts TLS connections on `listener`, each handed to `connection` once its handshake is done.
/// After a failed handshake (its alert sent) the connection is read to its end before it is
/// closed: closing with the client's request unread would reset it, and the reset can overtake
/// the alert.
async fn serve_tls<F, Fut>(listener: TcpListener, acceptor: TlsAcceptor, connection: F)
where
    F: Fn(TlsStream<TcpStream>) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    while let Ok((stream, _)) = listener.accept().await {
        let acceptor = acceptor.clone();
        let connection = connection.clone();
        tokio::spawn(async move {
            match acceptor.accept(stream).into_fallible().await {
                Ok(tls) => connection(tls).await,
                Err((_, mut stream)) => {
                    let mut sink = [0u8; 4096];
                    let drain = async { while matches!(stream.read(&mut sink).await, Ok(1..)) {} };
                    let _ = tokio::time::timeout(DEADLINE, drain).await;
                }
            }
        });
    }
}

/// An HTTPS `fake_http::serve` on 127.0.0.1: its port and what it saw.
async fn https_endpoint(acceptor: TlsAcceptor) -> (u16, Arc<Mutex<Seen>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("binding");
    let port = listener.local_addr().expect("an address").port();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let server_seen = seen.clone();
    tokio::spawn(serve_tls(listener, acceptor, move |tls| {
        connection(tls, server_seen.clone())
    }));
    (port, seen)
}

/// The test config with at most 2 attempts per record.
fn two_attempts(config: String) -> String {
    config.replace("[retry]\n", "[retry]\nmax-attempts = 2\n")
}

/// A second `[[route]]` (appended after the first).
fn another_route(topic: &str, keys: &str) -> String {
    format!("\n[[route]]\ntopic = \"{topic}\"\nhandler = \"http\"\ntimeout = \"5s\"\n{keys}\n")
}

/// The `share.dlq.error` of the first dead letter of `topic`.
async fn dead_letter_error(topic: &str) -> String {
    let letter = read_headers(&format!("{topic}.dlq"), 1).await.remove(0);
    header_value(&letter, "share.dlq.error").expect("share.dlq.error")
}

/// What the endpoint accepted: the bodies it saw.
fn bodies(seen: &Mutex<Seen>) -> Vec<String> {
    let seen = seen.lock().expect("the seen lock");
    seen.requests.iter().map(|(body, _)| body.clone()).collect()
}

#[tokio::test]
async fn an_https_route_trusts_its_ca_file_and_dead_letters_an_unknown_issuer_or_a_wrong_name() {
    let scratch = Scratch::new();
    let pki = Pki::new(&scratch);
    let (port, seen) = https_endpoint(pki.acceptor(false)).await;
    let (misnamed_port, misnamed_seen) = https_endpoint(pki.misnamed_acceptor()).await;
    let trusted = unique("cli-https-ca");
    let untrusted = unique("cli-https-noca");
    let misnamed = unique("cli-https-misnamed");
    let group = unique("cli-https-group");
    let ca = format!("ca-file = \"{}\"", Pki::path(&pki.ca));
    let route = format!(
        "handler = \"http\"\nurl = \"https://localhost:{port}/send\"\ntimeout = \"5s\"\n{ca}"
    );
    let text = two_attempts(config(&group, &trusted, &route))
        + &another_route(
            &untrusted,
            &format!("url = \"https://127.0.0.1:{port}/send\""),
        )
        + &another_route(
            &misnamed,
            &format!("url = \"https://localhost:{misnamed_port}/send\"\n{ca}"),
        );
    let cfg = scratch.write("worker.toml", &text);
    let cfg = cfg.to_str().expect("utf-8 path");
    setup_and_produce(&scratch, cfg, &trusted, 1, &["ok-1", "ok-2", "ok-3"], &[]).await;
    setup_and_produce(&scratch, cfg, &untrusted, 1, &["ok-untrusted"], &[]).await;
    setup_and_produce(&scratch, cfg, &misnamed, 1, &["ok-misnamed"], &[]).await;
    let stats = run_until_idle(&scratch, cfg).await;
    assert_eq!(count(&stats, "accepted"), 3, "{stats}");
    assert_eq!(count(&stats, "dlq"), 2, "{stats}");
    assert_eq!(count(&stats, "released"), 2, "each retried once: {stats}");
    let mut seen = bodies(&seen);
    seen.sort();
    assert_eq!(seen, ["ok-1", "ok-2", "ok-3"], "nothing else got through");
    assert!(bodies(&misnamed_seen).is_empty());
    assert_eq!(
        dead_letter_error(&untrusted).await,
        format!(
            "https://127.0.0.1:{port}/…: TLS certificate error: the server's certificate was refused: invalid peer certificate: UnknownIssuer"
        )
    );
    let error = dead_letter_error(&misnamed).await;
    assert!(
        error.starts_with(&format!(
            "https://localhost:{misnamed_port}/…: TLS certificate error: the server's certificate was refused: invalid peer certificate: certificate not valid for name \"localhost\""
        )),
        "{error}"
    );
}

#[tokio::test]
async fn the_system_roots_are_trusted() {
    // rustls-platform-verifier reads the system's roots with rustls-native-certs, which takes
    // `SSL_CERT_FILE` first: the throw-away CA stands in for the system's.
    let scratch = Scratch::new();
    let pki = Pki::new(&scratch);
    let (port, seen) = https_endpoint(pki.acceptor(false)).await;
    let topic = unique("cli-https-system");
    let group = unique("cli-https-system-group");
    let route =
        format!("handler = \"http\"\nurl = \"https://localhost:{port}/send\"\ntimeout = \"5s\"");
    let cfg = scratch.write("worker.toml", &two_attempts(config(&group, &topic, &route)));
    let cfg = cfg.to_str().expect("utf-8 path");
    setup_and_produce(&scratch, cfg, &topic, 1, &["ok-1", "ok-2"], &[]).await;
    let stats = run_until_idle_with(&scratch, cfg, &[("SSL_CERT_FILE", Pki::path(&pki.ca))]).await;
    assert_eq!(count(&stats, "accepted"), 2, "{stats}");
    assert_eq!(count(&stats, "dlq"), 0, "{stats}");
    assert_eq!(bodies(&seen).len(), 2);
}

#[tokio::test]
async fn a_host_without_system_roots_runs_http_and_ca_file_routes_and_refuses_others_at_start() {
    // `SSL_CERT_FILE=/dev/null` (and no `SSL_CERT_DIR`): no system roots, as in a slim container.
    let no_roots = [("SSL_CERT_FILE", "/dev/null"), ("SSL_CERT_DIR", "")];
    let scratch = Scratch::new();
    let pki = Pki::new(&scratch);
    let (port, https_seen) = https_endpoint(pki.acceptor(false)).await;
    let plain = TcpListener::bind("127.0.0.1:0").await.expect("binding");
    let plain_addr = plain.local_addr().expect("an address");
    let plain_seen = Arc::new(Mutex::new(Seen::default()));
    let plain_server = tokio::spawn(serve(plain, plain_seen.clone()));
    let otlp = TcpListener::bind("127.0.0.1:0").await.expect("binding");
    let otlp_addr = otlp.local_addr().expect("an address");
    let exports = Exports::default();
    let collector = tokio::spawn(collector(otlp, exports.clone()));
    let secure = unique("cli-noroots-https");
    let insecure = unique("cli-noroots-http");
    let group = unique("cli-noroots-group");
    let route = format!(
        "handler = \"http\"\nurl = \"https://localhost:{port}/send\"\ntimeout = \"5s\"\nca-file = \"{}\"",
        Pki::path(&pki.ca)
    );
    let toml = config(&group, &secure, &route).replace(
        "[dlq]",
        &format!(
            "[telemetry]\notlp-endpoint = \"http://{otlp_addr}\"\notlp-interval = \"200ms\"\n\n[dlq]"
        ),
    ) + &another_route(&insecure, &format!("url = \"http://{plain_addr}/send\""));
    let cfg = scratch.write("worker.toml", &toml);
    let cfg = cfg.to_str().expect("utf-8 path");
    setup_and_produce(&scratch, cfg, &secure, 1, &["ok-secure"], &[]).await;
    setup_and_produce(&scratch, cfg, &insecure, 1, &["ok-plain"], &[]).await;
    let stats = run_until_idle_with(&scratch, cfg, &no_roots).await;
    assert_eq!(count(&stats, "accepted"), 2, "{stats}");
    assert_eq!(bodies(&https_seen), ["ok-secure"]);
    assert_eq!(bodies(&plain_seen), ["ok-plain"]);
    assert!(
        exports
            .lock()
            .expect("the exports lock")
            .iter()
            .any(|(path, _)| path == "/v1/traces"),
        "spans reached the http:// collector"
    );

    // An https route trusting only the system's roots cannot start on such a host.
    let bare = scratch.write(
        "bare.toml",
        &config(
            &group,
            &secure,
            &format!("handler = \"http\"\nurl = \"https://localhost:{port}/send\""),
        ),
    );
    let out = share_worker(
        &["check", "--config", bare.to_str().expect("utf-8 path")],
        &no_roots,
    )
    .await;
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!("route {secure}: creating the HTTP client"))
            && stderr.contains("No CA certificates were loaded from the system"),
        "{stderr}"
    );
    plain_server.abort();
    collector.abort();
}

#[tokio::test]
async fn a_client_certificate_opens_a_mutual_tls_endpoint_and_its_absence_is_a_tls_retry() {
    let scratch = Scratch::new();
    let pki = Pki::new(&scratch);
    let (port, seen) = https_endpoint(pki.acceptor(true)).await;
    let with_cert = unique("cli-mtls");
    let without = unique("cli-mtls-nocert");
    let group = unique("cli-mtls-group");
    let ca = format!("ca-file = \"{}\"", Pki::path(&pki.ca));
    let route = format!(
        "handler = \"http\"\nurl = \"https://localhost:{port}/send\"\ntimeout = \"5s\"\n{ca}\ncert-file = \"{}\"\nkey-file = \"{}\"",
        Pki::path(&pki.client_cert),
        Pki::path(&pki.client_key)
    );
    let text = two_attempts(config(&group, &with_cert, &route))
        + &another_route(
            &without,
            &format!("url = \"https://localhost:{port}/send\"\n{ca}"),
        );
    let cfg = scratch.write("worker.toml", &text);
    let cfg = cfg.to_str().expect("utf-8 path");
    setup_and_produce(&scratch, cfg, &with_cert, 1, &["ok-1", "ok-2"], &[]).await;
    setup_and_produce(&scratch, cfg, &without, 1, &["ok-anonymous"], &[]).await;
    let stats = run_until_idle(&scratch, cfg).await;
    assert_eq!(count(&stats, "accepted"), 2, "{stats}");
    assert_eq!(count(&stats, "dlq"), 1, "{stats}");
    assert_eq!(count(&stats, "released"), 1, "retried once: {stats}");
    let mut seen = bodies(&seen);
    seen.sort();
    assert_eq!(seen, ["ok-1", "ok-2"]);
    // In TLS 1.3 the server refuses the missing certificate after the client's handshake: its
    // alert reaches the request, or closes the connection before the request is written.
    let error = dead_letter_error(&without).await;
    let url = format!("https://localhost:{port}/…");
    let refused = format!(
        "{url}: TLS certificate error: the server refused the client certificate: received fatal alert: CertificateRequired (the route has no `cert-file`, `key-file`)"
    );
    let closed = format!(
        "{url}: TLS certificate error: the server asked for a client certificate, the route has none (`cert-file`, `key-file`), and the connection closed before the request was sent"
    );
    assert!(error == refused || error == closed, "{error}");
}

#[tokio::test]
async fn a_bad_tls_file_stops_the_worker_at_start_and_holds_no_record() {
    let scratch = Scratch::new();
    let pki = Pki::new(&scratch);
    let (port, seen) = https_endpoint(pki.acceptor(true)).await;
    let topic = unique("cli-https-badfile");
    let group = unique("cli-https-badfile-group");
    let route = |key: &Path| {
        format!(
            "handler = \"http\"\nurl = \"https://localhost:{port}/send\"\nca-file = \"{}\"\ncert-file = \"{}\"\nkey-file = \"{}\"",
            Pki::path(&pki.ca),
            Pki::path(&pki.client_cert),
            Pki::path(key)
        )
    };
    // The server's key with the client's certificate.
    let bad = scratch.write("bad.toml", &config(&group, &topic, &route(&pki.server_key)));
    let bad = bad.to_str().expect("utf-8 path");
    setup_and_produce(&scratch, bad, &topic, 1, &["ok-1"], &[]).await;
    let expected = format!(
        "share-worker: error: route {topic}: `key-file` {} does not fit the certificate of `cert-file` {}",
        Pki::path(&pki.server_key),
        Pki::path(&pki.client_cert)
    );
    for command in ["run", "check"] {
        let out = share_worker(&[command, "--config", bad], &[]).await;
        assert!(!out.status.success(), "{command} succeeded");
        let stderr = text(&out.stderr);
        assert!(stderr.contains(&expected), "{command}: {stderr}");
    }
    let missing = scratch.0.join("missing.pem");
    let gone = scratch.write(
        "gone.toml",
        &config(&group, &topic, &route(&pki.client_key)).replace(
            "[dlq]",
            &format!(
                "[telemetry]\notlp-endpoint = \"https://localhost:{port}\"\notlp-ca-file = \"{}\"\n\n[dlq]",
                Pki::path(&missing)
            ),
        ),
    );
    let out = share_worker(
        &["run", "--config", gone.to_str().expect("utf-8 path")],
        &[],
    )
    .await;
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "`telemetry.otlp-ca-file` {}: cannot read it: No such file",
            Pki::path(&missing)
        )),
        "{stderr}"
    );

    // The record was never acquired: its first delivery is the good run's.
    let good = scratch.write(
        "good.toml",
        &config(&group, &topic, &route(&pki.client_key)),
    );
    let stats = run_until_idle(&scratch, good.to_str().expect("utf-8 path")).await;
    assert_eq!(count(&stats, "accepted"), 1, "{stats}");
    let seen = seen.lock().expect("the seen lock");
    assert_eq!(seen.heads.len(), 1, "{seen:?}");
    assert!(
        seen.heads[0].contains("x-share-delivery-count: 1\r\n"),
        "{seen:?}"
    );
}

#[tokio::test]
async fn spans_and_metrics_reach_an_https_collector_trusted_by_otlp_ca_file() {
    let scratch = Scratch::new();
    let pki = Pki::new(&scratch);
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("binding");
    let port = listener.local_addr().expect("an address").port();
    let exports = Exports::default();
    let collected = exports.clone();
    let collector = tokio::spawn(serve_tls(listener, pki.acceptor(false), move |tls| {
        collector_connection(tls, collected.clone())
    }));
    let topic = unique("cli-otlp-https");
    let group = unique("cli-otlp-https-group");
    let text = config(&group, &topic, "handler = \"noop\"").replace(
        "[dlq]",
        &format!(
            "[telemetry]\notlp-endpoint = \"https://localhost:{port}\"\notlp-ca-file = \"{}\"\notlp-interval = \"200ms\"\n\n[dlq]",
            Pki::path(&pki.ca)
        ),
    );
    let cfg = scratch.write("worker.toml", &text);
    let cfg = cfg.to_str().expect("utf-8 path");
    setup_and_produce(&scratch, cfg, &topic, 1, &["a", "b", "c"], &[]).await;
    let stats = run_until_idle(&scratch, cfg).await;
    assert_eq!(count(&stats, "accepted"), 3, "{stats}");
    // The run flushed its spans and metrics on exit.
    let exported = exports.lock().expect("the exports lock").clone();
    let paths: std::collections::BTreeSet<&str> =
        exported.iter().map(|(path, _)| path.as_str()).collect();
    assert_eq!(
        paths,
        ["/v1/metrics", "/v1/traces"].into(),
        "{} exports",
        exported.len()
    );
    let spans = exported
        .iter()
        .filter(|(path, _)| path == "/v1/traces")
        .map(|(_, body)| spans_named(body, "process"))
        .sum::<usize>();
    assert_eq!(spans, 3, "one process span per record");
    collector.abort();
}

/// How many spans named `name` an OTLP trace export holds.
fn spans_named(body: &[u8], name: &str) -> usize {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use prost::Message as _;
    let request = ExportTraceServiceRequest::decode(body).expect("OTLP traces");
    request
        .resource_spans
        .iter()
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans)
        .filter(|span| span.name == name)
        .count()
}
