//! `kafka.security-protocol`, `[kafka.tls]`, `[kafka.sasl]`, `[kafka.sasl.oauth]`: parsed, checked
//! with file:line and key, overridden from the environment, and printed without secrets.
//!
//! `testdata/`: a CA (`ca.pem`), a client certificate it signed (`client.pem`) with its key
//! (`client.key`), and a key that goes with neither (`other.key`); P-256, valid for 100 years.

use std::path::{Path, PathBuf};

use super::{REFERENCE, assert_error, parse};
use crate::config::{Config, SaslMechanism};
use worker_core::security::Protocol;

fn testdata(name: &str) -> String {
    format!("{}/src/config/testdata/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// A scratch directory for secret files, removed at the end of the test.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!("config-security-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        Self(dir)
    }

    fn write(&self, name: &str, text: &str) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, text).expect("a scratch file");
        path.to_str().expect("a UTF-8 path").to_owned()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A file with `security-protocol = protocol` and `tables` (TOML tables under `[kafka]`).
fn file(protocol: &str, tables: &str) -> String {
    format!(
        "\n[kafka]\nbootstrap = \"127.0.0.1:9094\"\nsecurity-protocol = \"{protocol}\"\n\n{tables}\n\n[worker]\ngroup = \"g\"\n\n[[route]]\ntopic = \"t\"\nhandler = \"noop\"\n"
    )
}

/// The 1-based line of the first line of `text` that contains `needle`.
fn line_of(text: &str, needle: &str) -> usize {
    match text.lines().position(|line| line.contains(needle)) {
        Some(index) => index + 1,
        None => panic!("no line with {needle:?} in:\n{text}"),
    }
}

fn tls_table() -> String {
    format!(
        "[kafka.tls]\nca-file = \"{}\"\ncert-file = \"{}\"\nkey-file = \"{}\"\n",
        testdata("ca.pem"),
        testdata("client.pem"),
        testdata("client.key")
    )
}

#[test]
fn every_key_is_parsed_and_makes_the_setting() {
    let scratch = Scratch::new();
    let password_file = scratch.write("password", "file-secret\n");
    let text = file(
        "sasl_ssl",
        &format!(
            "{}\n[kafka.sasl]\nmechanism = \"SCRAM-SHA-512\"\nusername = \"worker\"\npassword-file = \"{password_file}\"\n",
            tls_table()
        ),
    );
    let config = parse(&text).unwrap();
    let kafka = &config.kafka;
    assert_eq!(kafka.security_protocol, Protocol::SaslSsl);
    let tls = kafka.tls.as_ref().unwrap();
    assert_eq!(tls.ca_file.as_deref(), Some(Path::new(&testdata("ca.pem"))));
    let sasl = kafka.sasl.as_ref().unwrap();
    assert_eq!(sasl.mechanism, SaslMechanism::ScramSha512);
    assert_eq!(sasl.username.as_deref(), Some("worker"));
    assert_eq!(sasl.password, None);
    let security = config.security().unwrap();
    assert_eq!(security.protocol(), Protocol::SaslSsl);
    let tls = security.tls().unwrap();
    assert_eq!(tls.ca_path(), Some(Path::new(&testdata("ca.pem"))));
    assert_eq!(
        tls.client_paths(),
        Some((
            Path::new(&testdata("client.pem")),
            Path::new(&testdata("client.key"))
        ))
    );
    let sasl = security.sasl().unwrap();
    assert_eq!(sasl.mechanism_name(), "SCRAM-SHA-512");
    assert_eq!(sasl.username(), Some("worker"));
    assert_eq!(
        sasl.password().map(|p| p.expose()),
        Some("file-secret"),
        "the password file is read, its newline dropped"
    );
    // The same setting for the source and the dead-letter sink.
    let source = config.source_builder().unwrap();
    assert_eq!(source.config().security.protocol(), Protocol::SaslSsl);

    for (mechanism, name) in [
        ("PLAIN", "PLAIN"),
        ("SCRAM-SHA-256", "SCRAM-SHA-256"),
        ("SCRAM-SHA-512", "SCRAM-SHA-512"),
    ] {
        let text = file(
            "sasl_plaintext",
            &format!(
                "[kafka.sasl]\nmechanism = \"{mechanism}\"\nusername = \"u\"\npassword = \"p\"\n"
            ),
        );
        let security = parse(&text).unwrap().security().unwrap();
        assert_eq!(security.protocol(), Protocol::SaslPlaintext);
        assert!(security.tls().is_none());
        let sasl = security.sasl().unwrap();
        assert_eq!(sasl.mechanism_name(), name);
        assert_eq!(sasl.password().map(|p| p.expose()), Some("p"));
    }

    // Mutual TLS alone; TLS with the system roots needs no table.
    let text = file("ssl", &tls_table());
    let security = parse(&text).unwrap().security().unwrap();
    assert_eq!(security.protocol(), Protocol::Ssl);
    assert!(security.sasl().is_none());
    let security = parse(&file("ssl", "")).unwrap().security().unwrap();
    assert_eq!(security.tls().and_then(|t| t.ca_path()), None);
    let plain = parse(&file("plaintext", "")).unwrap();
    assert_eq!(plain.security().unwrap().protocol(), Protocol::Plaintext);
    assert_eq!(
        super::parse(super::MINIMAL)
            .unwrap()
            .kafka
            .security_protocol,
        Protocol::Plaintext,
        "plaintext by default"
    );
}

