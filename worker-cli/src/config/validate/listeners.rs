//! The HTTP listeners' keys (`[telemetry]` for `telemetry.listen`, `[ui]` for `ui.listen`):
//! HTTPS files that exist, parse and belong together, `allowed-hosts` that are host names,
//! `trusted-proxies` that are address ranges, dashboard tokens too long to guess, and no
//! dashboard off loopback without one, nor over plain HTTP unless `ui.allow-plain-http`.

use std::path::Path;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

use super::{Invalid, bad};
use crate::config::model::{Config, MIN_UI_TOKEN_CHARS};
use crate::telemetry::TrustedProxies;

/// Checks both listeners' keys and the dashboard's token.
pub(super) fn check(config: &Config) -> Result<(), Invalid> {
    let telemetry = &config.telemetry;
    if telemetry.listen.is_none() {
        let set = [
            ("tls-cert-file", telemetry.tls_cert_file.is_some()),
            ("tls-key-file", telemetry.tls_key_file.is_some()),
            ("behind-tls-proxy", telemetry.behind_tls_proxy),
            ("allowed-hosts", !telemetry.allowed_hosts.is_empty()),
        ];
        if let Some((key, _)) = set.into_iter().find(|(_, set)| *set) {
            return Err(bad(
                &["telemetry", key],
                "applies to the listener of `telemetry.listen`, and none is set",
            ));
        }
    }
    check_tls(
        "telemetry",
        telemetry.tls_cert_file.as_deref(),
        telemetry.tls_key_file.as_deref(),
    )?;
    check_hosts("telemetry", &telemetry.allowed_hosts)?;
    let ui = &config.ui;
    check_tls(
        "ui",
        ui.tls_cert_file.as_deref(),
        ui.tls_key_file.as_deref(),
    )?;
    check_hosts("ui", &ui.allowed_hosts)?;
    TrustedProxies::parse(&ui.trusted_proxies)
        .map_err(|why| bad(&["ui", "trusted-proxies"], why))?;
    check_token(config)?;
    check_plain_http(config)
}

/// A dashboard off loopback is served over HTTPS (its own TLS files, or a TLS proxy in front that
/// `behind-tls-proxy` declares), or `ui.allow-plain-http` says plain HTTP is meant: otherwise its
/// token and session cookies cross the network in the clear.
fn check_plain_http(config: &Config) -> Result<(), Invalid> {
    let (ui, telemetry) = (&config.ui, &config.telemetry);
    if ui.allow_plain_http {
        return Ok(());
    }
    let https = |cert: &Option<std::path::PathBuf>, behind: bool| cert.is_some() || behind;
    let plain = [
        (!ui.listen.ip().is_loopback() && !https(&ui.tls_cert_file, ui.behind_tls_proxy))
            .then_some((["ui", "listen"], "ui", ui.listen)),
        telemetry
            .listen
            .filter(|addr| {
                telemetry.ui
                    && !addr.ip().is_loopback()
                    && !https(&telemetry.tls_cert_file, telemetry.behind_tls_proxy)
            })
            .map(|addr| (["telemetry", "ui"], "telemetry", addr)),
    ];
    match plain.into_iter().flatten().next() {
        Some((path, table, addr)) => Err(bad(&path, plain_http_refusal(table, addr))),
        None => Ok(()),
    }
}

/// Why the dashboard on `table`'s `listen` = `addr` does not start, and the two ways out.
fn plain_http_refusal(table: &str, addr: std::net::SocketAddr) -> String {
    format!(
        "the dashboard on `{table}.listen` = {addr} is not on loopback and would be served over plain HTTP, its token and session cookies in the clear: serve HTTPS (`{table}.tls-cert-file` and `{table}.tls-key-file`, or `{table}.behind-tls-proxy = true` with a TLS proxy in front), or set `ui.allow-plain-http = true` to serve plain HTTP anyway"
    )
}

/// A dashboard token is long enough to be unguessable (`ui.token`, or the text of
/// `ui.token-file` with its trailing line breaks dropped).
pub(crate) fn ui_token_strength(token: &str) -> Result<(), String> {
    if token.trim().is_empty() {
        return Err("expected a non-empty token".to_owned());
    }
    let chars = token.chars().count();
    if chars < MIN_UI_TOKEN_CHARS {
        return Err(format!(
            "expected at least {MIN_UI_TOKEN_CHARS} characters, found {chars}: a short token can be guessed (make one with `openssl rand -hex 32`)"
        ));
    }
    Ok(())
}

