//! TLS for the http handler and the OTLP exporters: CA and client certificates read from PEM files
//! at start (a bad file stops the worker there and never fails a record), and the TLS failure of a
//! request told apart from other failures, for its retry reason.
//!
//! The crypto is rustls with aws-lc-rs, reqwest's; the system's roots come from
//! rustls-platform-verifier (on Linux: the files rustls-native-certs finds, `SSL_CERT_FILE` first).

use std::error::Error as StdError;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, anyhow};
use rustls::client::ResolvesClientCert;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use rustls::{AlertDescription, Error as TlsError, SignatureScheme};

/// The TLS of an https route's client: the system's roots plus `ca-file`, the client certificate
/// of `cert-file`/`key-file` when the route has one, HTTP/1.1 by ALPN (the only HTTP it speaks).
pub(crate) struct RouteTls {
    pub(crate) config: rustls::ClientConfig,
    /// Set when the route has no client certificate: tells whether a server asked for one.
    pub(crate) no_certificate: Option<Arc<NoClientCertificate>>,
}

impl RouteTls {
    pub(crate) fn new(
        ca_file: Option<&Path>,
        identity: Option<(&Path, &Path)>,
    ) -> anyhow::Result<Self> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let extra_roots = match ca_file {
            Some(path) => trust_anchors("ca-file", path)?,
            None => Vec::new(),
        };
        let verifier =
            rustls_platform_verifier::Verifier::new_with_extra_roots(extra_roots, provider.clone())
                .context("creating the HTTP client")?;
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("creating the HTTP client")?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier));
        let (mut config, no_certificate) = match identity {
            Some((cert_file, key_file)) => {
                let (certs, key) = client_certificate(cert_file, key_file)?;
                let config = builder
                    .with_client_auth_cert(certs, key)
                    .context("creating the HTTP client")?;
                (config, None)
            }
            None => {
                let none = Arc::new(NoClientCertificate::default());
                (builder.with_client_cert_resolver(none.clone()), Some(none))
            }
        };
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self {
            config,
            no_certificate,
        })
    }
}

/// The client-certificate side of a route without one: it sends none, and remembers whether a
/// server asked. In TLS 1.3 the client's handshake is over before the server has read the missing
/// certificate, so a server that requires one refuses it after the handshake (an alert, then the
/// connection closed), and if that happens before the request is written, hyper reports only that
/// the connection closed: without this the reason would not say that a certificate is missing.
#[derive(Debug, Default)]
pub(crate) struct NoClientCertificate {
    asked: AtomicBool,
}

impl NoClientCertificate {
    /// Whether a server has asked for a client certificate.
    pub(crate) fn asked(&self) -> bool {
        self.asked.load(Ordering::Relaxed)
    }
}

impl ResolvesClientCert for NoClientCertificate {
    fn resolve(
        &self,
        _acceptable_issuers: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        self.asked.store(true, Ordering::Relaxed);
        None
    }

    fn has_certs(&self) -> bool {
        false
    }
}

/// The certificates of the PEM file `path` (the value of `key`), each a usable trust anchor, to
/// trust in addition to the system's roots.
pub(crate) fn ca_certificates(key: &str, path: &Path) -> anyhow::Result<Vec<reqwest::Certificate>> {
    trust_anchors(key, path)?
        .iter()
        .map(|cert| reqwest::Certificate::from_der(cert))
        .collect::<Result<_, _>>()
        .with_context(|| format!("`{key}` {}", path.display()))
}

/// The certificates of the PEM file `path` (the value of `key`), each checked to be a usable
/// trust anchor.
fn trust_anchors(key: &str, path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let certs = certificates(key, path)?;
    let mut store = rustls::RootCertStore::empty();
    for (n, cert) in certs.iter().enumerate() {
        store.add(cert.clone()).map_err(|err| {
            anyhow!(
                "`{key}` {}: certificate {} is no usable CA certificate: {err}",
                path.display(),
                n + 1
            )
        })?;
    }
    Ok(certs)
}

/// The client certificate (chain) of `cert_file` with the private key of `key_file`, checked to
/// belong together.
fn client_certificate(
    cert_file: &Path,
    key_file: &Path,
) -> anyhow::Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let certs = certificates("cert-file", cert_file)?;
    let key_pem = read("key-file", key_file)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|err| {
        anyhow!(
            "`key-file` {}: no private key (PEM PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY): {err}",
            key_file.display()
        )
    })?;
    let provider: &CryptoProvider = &rustls::crypto::aws_lc_rs::default_provider();
    CertifiedKey::from_der(certs.clone(), key.clone_key(), provider).map_err(|err| {
        anyhow!(
            "`key-file` {} does not fit the certificate of `cert-file` {}: {err}",
            key_file.display(),
            cert_file.display()
        )
    })?;
    Ok((certs, key))
}

fn read(key: &str, path: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("`{key}` {}: cannot read it", path.display()))
}