#[test]
fn oauthbearer_takes_one_token_source() {
    let scratch = Scratch::new();
    let token_file = scratch.write("token", "eyJhbGciOiJub25lIn0.e30.\n");
    let secret_file = scratch.write("client-secret", "cs\n");
    for oauth in [
        "token = \"eyJhbGciOiJub25lIn0.e30.\"".to_owned(),
        format!("token-file = \"{token_file}\""),
        "token-endpoint = \"https://idp.example.com/token\"\nclient-id = \"worker\"\nclient-secret = \"cs\"\nscope = \"kafka\"".to_owned(),
        format!(
            "token-endpoint = \"http://127.0.0.1:8080/token\"\nclient-id = \"worker\"\nclient-secret-file = \"{secret_file}\""
        ),
    ] {
        let text = file(
            "sasl_ssl",
            &format!("[kafka.sasl]\nmechanism = \"OAUTHBEARER\"\n\n[kafka.sasl.oauth]\n{oauth}\n"),
        );
        let config = match parse(&text) {
            Ok(config) => config,
            Err(err) => panic!("{err}\n{text}"),
        };
        let security = config.security().unwrap();
        let sasl = security.sasl().unwrap();
        assert_eq!(sasl.mechanism_name(), "OAUTHBEARER");
        assert_eq!(sasl.username(), None);
    }
}