/// The token (if any) is strong, and a dashboard off loopback has one: anyone who reaches a
/// token-less dashboard reads every dead letter.
fn check_token(config: &Config) -> Result<(), Invalid> {
    let ui = &config.ui;
    match (&ui.token, &ui.token_file) {
        (Some(token), None) => {
            ui_token_strength(token.expose()).map_err(|why| bad(&["ui", "token"], why))?;
        }
        (None, Some(path)) => {
            let key = ["ui", "token-file"];
            let text = std::fs::read_to_string(path)
                .map_err(|err| bad(&key, format!("cannot read {}: {err}", path.display())))?;
            ui_token_strength(text.trim_end_matches(['\r', '\n']))
                .map_err(|why| bad(&key, format!("{}: {why}", path.display())))?;
        }
        // Both: refused by the caller; neither: below.
        _ => {}
    }
    if ui.token.is_some() || ui.token_file.is_some() {
        return Ok(());
    }
    let telemetry = &config.telemetry;
    let off_loopback = [
        (!ui.listen.ip().is_loopback()).then_some((["ui", "listen"], "ui.listen", ui.listen)),
        telemetry
            .listen
            .filter(|addr| telemetry.ui && !addr.ip().is_loopback())
            .map(|addr| (["telemetry", "ui"], "telemetry.listen", addr)),
    ];
    match off_loopback.into_iter().flatten().next() {
        Some((path, key, addr)) => Err(bad(
            &path,
            format!(
                "the dashboard on `{key}` = {addr} is not on loopback: set `ui.token` or `ui.token-file` (at least {MIN_UI_TOKEN_CHARS} characters), or listen on 127.0.0.1"
            ),
        )),
        None => Ok(()),
    }
}

/// `tls-cert-file` and `tls-key-file` of `table`: both or neither, a certificate chain and the
/// private key that goes with it.
fn check_tls(table: &str, cert: Option<&Path>, key: Option<&Path>) -> Result<(), Invalid> {
    let (cert, key) = match (cert, key) {
        (None, None) => return Ok(()),
        (Some(_), None) => {
            return Err(bad(
                &[table, "tls-cert-file"],
                "expected `tls-key-file` too: HTTPS needs the certificate's private key",
            ));
        }
        (None, Some(_)) => {
            return Err(bad(
                &[table, "tls-key-file"],
                "expected `tls-cert-file` too: HTTPS needs the key's certificate",
            ));
        }
        (Some(cert), Some(key)) => (cert, key),
    };
    let read = |name: &str, path: &Path| {
        std::fs::read(path).map_err(|err| {
            bad(
                &[table, name],
                format!("cannot read {}: {err}", path.display()),
            )
        })
    };
    let chain = CertificateDer::pem_slice_iter(&read("tls-cert-file", cert)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| {
            bad(
                &[table, "tls-cert-file"],
                format!("{}: bad PEM: {err}", cert.display()),
            )
        })?;
    if chain.is_empty() {
        return Err(bad(
            &[table, "tls-cert-file"],
            format!("{}: no PEM CERTIFICATE in it", cert.display()),
        ));
    }
    let private = PrivateKeyDer::from_pem_slice(&read("tls-key-file", key)?).map_err(|err| {
        bad(
            &[table, "tls-key-file"],
            format!(
                "{}: no PEM private key (PKCS#8, PKCS#1 or SEC1): {err}",
                key.display()
            ),
        )
    })?;
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    CertifiedKey::from_der(chain, private, &provider).map_err(|err| {
        bad(
            &[table, "tls-key-file"],
            format!(
                "{} does not fit the certificate of `tls-cert-file` {}: {err}",
                key.display(),
                cert.display()
            ),
        )
    })?;
    Ok(())
}

/// `allowed-hosts`: host names as a `Host` header carries them, without scheme, port or path.
fn check_hosts(table: &str, hosts: &[String]) -> Result<(), Invalid> {
    for host in hosts {
        let name = host.strip_suffix('.').unwrap_or(host);
        let valid = !name.is_empty()
            && name.len() <= 253
            && name.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && !label.starts_with('-')
                    && !label.ends_with('-')
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            });
        if !valid {
            return Err(bad(
                &[table, "allowed-hosts"],
                format!(
                    "expected host names like \"worker.example.com\" (no scheme, port or path; IP literals are always answered), found {host:?}"
                ),
            ));
        }
    }
    Ok(())
}
