//! `kafka.security-protocol`, `[kafka.tls]`, `[kafka.sasl]` and `[kafka.sasl.oauth]`: the tables
//! the protocol needs and no others, files that exist and parse, credentials complete and not
//! given twice. Messages name files, never what is in them.

use std::path::Path;

use super::{Invalid, bad};
use crate::config::model::{KafkaSection, OauthSection, SaslMechanism, SaslSection, TlsSection};

/// Checks the security keys of `[kafka]`.
pub(super) fn check(kafka: &KafkaSection) -> Result<(), Invalid> {
    let protocol = kafka.security_protocol;
    let (uses_tls, uses_sasl) = (protocol.uses_tls(), protocol.uses_sasl());
    match &kafka.tls {
        Some(_) if !uses_tls => {
            return Err(bad(
                &["kafka", "tls"],
                format!(
                    "[kafka.tls] applies to security-protocol \"ssl\" or \"sasl_ssl\" only, this file's is \"{protocol}\": remove the table or change the protocol"
                ),
            ));
        }
        Some(tls) => check_tls(tls)?,
        None => {}
    }
    match &kafka.sasl {
        Some(_) if !uses_sasl => Err(bad(
            &["kafka", "sasl"],
            format!(
                "[kafka.sasl] applies to security-protocol \"sasl_plaintext\" or \"sasl_ssl\" only, this file's is \"{protocol}\": remove the table or change the protocol"
            ),
        )),
        None if uses_sasl => Err(bad(
            &["kafka", "security-protocol"],
            format!("\"{protocol}\" needs a [kafka.sasl] table: the mechanism and its credentials"),
        )),
        Some(sasl) => check_sasl(sasl),
        None => Ok(()),
    }
}

fn check_tls(section: &TlsSection) -> Result<(), Invalid> {
    let key = |name: &str| ["kafka", "tls", name].map(str::to_owned).to_vec();
    if let Some(ca) = &section.ca_file {
        worker_core::security::read_certs(ca).map_err(|err| (key("ca-file"), err.to_string()))?;
    }
    let client = match (&section.cert_file, &section.key_file) {
        (None, None) => None,
        (Some(_), None) => {
            return Err((
                key("cert-file"),
                "expected `key-file` too: mutual TLS needs the certificate and its private key"
                    .to_owned(),
            ));
        }
        (None, Some(_)) => {
            return Err((
                key("key-file"),
                "expected `cert-file` too: mutual TLS needs the certificate and its private key"
                    .to_owned(),
            ));
        }
        (Some(cert), Some(private)) => {
            worker_core::security::read_certs(cert)
                .map_err(|err| (key("cert-file"), err.to_string()))?;
            worker_core::security::read_key(private)
                .map_err(|err| (key("key-file"), err.to_string()))?;
            Some((cert, private))
        }
    };
    // Everything together, as the connections will use it: CA certificates rustls accepts, a key
    // that goes with the certificate, system roots that exist.
    let mut config = match &section.ca_file {
        Some(ca) => worker_core::security::TlsConfig::ca_file(ca),
        None => worker_core::security::TlsConfig::system_roots(),
    };
    if let Some((cert, private)) = client {
        config = config.client_cert(cert, private);
    }
    let blame = match (&section.ca_file, client) {
        (_, Some(_)) => key("key-file"),
        (Some(_), None) => key("ca-file"),
        (None, None) => vec!["kafka".to_owned(), "tls".to_owned()],
    };
    config.check().map_err(|err| (blame, err.to_string()))
}

fn check_sasl(sasl: &SaslSection) -> Result<(), Invalid> {
    let mechanism = sasl.mechanism.as_str();
    match sasl.mechanism {
        SaslMechanism::Plain | SaslMechanism::ScramSha256 | SaslMechanism::ScramSha512 => {
            if sasl.oauth.is_some() {
                return Err(bad(
                    &["kafka", "sasl", "oauth"],
                    format!(
                        "[kafka.sasl.oauth] applies to mechanism = \"OAUTHBEARER\" only, this file's mechanism is \"{mechanism}\""
                    ),
                ));
            }
            match sasl.username.as_deref() {
                None => {
                    return Err(bad(
                        &["kafka", "sasl", "username"],
                        format!("missing required key `username` for mechanism = \"{mechanism}\""),
                    ));
                }
                Some(name) if name.trim().is_empty() => {
                    return Err(bad(
                        &["kafka", "sasl", "username"],
                        "expected a non-empty user name",
                    ));
                }
                Some(_) => {}
            }
            one_secret(
                &["kafka", "sasl"],
                ("password", sasl.password.as_ref().map(|p| p.expose())),
                ("password-file", sasl.password_file.as_deref()),
                &format!("for mechanism = \"{mechanism}\""),
            )
        }
        SaslMechanism::OAuthBearer => {
            for (key, given) in [
                ("username", sasl.username.is_some()),
                ("password", sasl.password.is_some()),
                ("password-file", sasl.password_file.is_some()),
            ] {
                if given {
                    return Err(bad(
                        &["kafka", "sasl", key],
                        "applies to mechanisms PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 only; OAUTHBEARER takes tokens from [kafka.sasl.oauth]",
                    ));
                }
            }
            match &sasl.oauth {
                None => Err(bad(
                    &["kafka", "sasl", "mechanism"],
                    "\"OAUTHBEARER\" needs a [kafka.sasl.oauth] table with `token`, `token-file` or `token-endpoint`",
                )),
                Some(oauth) => check_oauth(oauth),
            }
        }
    }
}