#[test]
fn broken_security_settings_name_the_key_and_the_line() {
    let scratch = Scratch::new();
    let empty = scratch.write("empty", "\n");
    let not_pem = scratch.write("not-pem", "hello\n");
    let missing = scratch.0.join("missing").to_str().unwrap().to_owned();
    let plain = |body: &str| {
        file(
            "sasl_ssl",
            &format!("[kafka.sasl]\nmechanism = \"PLAIN\"\n{body}\n"),
        )
    };
    let oauth = |body: &str| {
        file(
            "sasl_ssl",
            &format!("[kafka.sasl]\nmechanism = \"OAUTHBEARER\"\n\n[kafka.sasl.oauth]\n{body}\n"),
        )
    };
    let tls = |body: &str| file("ssl", &format!("[kafka.tls]\n{body}\n"));
    // (text, key, the text of the line the error points at, what it says)
    let cases: Vec<(String, &str, &str, &str)> = vec![
        (
            file("tls", ""),
            "kafka.security-protocol",
            "security-protocol",
            "unknown value \"tls\"; expected one of: plaintext, ssl, sasl_plaintext, sasl_ssl",
        ),
        (
            file(
                "plaintext",
                "[kafka.sasl]\nmechanism = \"PLAIN\"\nusername = \"u\"\npassword = \"p\"",
            ),
            "kafka.sasl",
            "[kafka.sasl]",
            "[kafka.sasl] applies to security-protocol \"sasl_plaintext\" or \"sasl_ssl\" only, this file's is \"plaintext\"",
        ),
        (
            file("sasl_plaintext", &tls_table()),
            "kafka.tls",
            "[kafka.tls]",
            "[kafka.tls] applies to security-protocol \"ssl\" or \"sasl_ssl\" only",
        ),
        (
            file("sasl_ssl", ""),
            "kafka.security-protocol",
            "security-protocol",
            "\"sasl_ssl\" needs a [kafka.sasl] table",
        ),
        (
            file(
                "sasl_ssl",
                "[kafka.sasl]\nmechanism = \"GSSAPI\"\nusername = \"u\"\npassword = \"p\"",
            ),
            "kafka.sasl.mechanism",
            "mechanism",
            "unknown value \"GSSAPI\"; expected one of: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER",
        ),
        (
            file(
                "sasl_ssl",
                "[kafka.sasl]\nusername = \"u\"\npassword = \"p\"",
            ),
            "kafka.sasl.mechanism",
            "[kafka.sasl]",
            "missing required key `mechanism`",
        ),
        (
            plain("username = \"u\"\npasswd = \"p\""),
            "kafka.sasl.passwd",
            "passwd",
            "unknown key; expected one of: mechanism, username, password, password-file, oauth",
        ),
        (
            plain("password = \"p\""),
            "kafka.sasl.username",
            "[kafka.sasl]",
            "missing required key `username` for mechanism = \"PLAIN\"",
        ),
        (
            plain("username = \"u\""),
            "kafka.sasl.password",
            "[kafka.sasl]",
            "missing required key `password` (or `password-file`) for mechanism = \"PLAIN\"",
        ),
        (
            plain(&format!(
                "username = \"u\"\npassword = \"p\"\npassword-file = \"{empty}\""
            )),
            "kafka.sasl.password-file",
            "password-file",
            "expected `password` or `password-file`, not both",
        ),
        (
            plain(&format!("username = \"u\"\npassword-file = \"{missing}\"")),
            "kafka.sasl.password-file",
            "password-file",
            "cannot read",
        ),
        (
            plain(&format!("username = \"u\"\npassword-file = \"{empty}\"")),
            "kafka.sasl.password-file",
            "password-file",
            "is empty",
        ),
        (
            plain("username = \"u\"\npassword = \"p\"\n\n[kafka.sasl.oauth]\ntoken = \"t\""),
            "kafka.sasl.oauth",
            "[kafka.sasl.oauth]",
            "applies to mechanism = \"OAUTHBEARER\" only, this file's mechanism is \"PLAIN\"",
        ),
        (
            file("sasl_ssl", "[kafka.sasl]\nmechanism = \"OAUTHBEARER\""),
            "kafka.sasl.mechanism",
            "mechanism",
            "\"OAUTHBEARER\" needs a [kafka.sasl.oauth] table",
        ),
        (
            file(
                "sasl_ssl",
                "[kafka.sasl]\nmechanism = \"OAUTHBEARER\"\nusername = \"u\"\n\n[kafka.sasl.oauth]\ntoken = \"t\"",
            ),
            "kafka.sasl.username",
            "username",
            "applies to mechanisms PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 only",
        ),
        (
            oauth(""),
            "kafka.sasl.oauth",
            "[kafka.sasl.oauth]",
            "expected one of `token`, `token-file` or `token-endpoint`",
        ),
        (
            oauth(&format!("token = \"t\"\ntoken-file = \"{empty}\"")),
            "kafka.sasl.oauth.token-file",
            "token-file",
            "found `token` and `token-file`",
        ),
        (
            oauth(&format!("token-file = \"{missing}\"")),
            "kafka.sasl.oauth.token-file",
            "token-file",
            "cannot read",
        ),
        (
            oauth("token = \"t\"\nscope = \"kafka\""),
            "kafka.sasl.oauth.scope",
            "scope",
            "applies with `token-endpoint` only",
        ),
        (
            oauth(
                "token-endpoint = \"idp.example.com/token\"\nclient-id = \"c\"\nclient-secret = \"s\"",
            ),
            "kafka.sasl.oauth.token-endpoint",
            "token-endpoint",
            "expected an https:// (or http://) URL",
        ),
        (
            oauth("token-endpoint = \"https://idp.example.com/token\"\nclient-secret = \"s\""),
            "kafka.sasl.oauth.client-id",
            "[kafka.sasl.oauth]",
            "missing required key `client-id` for `token-endpoint`",
        ),
        (
            oauth("token-endpoint = \"https://idp.example.com/token\"\nclient-id = \"c\""),
            "kafka.sasl.oauth.client-secret",
            "[kafka.sasl.oauth]",
            "missing required key `client-secret` (or `client-secret-file`)",
        ),
        (
            oauth(&format!(
                "token-endpoint = \"https://idp.example.com/token\"\nclient-id = \"c\"\nclient-secret = \"s\"\nclient-secret-file = \"{empty}\""
            )),
            "kafka.sasl.oauth.client-secret-file",
            "client-secret-file",
            "not both",
        ),
        (
            tls(&format!("ca-file = \"{missing}\"")),
            "kafka.tls.ca-file",
            "ca-file",
            "cannot read the PEM certificates in",
        ),
        (
            tls(&format!("ca-file = \"{not_pem}\"")),
            "kafka.tls.ca-file",
            "ca-file",
            "no PEM certificate found",
        ),
        (
            tls(&format!("cert-file = \"{}\"", testdata("client.pem"))),
            "kafka.tls.cert-file",
            "cert-file",
            "expected `key-file` too",
        ),
        (
            tls(&format!("key-file = \"{}\"", testdata("client.key"))),
            "kafka.tls.key-file",
            "key-file",
            "expected `cert-file` too",
        ),
        (
            tls(&format!(
                "cert-file = \"{}\"\nkey-file = \"{}\"",
                testdata("client.pem"),
                testdata("ca.pem")
            )),
            "kafka.tls.key-file",
            "key-file",
            "no PEM private key",
        ),
        (
            tls(&format!(
                "ca-file = \"{}\"\ncert-file = \"{}\"\nkey-file = \"{}\"",
                testdata("ca.pem"),
                testdata("client.pem"),
                testdata("other.key")
            )),
            "kafka.tls.key-file",
            "key-file",
            "do not go together",
        ),
        (
            tls("ca = \"x\""),
            "kafka.tls.ca",
            "ca = ",
            "unknown key; expected one of: ca-file, cert-file, key-file",
        ),
    ];
    for (text, key, at, says) in cases {
        let err = match parse(&text) {
            Ok(_) => panic!("expected an error for:\n{text}"),
            Err(err) => err,
        };
        assert_error(&err, key, line_of(&text, at), says);
    }
}

