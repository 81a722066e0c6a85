//! The HTTP listeners' keys: HTTPS files, `behind-tls-proxy`, `allowed-hosts`, `trusted-proxies`,
//! plain HTTP off loopback only with `allow-plain-http`, the dashboard's
//! token length and its refusal off loopback without one; each error names file:line and key.
//!
//! `testdata/`: a certificate (`client.pem`) with its key (`client.key`), and a key that goes
//! with neither (`other.key`).

use std::path::PathBuf;

use super::{MINIMAL, assert_error, parse};
use crate::config::MIN_UI_TOKEN_CHARS;

fn testdata(name: &str) -> String {
    format!("{}/src/config/testdata/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// A token file in a scratch directory, removed at the end of the test.
struct TokenFile(PathBuf);

impl TokenFile {
    fn new(text: &str) -> Self {
        let path = std::env::temp_dir().join(format!("config-ui-token-{}", uuid::Uuid::new_v4()));
        std::fs::write(&path, text).expect("a token file");
        Self(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("a UTF-8 path")
    }
}

impl Drop for TokenFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn https_keys_and_allowed_hosts_are_read_for_both_listeners() {
    let (cert, key) = (testdata("client.pem"), testdata("client.key"));
    let text = format!(
        "{MINIMAL}[telemetry]\nlisten = \"127.0.0.1:9464\"\ntls-cert-file = \"{cert}\"\ntls-key-file = \"{key}\"\nallowed-hosts = [\"worker-7.example.com\", \"worker.\"]\n\
         [ui]\nbehind-tls-proxy = true\nallowed-hosts = [\"ops.example.com\"]\n"
    );
    let config = parse(&text).unwrap();
    let telemetry = &config.telemetry;
    assert_eq!(telemetry.tls_cert_file, Some(PathBuf::from(&cert)));
    assert_eq!(telemetry.tls_key_file, Some(PathBuf::from(&key)));
    assert!(!telemetry.behind_tls_proxy);
    assert_eq!(telemetry.allowed_hosts, ["worker-7.example.com", "worker."]);
    assert!(config.ui.behind_tls_proxy);
    assert_eq!(config.ui.allowed_hosts, ["ops.example.com"]);
    assert_eq!(parse(&config.to_toml()).unwrap(), config);
    // The defaults: plain HTTP, no proxy, no names beyond IP literals and localhost.
    let plain = parse(MINIMAL).unwrap();
    assert!(plain.ui.tls_cert_file.is_none() && !plain.ui.behind_tls_proxy);
    assert!(plain.ui.allowed_hosts.is_empty() && plain.telemetry.allowed_hosts.is_empty());
}

#[test]
fn broken_listener_keys_name_the_key_and_the_line() {
    let (cert, key, other) = (
        testdata("client.pem"),
        testdata("client.key"),
        testdata("other.key"),
    );
    // MINIMAL ends at line 10: a table appended starts on line 11, its first key on 12.
    let listen = "[telemetry]\nlisten = \"127.0.0.1:9464\"\n";
    let cases: Vec<(String, &str, usize, String)> = vec![
        (
            format!("{MINIMAL}{listen}tls-cert-file = \"{cert}\"\n"),
            "telemetry.tls-cert-file",
            13,
            "expected `tls-key-file` too".to_owned(),
        ),
        (
            format!("{MINIMAL}[ui]\ntls-key-file = \"{key}\"\n"),
            "ui.tls-key-file",
            12,
            "expected `tls-cert-file` too".to_owned(),
        ),
        (
            format!("{MINIMAL}[telemetry]\nbehind-tls-proxy = true\n"),
            "telemetry.behind-tls-proxy",
            12,
            "applies to the listener of `telemetry.listen`, and none is set".to_owned(),
        ),
        (
            format!(
                "{MINIMAL}[ui]\ntls-cert-file = \"/nonexistent/c.pem\"\ntls-key-file = \"{key}\"\n"
            ),
            "ui.tls-cert-file",
            12,
            "cannot read /nonexistent/c.pem".to_owned(),
        ),
        (
            format!("{MINIMAL}[ui]\ntls-cert-file = \"{key}\"\ntls-key-file = \"{key}\"\n"),
            "ui.tls-cert-file",
            12,
            format!("{key}: no PEM CERTIFICATE in it"),
        ),
        (
            format!("{MINIMAL}[ui]\ntls-cert-file = \"{cert}\"\ntls-key-file = \"{cert}\"\n"),
            "ui.tls-key-file",
            13,
            format!("{cert}: no PEM private key"),
        ),
        (
            format!("{MINIMAL}{listen}tls-cert-file = \"{cert}\"\ntls-key-file = \"{other}\"\n"),
            "telemetry.tls-key-file",
            14,
            format!("{other} does not fit the certificate of `tls-cert-file` {cert}"),
        ),
        (
            format!("{MINIMAL}{listen}allowed-hosts = [\"worker.example.com:9464\"]\n"),
            "telemetry.allowed-hosts",
            13,
            "no scheme, port or path".to_owned(),
        ),
        (
            format!("{MINIMAL}[ui]\nallowed-hosts = [\"https://ops.example.com\"]\n"),
            "ui.allowed-hosts",
            12,
            "found \"https://ops.example.com\"".to_owned(),
        ),
        (
            format!("{MINIMAL}[ui]\nallowed-hosts = [\"\"]\n"),
            "ui.allowed-hosts",
            12,
            "expected host names".to_owned(),
        ),
    ];
    for (text, key, line, says) in cases {
        let err = match parse(&text) {
            Ok(_) => panic!("expected an error for:\n{text}"),
            Err(err) => err,
        };
        assert_error(&err, key, line, &says);
    }
}

#[test]
fn a_dashboard_token_has_32_characters_at_least_in_the_file_or_in_its_file() {
    let long = "x".repeat(MIN_UI_TOKEN_CHARS);
    let short = "x".repeat(MIN_UI_TOKEN_CHARS - 1);
    assert!(parse(&format!("{MINIMAL}[ui]\ntoken = \"{long}\"\n")).is_ok());
    let err = parse(&format!("{MINIMAL}[ui]\ntoken = \"{short}\"\n")).unwrap_err();
    assert_error(
        &err,
        "ui.token",
        12,
        "expected at least 32 characters, found 31",
    );
    assert!(!err.to_string().contains(&short), "the token is not shown");

    // A file's trailing line break is no character of the token.
    let file = TokenFile::new(&format!("{short}\n"));
    let err = parse(&format!(
        "{MINIMAL}[ui]\ntoken-file = \"{}\"\n",
        file.path()
    ))
    .unwrap_err();
    assert_error(
        &err,
        "ui.token-file",
        12,
        &format!("{}: expected at least 32 characters, found 31", file.path()),
    );
    let file = TokenFile::new(&format!("{long}\n"));
    let config = parse(&format!(
        "{MINIMAL}[ui]\ntoken-file = \"{}\"\n",
        file.path()
    ))
    .unwrap();
    assert_eq!(
        config.ui_token().unwrap().map(|t| t.expose().len()),
        Some(MIN_UI_TOKEN_CHARS)
    );
    // A file shortened after the load is refused when the dashboard reads it.
    std::fs::write(&file.0, "short\n").expect("rewriting the token file");
    let err = config.ui_token().unwrap_err().to_string();
    assert!(
        err.contains("`ui.token-file`") && err.contains("expected at least 32 characters"),
        "{err}"
    );
    let missing = "/nonexistent/ui-token";
    let err = parse(&format!("{MINIMAL}[ui]\ntoken-file = \"{missing}\"\n")).unwrap_err();
    assert_error(
        &err,
        "ui.token-file",
        12,
        "cannot read /nonexistent/ui-token",
    );
}

#[test]
fn a_dashboard_off_loopback_needs_a_token_and_one_on_loopback_does_not() {
    let token = "t".repeat(MIN_UI_TOKEN_CHARS);
    for ok in [
        String::new(),
        "[ui]\nlisten = \"127.0.0.1:9400\"\n".to_owned(),
        "[ui]\nlisten = \"[::1]:9400\"\nallow-actions = true\n".to_owned(),
        format!("[ui]\nlisten = \"0.0.0.0:9400\"\ntoken = \"{token}\"\nallow-plain-http = true\n"),
        // A telemetry listener off loopback without the dashboard needs no token.
        "[telemetry]\nlisten = \"0.0.0.0:9464\"\n".to_owned(),
        format!(
            "[telemetry]\nlisten = \"0.0.0.0:9464\"\nui = true\nbehind-tls-proxy = true\n[ui]\ntoken = \"{token}\"\n"
        ),
    ] {
        if let Err(err) = parse(&format!("{MINIMAL}{ok}")) {
            panic!("refused:\n{ok}\n{err}");
        }
    }
    let err = parse(&format!(
        "{MINIMAL}[telemetry]\nlisten = \"[::]:9464\"\nui = true\n"
    ))
    .unwrap_err();
    assert_error(
        &err,
        "telemetry.ui",
        13,
        "the dashboard on `telemetry.listen` = [::]:9464 is not on loopback: set `ui.token` or `ui.token-file` (at least 32 characters)",
    );
}

#[test]
fn a_dashboard_off_loopback_needs_https_or_allow_plain_http_and_one_on_loopback_does_not() {
    let token = "t".repeat(MIN_UI_TOKEN_CHARS);
    let (cert, key) = (testdata("client.pem"), testdata("client.key"));
    for ok in [
        // Loopback: plain HTTP is fine.
        format!("[ui]\nlisten = \"127.0.0.1:9400\"\ntoken = \"{token}\"\n"),
        "[telemetry]\nlisten = \"[::1]:9464\"\nui = true\n".to_owned(),
        // Its own TLS, a TLS proxy in front, or plain HTTP said out loud.
        format!(
            "[ui]\nlisten = \"0.0.0.0:9400\"\ntoken = \"{token}\"\ntls-cert-file = \"{cert}\"\ntls-key-file = \"{key}\"\n"
        ),
        format!("[ui]\nlisten = \"0.0.0.0:9400\"\ntoken = \"{token}\"\nbehind-tls-proxy = true\n"),
        format!("[ui]\nlisten = \"0.0.0.0:9400\"\ntoken = \"{token}\"\nallow-plain-http = true\n"),
        format!(
            "[telemetry]\nlisten = \"0.0.0.0:9464\"\nui = true\ntls-cert-file = \"{cert}\"\ntls-key-file = \"{key}\"\n[ui]\ntoken = \"{token}\"\n"
        ),
        format!(
            "[telemetry]\nlisten = \"0.0.0.0:9464\"\nui = true\n[ui]\ntoken = \"{token}\"\nallow-plain-http = true\n"
        ),
        // Probes and metrics alone may be plain HTTP anywhere.
        "[telemetry]\nlisten = \"0.0.0.0:9464\"\n".to_owned(),
    ] {
        if let Err(err) = parse(&format!("{MINIMAL}{ok}")) {
            panic!("refused:\n{ok}\n{err}");
        }
    }
    let err = parse(&format!(
        "{MINIMAL}[ui]\nlisten = \"0.0.0.0:9400\"\ntoken = \"{token}\"\n"
    ))
    .unwrap_err();
    assert_error(
        &err,
        "ui.listen",
        12,
        "the dashboard on `ui.listen` = 0.0.0.0:9400 is not on loopback and would be served over plain HTTP",
    );
    for way_out in [
        "`ui.tls-cert-file` and `ui.tls-key-file`",
        "`ui.behind-tls-proxy = true`",
        "set `ui.allow-plain-http = true`",
    ] {
        assert!(err.to_string().contains(way_out), "{way_out}: {err}");
    }
    // The worker's /ui: its listener's TLS keys, and the same flag.
    let err = parse(&format!(
        "{MINIMAL}[telemetry]\nlisten = \"[::]:9464\"\nui = true\n[ui]\ntoken = \"{token}\"\n"
    ))
    .unwrap_err();
    assert_error(
        &err,
        "telemetry.ui",
        13,
        "the dashboard on `telemetry.listen` = [::]:9464 is not on loopback and would be served over plain HTTP",
    );
    for way_out in [
        "`telemetry.tls-cert-file` and `telemetry.tls-key-file`",
        "`telemetry.behind-tls-proxy = true`",
        "set `ui.allow-plain-http = true`",
    ] {
        assert!(err.to_string().contains(way_out), "{way_out}: {err}");
    }
}

#[test]
fn trusted_proxies_are_address_ranges_and_a_bad_one_names_the_file_the_key_and_the_value() {
    let config = parse(&format!(
        "{MINIMAL}[ui]\ntrusted-proxies = [\"10.0.0.0/8\", \"::1/128\"]\n"
    ))
    .unwrap();
    assert_eq!(config.ui.trusted_proxies, ["10.0.0.0/8", "::1/128"]);
    assert_eq!(parse(&config.to_toml()).unwrap(), config);
    assert!(parse(MINIMAL).unwrap().ui.trusted_proxies.is_empty());
    for (bad, says) in [
        (
            "10.0.0.0/33",
            "found \"10.0.0.0/33\": the prefix length must be 0 to 32",
        ),
        (
            "10.0.0.7",
            "expected address ranges like \"10.0.0.0/8\" or \"::1/128\"",
        ),
        ("proxy.internal/32", "found \"proxy.internal/32\""),
        ("10.1.0.0/8", "write the range's first address, 10.0.0.0/8"),
    ] {
        let text = format!(
            "{MINIMAL}[ui]\nallow-actions = false\ntrusted-proxies = [\"::1/128\", \"{bad}\"]\n"
        );
        let err = parse(&text).unwrap_err();
        assert_error(&err, "ui.trusted-proxies", 13, says);
    }
}
