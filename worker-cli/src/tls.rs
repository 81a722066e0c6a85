//! TLS for the http handler and the OTLP exporters: CA and client certificates read from PEM files
//! at start (a bad file stops the worker there and never fails a record), and the TLS failure of a
//! request told apart from other failures, for its retry reason.
//!
//! The crypto is rustls with aws-lc-rs, reqwest's; the system's roots come from
//! rustls-platform-verifier (on Linux: the files rustls-native-certs finds, `SSL_CERT_FILE` first).

use std::error::Error as StdError;
use std::path::Path;

use anyhow::{Context, anyhow};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use rustls::{AlertDescription, Error as TlsError};

/// The certificates of the PEM file `path` (the value of `key`), each a usable trust anchor, to
/// trust in addition to the system's roots.
pub(crate) fn ca_certificates(key: &str, path: &Path) -> anyhow::Result<Vec<reqwest::Certificate>> {
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
    certs
        .iter()
        .map(|cert| reqwest::Certificate::from_der(cert))
        .collect::<Result<_, _>>()
        .with_context(|| format!("`{key}` {}", path.display()))
}

/// The client certificate (chain) of `cert_file` with the private key of `key_file`, checked to
/// belong together.
pub(crate) fn identity(cert_file: &Path, key_file: &Path) -> anyhow::Result<reqwest::Identity> {
    let certs = certificates("cert-file", cert_file)?;
    let key_pem = read("key-file", key_file)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|err| {
        anyhow!(
            "`key-file` {}: no private key (PEM PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY): {err}",
            key_file.display()
        )
    })?;
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    CertifiedKey::from_der(certs, key, &provider).map_err(|err| {
        anyhow!(
            "`key-file` {} does not fit the certificate of `cert-file` {}: {err}",
            key_file.display(),
            cert_file.display()
        )
    })?;
    let mut pem = read("cert-file", cert_file)?;
    if cert_file != key_file {
        pem.push(b'\n');
        pem.extend_from_slice(&key_pem);
    }
    reqwest::Identity::from_pem(&pem).with_context(|| {
        format!(
            "`cert-file` {} with `key-file` {}",
            cert_file.display(),
            key_file.display()
        )
    })
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
pub(crate) fn failure_reason(err: &(dyn StdError + 'static)) -> Option<String> {
    let tls = find_tls_error(err)?;
    Some(match tls {
        TlsError::InvalidCertificate(_) => {
            format!("TLS certificate error: the server's certificate was refused: {tls}")
        }
        TlsError::AlertReceived(alert) if refuses_our_certificate(*alert) => {
            format!("TLS certificate error: the server refused the client certificate: {tls}")
        }
        TlsError::NoCertificatesPresented => {
            "TLS certificate error: the server presented no certificate".to_owned()
        }
        other => format!("TLS error: {other}"),
    })
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
            failure_reason(&unknown).as_deref(),
            Some(
                "TLS certificate error: the server's certificate was refused: invalid peer certificate: UnknownIssuer"
            )
        );
        let name = wrapped(TlsError::InvalidCertificate(
            CertificateError::NotValidForName,
        ));
        assert!(
            failure_reason(&name)
                .is_some_and(|r| r.starts_with("TLS certificate error: the server's certificate")),
        );
        let required = wrapped(TlsError::AlertReceived(
            AlertDescription::CertificateRequired,
        ));
        assert_eq!(
            failure_reason(&required).as_deref(),
            Some(
                "TLS certificate error: the server refused the client certificate: received fatal alert: CertificateRequired"
            )
        );
        let unknown_ca = TlsError::AlertReceived(AlertDescription::UnknownCA);
        assert!(
            failure_reason(&unknown_ca)
                .is_some_and(|r| r.contains("the server refused the client certificate"))
        );
        let version = wrapped(TlsError::AlertReceived(AlertDescription::ProtocolVersion));
        assert_eq!(
            failure_reason(&version).as_deref(),
            Some("TLS error: received fatal alert: ProtocolVersion")
        );
    }

    #[test]
    fn other_failures_are_no_tls_errors() {
        let refused = Wrapper(Box::new(io::Error::from(io::ErrorKind::ConnectionRefused)));
        assert_eq!(failure_reason(&refused), None);
        let text = Wrapper(Box::new(io::Error::other("certificate")));
        assert_eq!(failure_reason(&text), None);
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
        let reason = failure_reason(&err);
        assert!(
            reason
                .as_deref()
                .is_some_and(|r| r.starts_with("TLS error: ")),
            "{reason:?} from {err:?}"
        );
        server.abort();
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
        identity(&cert, &key).unwrap();
        identity(&both, &both).unwrap();
        let err = format!("{:#}", identity(&cert, &other).unwrap_err());
        assert!(
            err.starts_with(&format!(
                "`key-file` {} does not fit the certificate of `cert-file` {}: ",
                other.display(),
                cert.display()
            )),
            "{err}"
        );
        let err = format!("{:#}", identity(&key, &key).unwrap_err());
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
        let err = identity(&garbage, &empty).unwrap_err();
        assert!(
            format!("{err:#}")
                .starts_with(&format!("`key-file` {}: no private key", empty.display())),
            "{err:#}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