#[test]
fn the_password_comes_from_the_environment_as_text() {
    let text = file(
        "sasl_ssl",
        "[kafka.sasl]\nmechanism = \"SCRAM-SHA-256\"\nusername = \"worker\"",
    );
    let env = [("SHARE_WORKER__KAFKA__SASL__PASSWORD", "0123")]
        .map(|(k, v)| (k.to_owned(), v.to_owned()));
    let config = Config::from_toml(&text, None, env).unwrap();
    let sasl = config.kafka.sasl.as_ref().unwrap();
    assert_eq!(
        sasl.password.as_ref().map(|p| p.expose()),
        Some("0123"),
        "not the number 123"
    );
    let security = config.security().unwrap();
    assert_eq!(
        security
            .sasl()
            .and_then(|s| s.password())
            .map(|p| p.expose()),
        Some("0123")
    );
    // The protocol too; a bad one names the variable.
    let env = [
        ("SHARE_WORKER__KAFKA__SECURITY_PROTOCOL", "sasl_plaintext"),
        ("SHARE_WORKER__KAFKA__SASL__PASSWORD", "p"),
    ]
    .map(|(k, v)| (k.to_owned(), v.to_owned()));
    let config = Config::from_toml(&text, None, env).unwrap();
    assert_eq!(config.kafka.security_protocol, Protocol::SaslPlaintext);
    let env = [("SHARE_WORKER__KAFKA__SECURITY_PROTOCOL", "tls")]
        .map(|(k, v)| (k.to_owned(), v.to_owned()));
    let err = Config::from_toml(&text, None, env).unwrap_err();
    assert!(
        err.to_string().starts_with(
            "environment variable SHARE_WORKER__KAFKA__SECURITY_PROTOCOL: `kafka.security-protocol`"
        ),
        "{err}"
    );
}

