//! HTTPS for the listeners: rustls (aws-lc-rs) with the certificate and key of `tls-cert-file`
//! and `tls-key-file`, read again when they change, so a rotated certificate (cert-manager, a
//! Kubernetes secret) is served without a restart.
//!
//! A handshake looks at the files at most every [`RECHECK`]: it reads both (a few kilobytes) and
//! compares their bytes with what it serves, which a copy that keeps the modification time
//! cannot fool. A pair that does not parse or fit together (a rotation half written) is logged
//! and the previous certificate kept until the files are whole.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::anyhow;
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_rustls::TlsAcceptor;

/// How often a handshake looks at the files for a new certificate.
pub(crate) const RECHECK: Duration = Duration::from_secs(5);

/// A TLS acceptor serving the certificate of `cert` with the key of `key`, both PEM files (the
/// values of `table.tls-cert-file` and `table.tls-key-file`).
pub(crate) fn acceptor(
    table: &'static str,
    cert: &Path,
    key: &Path,
) -> anyhow::Result<TlsAcceptor> {
    let files = Files {
        table,
        cert: cert.to_owned(),
        key: key.to_owned(),
    };
    let pem = files.read().map_err(|why| anyhow!(why))?;
    let certified = identity(&pem).map_err(|why| anyhow!(files.blame(&why)))?;
    let resolver = Reloading {
        files,
        state: Mutex::new(Served {
            pem,
            certified: Arc::new(certified),
            checked: Instant::now(),
            refused: None,
        }),
    };
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|err| anyhow!("`{table}.tls-cert-file`: no usable TLS versions: {err}"))?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(resolver));
    // The listener speaks HTTP/1.1 only.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// The two files and the keys naming them.
#[derive(Debug)]
struct Files {
    table: &'static str,
    cert: PathBuf,
    key: PathBuf,
}

/// The bytes of the certificate file and of the key file.
type Pem = (Vec<u8>, Vec<u8>);

impl Files {
    fn read(&self) -> Result<Pem, String> {
        let read = |name: &str, path: &Path| {
            std::fs::read(path).map_err(|err| {
                format!(
                    "`{}.{name}` {}: cannot read it: {err}",
                    self.table,
                    path.display()
                )
            })
        };
        Ok((
            read("tls-cert-file", &self.cert)?,
            read("tls-key-file", &self.key)?,
        ))
    }

    fn blame(&self, why: &str) -> String {
        format!(
            "`{table}.tls-cert-file` {} with `{table}.tls-key-file` {}: {why}",
            self.cert.display(),
            self.key.display(),
            table = self.table
        )
    }
}

/// The certificate chain of `pem`'s first file with the private key of its second, checked to
/// belong together.
fn identity((cert, key): &Pem) -> Result<CertifiedKey, String> {
    let chain = CertificateDer::pem_slice_iter(cert)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| format!("bad PEM in the certificate file: {err}"))?;
    if chain.is_empty() {
        return Err("no PEM CERTIFICATE in the certificate file".to_owned());
    }
    let key = PrivateKeyDer::from_pem_slice(key)
        .map_err(|err| format!("no PEM private key in the key file: {err}"))?;
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    CertifiedKey::from_der(chain, key, &provider)
        .map_err(|err| format!("the key does not fit the certificate: {err}"))
}

/// Serves the files' certificate, read again when they change.
#[derive(Debug)]
struct Reloading {
    files: Files,
    state: Mutex<Served>,
}

#[derive(Debug)]
struct Served {
    /// What `certified` was made of.
    pem: Pem,
    certified: Arc<CertifiedKey>,
    checked: Instant,
    /// Files that did not make a certificate, logged once.
    refused: Option<Pem>,
}