/// Every certificate of the PEM file `path`: at least one.
fn certificates(key: &str, path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let pem = read(key, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| anyhow!("`{key}` {}: bad PEM: {err}", path.display()))?;
    if certs.is_empty() {
        return Err(anyhow!(
            "`{key}` {}: no PEM CERTIFICATE in it",
            path.display()
        ));
    }
    Ok(certs)
}

/// The retry reason of a request that failed in TLS (`None` for any other failure): a server
/// certificate this side refused, a client certificate the server refused, or another TLS error.
/// `no_certificate` is the route's when it has no client certificate (see [`NoClientCertificate`]).
pub(crate) fn failure_reason(
    err: &(dyn StdError + 'static),
    no_certificate: Option<&NoClientCertificate>,
) -> Option<String> {
    let asked = no_certificate.is_some_and(NoClientCertificate::asked);
    let Some(tls) = find_tls_error(err) else {
        return (asked && closed_before_sending(err)).then(|| {
            "TLS certificate error: the server asked for a client certificate, the route has \
             none (`cert-file`, `key-file`), and the connection closed before the request was sent"
                .to_owned()
        });
    };
    Some(match tls {
        TlsError::InvalidCertificate(_) => {
            format!("TLS certificate error: the server's certificate was refused: {tls}")
        }
        TlsError::AlertReceived(alert) if refuses_our_certificate(*alert) => {
            let missing = if no_certificate.is_some() {
                " (the route has no `cert-file`, `key-file`)"
            } else {
                ""
            };
            format!(
                "TLS certificate error: the server refused the client certificate: {tls}{missing}"
            )
        }
        TlsError::NoCertificatesPresented => {
            "TLS certificate error: the server presented no certificate".to_owned()
        }
        other => format!("TLS error: {other}"),
    })
}

/// Whether `err` is hyper's "connection was not ready": the connection closed between its
/// handshake and the request, which so was never sent.
fn closed_before_sending(err: &(dyn StdError + 'static)) -> bool {
    let mut next = Some(err);
    while let Some(err) = next {
        if err
            .downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_canceled)
        {
            return true;
        }
        next = err.source();
    }
    false
}

/// The rustls error in the chain of `err`. `io::Error` hides the error it wraps from `source()`
/// (it skips to that error's source), so it is opened with `get_ref`.
fn find_tls_error<'a>(err: &'a (dyn StdError + 'static)) -> Option<&'a TlsError> {
    let mut next = Some(err);
    while let Some(err) = next {
        if let Some(tls) = err.downcast_ref::<TlsError>() {
            return Some(tls);
        }
        if let Some(inner) = err
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
            && let Some(tls) = find_tls_error(inner)
        {
            return Some(tls);
        }
        next = err.source();
    }
    None
}

/// Alerts a server sends about the client's certificate (or its absence).
fn refuses_our_certificate(alert: AlertDescription) -> bool {
    matches!(
        alert,
        AlertDescription::CertificateRequired
            | AlertDescription::BadCertificate
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::CertificateRevoked
            | AlertDescription::CertificateExpired
            | AlertDescription::CertificateUnknown
            | AlertDescription::UnknownCA
            | AlertDescription::AccessDenied
    )
}

#[cfg(test)]
mod tests {
    use std::fmt;
    use std::io;

    use rustls::CertificateError;

    use super::*;

    /// An error wrapping another, as hyper and reqwest do.
    #[derive(Debug)]
    struct Wrapper(Box<dyn StdError + Send + Sync>);

    impl fmt::Display for Wrapper {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("error sending request")
        }
    }

    impl StdError for Wrapper {
        fn source(&self) -> Option<&(dyn StdError + 'static)> {
            Some(&*self.0)
        }
    }

    fn wrapped(tls: TlsError) -> Wrapper {
        Wrapper(Box::new(Wrapper(Box::new(io::Error::new(
            io::ErrorKind::InvalidData,
            tls,
        )))))
    }

    #[test]
    fn tls_errors_are_found_behind_io_errors() {
        let unknown = wrapped(TlsError::InvalidCertificate(
            CertificateError::UnknownIssuer,
        ));
        assert_eq!(
            failure_reason(&unknown, None).as_deref(),
            Some(
                "TLS certificate error: the server's certificate was refused: invalid peer certificate: UnknownIssuer"
            )
        );
        let name = wrapped(TlsError::InvalidCertificate(
            CertificateError::NotValidForName,
        ));
        assert!(
            failure_reason(&name, None)
                .is_some_and(|r| r.starts_with("TLS certificate error: the server's certificate")),
        );
        let required = wrapped(TlsError::AlertReceived(
            AlertDescription::CertificateRequired,
        ));
        assert_eq!(
            failure_reason(&required, None).as_deref(),
            Some(
                "TLS certificate error: the server refused the client certificate: received fatal alert: CertificateRequired"
            )
        );
        let unknown_ca = TlsError::AlertReceived(AlertDescription::UnknownCA);
        assert!(
            failure_reason(&unknown_ca, None)
                .is_some_and(|r| r.contains("the server refused the client certificate"))
        );
        let version = wrapped(TlsError::AlertReceived(AlertDescription::ProtocolVersion));
        assert_eq!(
            failure_reason(&version, None).as_deref(),
            Some("TLS error: received fatal alert: ProtocolVersion")
        );
    }

    #[test]
    fn other_failures_are_no_tls_errors() {
        let refused = Wrapper(Box::new(io::Error::from(io::ErrorKind::ConnectionRefused)));
        assert_eq!(failure_reason(&refused, None), None);
        let text = Wrapper(Box::new(io::Error::other("certificate")));
        assert_eq!(failure_reason(&text, None), None);
    }

    /// A real reqwest error: https:// to a server that answers in plain HTTP.
    #[tokio::test]
    async fn a_plain_http_answer_to_https_is_a_tls_error() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut hello = [0u8; 512];
            let _ = stream.read(&mut hello).await;
            let _ = stream
                .write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                .await;
        });
        let err = reqwest::Client::new()
            .get(format!("https://{addr}/"))
            .send()
            .await
            .unwrap_err();
        let reason = failure_reason(&err, None);
        assert!(
            reason
                .as_deref()
                .is_some_and(|r| r.starts_with("TLS error: ")),
            "{reason:?} from {err:?}"
        );
        server.abort();
    }

    /// A real hyper "connection was not ready": the request of a connection whose task is gone.
    async fn closed_before_sending_error() -> hyper::Error {
        let (ours, _theirs) = tokio::io::duplex(64);
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(ours))
                .await
                .unwrap();
        drop(connection);
        sender
            .send_request(hyper::Request::new(String::new()))
            .await
            .unwrap_err()
    }

    #[tokio::test]
    async fn a_connection_closed_after_a_certificate_request_names_the_missing_certificate() {
        let err = Wrapper(Box::new(closed_before_sending_error().await));
        let none = NoClientCertificate::default();
        assert_eq!(failure_reason(&err, None), None);
        assert_eq!(failure_reason(&err, Some(&none)), None, "no server asked");
        assert!(none.resolve(&[], &[]).is_none());
        assert!(none.asked());
        assert_eq!(
            failure_reason(&err, Some(&none)).as_deref(),
            Some(
                "TLS certificate error: the server asked for a client certificate, the route has \
                 none (`cert-file`, `key-file`), and the connection closed before the request was sent"
            )
        );
        let refused = TlsError::AlertReceived(AlertDescription::CertificateRequired);
        assert_eq!(
            failure_reason(&refused, Some(&none)).as_deref(),
            Some(
                "TLS certificate error: the server refused the client certificate: received fatal \
                 alert: CertificateRequired (the route has no `cert-file`, `key-file`)"
            )
        );
    }

    /// A fresh scratch directory for test `name`.
    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "share-worker-tls-{name}-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_certificate_and_its_key_make_an_identity_and_another_key_does_not() {
        let dir = scratch("identity");
        let ours = rcgen::generate_simple_self_signed(vec!["worker.test".to_owned()]).unwrap();
        let (cert_pem, key_pem) = (ours.cert.pem(), ours.signing_key.serialize_pem());
        let other = rcgen::KeyPair::generate().unwrap().serialize_pem();
        let write = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let cert = write("cert.pem", &cert_pem);
        let key = write("key.pem", &key_pem);
        let both = write("both.pem", &format!("{cert_pem}{key_pem}"));
        let other = write("other.key", &other);
        client_certificate(&cert, &key).unwrap();
        client_certificate(&both, &both).unwrap();
        let err = format!("{:#}", client_certificate(&cert, &other).unwrap_err());
        assert!(
            err.starts_with(&format!(
                "`key-file` {} does not fit the certificate of `cert-file` {}: ",
                other.display(),
                cert.display()
            )),
            "{err}"
        );
        let err = format!("{:#}", client_certificate(&key, &key).unwrap_err());
        assert!(err.contains("no PEM CERTIFICATE in it"), "{err}");
        assert_eq!(ca_certificates("ca-file", &both).unwrap().len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn bad_files_are_named_with_their_key() {
        let dir = scratch("bad");
        let missing = dir.join("missing.pem");
        let err = ca_certificates("ca-file", &missing).unwrap_err();
        assert!(
            format!("{err:#}").starts_with(&format!(
                "`ca-file` {}: cannot read it: ",
                missing.display()
            )),
            "{err:#}"
        );
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not PEM at all\n").unwrap();
        let err = ca_certificates("telemetry.otlp-ca-file", &empty).unwrap_err();
        assert_eq!(
            format!("{err:#}"),
            format!(
                "`telemetry.otlp-ca-file` {}: no PEM CERTIFICATE in it",
                empty.display()
            )
        );
        let garbage = dir.join("garbage.pem");
        std::fs::write(
            &garbage,
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let err = ca_certificates("ca-file", &garbage).unwrap_err();
        assert!(
            format!("{err:#}").contains("certificate 1 is no usable CA certificate"),
            "{err:#}"
        );
        let err = client_certificate(&garbage, &empty).unwrap_err();
        assert!(
            format!("{err:#}")
                .starts_with(&format!("`key-file` {}: no private key", empty.display())),
            "{err:#}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