/// What `check` prints (the effective configuration) and `Debug` show no secret; the values stay.
#[test]
fn secrets_print_as_stars_and_stay_in_the_config() {
    let files = [
        (
            file(
                "sasl_ssl",
                "[kafka.sasl]\nmechanism = \"PLAIN\"\nusername = \"worker\"\npassword = \"pw-hunter2\"",
            ),
            "pw-hunter2",
        ),
        (
            file(
                "sasl_ssl",
                "[kafka.sasl]\nmechanism = \"OAUTHBEARER\"\n\n[kafka.sasl.oauth]\ntoken = \"tk-hunter2\"",
            ),
            "tk-hunter2",
        ),
        (
            file(
                "sasl_ssl",
                "[kafka.sasl]\nmechanism = \"OAUTHBEARER\"\n\n[kafka.sasl.oauth]\ntoken-endpoint = \"https://idp/t\"\nclient-id = \"c\"\nclient-secret = \"cs-hunter2\"",
            ),
            "cs-hunter2",
        ),
    ];
    for (text, secret) in files {
        let config = parse(&text).unwrap();
        let printed = config.to_toml();
        assert!(!printed.contains(secret), "{printed}");
        assert!(printed.contains("= \"***\""), "{printed}");
        let debug = format!("{config:?} {:?}", config.security().unwrap());
        assert!(!debug.contains(secret), "{debug}");
        assert!(
            config.kafka.sasl.as_ref().is_some_and(|s| {
                let oauth = s.oauth.as_ref();
                [
                    s.password.as_ref(),
                    oauth.and_then(|o| o.token.as_ref()),
                    oauth.and_then(|o| o.client_secret.as_ref()),
                ]
                .into_iter()
                .flatten()
                .any(|v| v.expose() == secret)
            }),
            "the value itself is kept"
        );
    }
}

/// The security keys are commented out in reference.toml (their tables need files and exclude
/// each other), but every one is documented there: each printed key appears as `key = ` or
/// `# key = `, each table as `# [table]`.
#[test]
fn the_reference_file_documents_every_security_key() {
    let scratch = Scratch::new();
    let secret = scratch.write("secret", "s\n");
    let texts = [
        file(
            "sasl_ssl",
            &format!(
                "{}\n[kafka.sasl]\nmechanism = \"PLAIN\"\nusername = \"u\"\npassword-file = \"{secret}\"",
                tls_table()
            ),
        ),
        file(
            "sasl_ssl",
            "[kafka.sasl]\nmechanism = \"PLAIN\"\nusername = \"u\"\npassword = \"p\"",
        ),
        file(
            "sasl_ssl",
            "[kafka.sasl]\nmechanism = \"OAUTHBEARER\"\n\n[kafka.sasl.oauth]\ntoken = \"t\"",
        ),
        file(
            "sasl_ssl",
            &format!(
                "[kafka.sasl]\nmechanism = \"OAUTHBEARER\"\n\n[kafka.sasl.oauth]\ntoken-file = \"{secret}\""
            ),
        ),
        file(
            "sasl_ssl",
            &format!(
                "[kafka.sasl]\nmechanism = \"OAUTHBEARER\"\n\n[kafka.sasl.oauth]\ntoken-endpoint = \"https://idp/t\"\nclient-id = \"c\"\nclient-secret-file = \"{secret}\"\nscope = \"s\""
            ),
        ),
        file(
            "sasl_ssl",
            "[kafka.sasl]\nmechanism = \"OAUTHBEARER\"\n\n[kafka.sasl.oauth]\ntoken-endpoint = \"https://idp/t\"\nclient-id = \"c\"\nclient-secret = \"x\"",
        ),
    ];
    for text in texts {
        let printed = parse(&text).unwrap().to_toml();
        for line in printed.lines() {
            if let Some((key, _)) = line.split_once(" = ") {
                assert!(
                    REFERENCE.contains(&format!("\n{key} = "))
                        || REFERENCE.contains(&format!("\n# {key} = ")),
                    "reference.toml does not document `{key}`"
                );
            } else if line.starts_with('[') && !line.starts_with("[[") {
                assert!(
                    REFERENCE.contains(&format!("\n{line}\n"))
                        || REFERENCE.contains(&format!("\n# {line}\n")),
                    "reference.toml does not document the table {line}"
                );
            }
        }
    }
    for mechanism in ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"] {
        assert!(REFERENCE.contains(mechanism), "{mechanism}");
    }
}