fn check_oauth(oauth: &OauthSection) -> Result<(), Invalid> {
    const SOURCES: &str = "`token`, `token-file` or `token-endpoint`";
    let given: Vec<&str> = [
        ("token", oauth.token.is_some()),
        ("token-file", oauth.token_file.is_some()),
        ("token-endpoint", oauth.token_endpoint.is_some()),
    ]
    .into_iter()
    .filter_map(|(key, given)| given.then_some(key))
    .collect();
    match given.as_slice() {
        [] => {
            return Err(bad(
                &["kafka", "sasl", "oauth"],
                format!("expected one of {SOURCES}"),
            ));
        }
        [first, second, ..] => {
            return Err(bad(
                &["kafka", "sasl", "oauth", second],
                format!("expected one of {SOURCES}, found `{first}` and `{second}`"),
            ));
        }
        [_] => {}
    }
    if let Some(token) = &oauth.token
        && token.expose().trim().is_empty()
    {
        return Err(bad(
            &["kafka", "sasl", "oauth", "token"],
            "expected a non-empty token",
        ));
    }
    if let Some(file) = &oauth.token_file {
        readable(file).map_err(|why| bad(&["kafka", "sasl", "oauth", "token-file"], why))?;
    }
    let Some(endpoint) = &oauth.token_endpoint else {
        for (key, given) in [
            ("client-id", oauth.client_id.is_some()),
            ("client-secret", oauth.client_secret.is_some()),
            ("client-secret-file", oauth.client_secret_file.is_some()),
            ("scope", oauth.scope.is_some()),
        ] {
            if given {
                return Err(bad(
                    &["kafka", "sasl", "oauth", key],
                    "applies with `token-endpoint` only (the OIDC client-credentials grant)",
                ));
            }
        }
        return Ok(());
    };
    let host = endpoint
        .strip_prefix("https://")
        .or_else(|| endpoint.strip_prefix("http://"));
    if host.is_none_or(|host| host.is_empty() || host.starts_with('/')) {
        return Err(bad(
            &["kafka", "sasl", "oauth", "token-endpoint"],
            format!(
                "expected an https:// (or http://) URL of an OIDC token endpoint, found {endpoint:?}"
            ),
        ));
    }
    match oauth.client_id.as_deref() {
        None => {
            return Err(bad(
                &["kafka", "sasl", "oauth", "client-id"],
                "missing required key `client-id` for `token-endpoint`",
            ));
        }
        Some(id) if id.trim().is_empty() => {
            return Err(bad(
                &["kafka", "sasl", "oauth", "client-id"],
                "expected a non-empty client id",
            ));
        }
        Some(_) => {}
    }
    one_secret(
        &["kafka", "sasl", "oauth"],
        (
            "client-secret",
            oauth.client_secret.as_ref().map(|s| s.expose()),
        ),
        ("client-secret-file", oauth.client_secret_file.as_deref()),
        "for `token-endpoint`",
    )
}

/// Exactly one of a secret given inline (`value`) and a file holding it (`file`), under `table`.
fn one_secret(
    table: &[&'static str],
    value: (&'static str, Option<&str>),
    file: (&'static str, Option<&Path>),
    needed_for: &str,
) -> Result<(), Invalid> {
    let at = |key: &'static str| {
        let mut path = table.to_vec();
        path.push(key);
        path
    };
    match (value.1, file.1) {
        (None, None) => Err(bad(
            &at(value.0),
            format!(
                "missing required key `{}` (or `{}`) {needed_for}",
                value.0, file.0
            ),
        )),
        (Some(_), Some(_)) => Err(bad(
            &at(file.0),
            format!("expected `{}` or `{}`, not both", value.0, file.0),
        )),
        (Some(""), None) => Err(bad(&at(value.0), "expected a non-empty secret")),
        (Some(_), None) => Ok(()),
        (None, Some(path)) => match std::fs::read_to_string(path) {
            Err(err) => Err(bad(
                &at(file.0),
                format!("cannot read {}: {err}", path.display()),
            )),
            Ok(text) if text.trim_end_matches(['\r', '\n']).is_empty() => {
                Err(bad(&at(file.0), format!("{} is empty", path.display())))
            }
            Ok(_) => Ok(()),
        },
    }
}

/// Whether the file at `path` can be read (a token file may be empty until a sidecar writes it).
fn readable(path: &Path) -> Result<(), String> {
    std::fs::File::open(path)
        .map(drop)
        .map_err(|err| format!("cannot read {}: {err}", path.display()))
}
