//! [`TlsConfig`]: what to trust and who to be, and the rustls client configuration made from it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::{Error, ErrorKind, Result};

/// TLS settings: which certificate authorities to trust and, for mutual TLS, the client's own
/// certificate and key (all PEM files).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsConfig {
    roots: Roots,
    client: Option<ClientIdentity>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Roots {
    System,
    CaFile(PathBuf),
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct ClientIdentity {
    cert_file: PathBuf,
    key_file: PathBuf,
}

impl TlsConfig {
    /// Trusts the operating system's certificate authorities.
    pub fn system_roots() -> Self {
        Self {
            roots: Roots::System,
            client: None,
        }
    }

    /// Trusts the certificate authorities in the PEM file at `path` (only those).
    pub fn ca_file(path: impl Into<PathBuf>) -> Self {
        Self {
            roots: Roots::CaFile(path.into()),
            client: None,
        }
    }

    /// Presents the certificate (chain) in `cert_file` with the private key in `key_file` (PEM,
    /// PKCS#8, PKCS#1 or SEC1): mutual TLS.
    pub fn client_cert(
        mut self,
        cert_file: impl Into<PathBuf>,
        key_file: impl Into<PathBuf>,
    ) -> Self {
        self.client = Some(ClientIdentity {
            cert_file: cert_file.into(),
            key_file: key_file.into(),
        });
        self
    }

    /// The CA file, `None` for the system roots.
    pub fn ca_path(&self) -> Option<&Path> {
        match &self.roots {
            Roots::System => None,
            Roots::CaFile(path) => Some(path),
        }
    }

    /// The client certificate and key files, for mutual TLS.
    pub fn client_paths(&self) -> Option<(&Path, &Path)> {
        self.client
            .as_ref()
            .map(|c| (c.cert_file.as_path(), c.key_file.as_path()))
    }

    /// Reads the files and checks them as a connection would (CA certificates rustls accepts, a
    /// key that goes with the certificate, system roots that exist), for configuration layers
    /// that check before they connect.
    pub fn check(&self) -> Result<()> {
        self.rustls_config().map(drop)
    }

    /// A rustls client configuration: the files are read (and checked) now, once.
    pub(crate) fn rustls_config(&self) -> Result<Arc<rustls::ClientConfig>> {
        let mut roots = rustls::RootCertStore::empty();
        match &self.roots {
            Roots::System => {
                let found = rustls_native_certs::load_native_certs();
                for cert in found.certs {
                    // A system store may hold certificates rustls cannot use; skip those.
                    let _ = roots.add(cert);
                }
                if roots.is_empty() {
                    return Err(Error::new(
                        ErrorKind::Config,
                        format!(
                            "tls: no usable system CA certificates found ({} errors); give a ca-file",
                            found.errors.len()
                        ),
                    ));
                }
            }
            Roots::CaFile(path) => {
                for cert in read_certs(path)? {
                    roots.add(cert).map_err(|err| {
                        Error::new(
                            ErrorKind::Config,
                            format!(
                                "tls.ca-file {}: not a usable CA certificate",
                                path.display()
                            ),
                        )
                        .with_source(err)
                    })?;
                }
            }
        }
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|err| {
                Error::new(ErrorKind::Config, "tls: no usable protocol versions").with_source(err)
            })?
            .with_root_certificates(roots);
        let config = match &self.client {
            None => builder.with_no_client_auth(),
            Some(identity) => {
                let chain = read_certs(&identity.cert_file)?;
                let key = read_key(&identity.key_file)?;
                builder.with_client_auth_cert(chain, key).map_err(|err| {
                    Error::new(
                        ErrorKind::Config,
                        format!(
                            "tls: the client certificate {} and key {} do not go together",
                            identity.cert_file.display(),
                            identity.key_file.display()
                        ),
                    )
                    .with_source(err)
                })?
            }
        };
        Ok(Arc::new(config))
    }
}

/// The private key in the PEM file at `path`.
pub fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_file(path).map_err(|err| {
        Error::new(
            ErrorKind::Config,
            format!(
                "tls.key-file {}: no PEM private key (PKCS#8, PKCS#1 or SEC1)",
                path.display()
            ),
        )
        .with_source(err)
    })
}

/// Every certificate in the PEM file at `path`; at least one.
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .and_then(|iter| iter.collect())
        .map_err(|err| {
            Error::new(
                ErrorKind::Config,
                format!("cannot read the PEM certificates in {}", path.display()),
            )
            .with_source(err)
        })?;
    if certs.is_empty() {
        return Err(Error::new(
            ErrorKind::Config,
            format!("{}: no PEM certificate found", path.display()),
        ));
    }
    Ok(certs)
}