impl Reloading {
    /// Reads the files if [`RECHECK`] has passed, and serves what they hold if it changed and
    /// makes a certificate.
    fn refresh(&self, served: &mut Served) {
        if served.checked.elapsed() < RECHECK {
            return;
        }
        served.checked = Instant::now();
        let pem = match self.files.read() {
            Ok(pem) => pem,
            Err(why) => {
                tracing::warn!("HTTPS keeps its certificate: {why}");
                return;
            }
        };
        if pem == served.pem || served.refused.as_ref() == Some(&pem) {
            return;
        }
        match identity(&pem) {
            Ok(certified) => {
                tracing::info!(
                    "HTTPS serves the new certificate of `{}.tls-cert-file` {}",
                    self.files.table,
                    self.files.cert.display()
                );
                served.certified = Arc::new(certified);
                served.pem = pem;
                served.refused = None;
            }
            Err(why) => {
                tracing::warn!("HTTPS keeps its certificate: {}", self.files.blame(&why));
                served.refused = Some(pem);
            }
        }
    }
}

impl ResolvesServerCert for Reloading {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let mut served = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        self.refresh(&mut served);
        Some(served.certified.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(name: &str) -> (String, String) {
        let generated = rcgen::generate_simple_self_signed(vec![name.to_owned()]).unwrap();
        (generated.cert.pem(), generated.signing_key.serialize_pem())
    }

    fn scratch() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "share-worker-certs-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn served(resolver: &Reloading) -> Vec<u8> {
        let served = resolver.state.lock().unwrap();
        served.certified.cert[0].to_vec()
    }

    #[test]
    fn a_changed_pair_is_served_after_the_recheck_and_a_broken_one_is_not() {
        let dir = scratch();
        let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
        let (first_cert, first_key) = pair("first.test");
        std::fs::write(&cert, &first_cert).unwrap();
        std::fs::write(&key, &first_key).unwrap();
        let files = Files {
            table: "ui",
            cert: cert.clone(),
            key: key.clone(),
        };
        let pem = files.read().unwrap();
        let resolver = Reloading {
            state: Mutex::new(Served {
                certified: Arc::new(identity(&pem).unwrap()),
                pem,
                checked: Instant::now(),
                refused: None,
            }),
            files,
        };
        let first = served(&resolver);
        // Half a rotation: the new certificate with the old key.
        let (second_cert, second_key) = pair("second.test");
        std::fs::write(&cert, &second_cert).unwrap();
        let expire = |resolver: &Reloading| {
            let mut served = resolver.state.lock().unwrap();
            served.checked = Instant::now()
                .checked_sub(RECHECK)
                .expect("an uptime above 5s");
            resolver.refresh(&mut served);
        };
        {
            // Not before the recheck.
            let mut state = resolver.state.lock().unwrap();
            resolver.refresh(&mut state);
        }
        assert_eq!(served(&resolver), first);
        expire(&resolver);
        assert_eq!(served(&resolver), first, "a mismatched pair is not served");
        assert!(resolver.state.lock().unwrap().refused.is_some());
        std::fs::write(&key, &second_key).unwrap();
        expire(&resolver);
        let second = served(&resolver);
        assert_ne!(second, first);
        // Files gone: the certificate stays.
        std::fs::remove_file(&cert).unwrap();
        expire(&resolver);
        assert_eq!(served(&resolver), second);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_bad_pair_at_start_names_both_keys() {
        let dir = scratch();
        let (cert_pem, _) = pair("a.test");
        let (_, other_key) = pair("b.test");
        let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
        std::fs::write(&cert, &cert_pem).unwrap();
        std::fs::write(&key, &other_key).unwrap();
        let err = acceptor("telemetry", &cert, &key)
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.starts_with(&format!(
                "`telemetry.tls-cert-file` {} with `telemetry.tls-key-file` {}: the key does not fit the certificate",
                cert.display(),
                key.display()
            )),
            "{err}"
        );
        let missing = dir.join("missing.key");
        let err = acceptor("ui", &cert, &missing).err().unwrap().to_string();
        assert!(
            err.starts_with(&format!(
                "`ui.tls-key-file` {}: cannot read it",
                missing.display()
            )),
            "{err}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
