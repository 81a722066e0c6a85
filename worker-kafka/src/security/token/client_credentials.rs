//! The OIDC client-credentials grant (RFC 6749 §4.4): one POST to the token endpoint with the
//! client's id and secret in HTTP basic auth, a bearer token back.
//!
//! Blocking on purpose: the grant runs on librdkafka's threads and, for the native client, in
//! `spawn_blocking`, so one client serves both.

use std::io::Read as _;
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::blocking::Client;
use reqwest::header::{ACCEPT, CONTENT_TYPE};

use super::OidcClientCredentials;
use crate::security::untrusted::quote;
use crate::{Error, ErrorKind, Result};

/// The longest a token endpoint may take to answer.
const TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer read: tokens are a few kilobytes.
const MAX_BODY: u64 = 1 << 20;
/// How much of the endpoint's `error` and `error_description` an error message repeats.
const QUOTE_MAX: usize = 200;
/// Lifetimes past this (ten years) are read as this.
const MAX_EXPIRES_IN: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// A token as the endpoint issued it.
#[derive(Debug)]
pub(super) struct Issued {
    pub(super) access_token: String,
    /// `expires_in`, if the endpoint said.
    pub(super) expires_in: Option<Duration>,
}

/// The HTTP client for token endpoints: https with rustls, no redirects (a redirected POST would
/// carry the client's credentials somewhere else).
pub(super) fn client() -> Result<Client> {
    Client::builder()
        .timeout(TIMEOUT)
        .connect_timeout(CONNECT_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|err| {
            Error::new(
                ErrorKind::Config,
                "cannot build the HTTP client for the OAUTHBEARER token endpoint",
            )
            .with_source(err.without_url())
        })
}

/// Runs the grant once. Errors name the endpoint, the HTTP status and the endpoint's `error` and
/// `error_description`, never the secret.
pub(super) fn request(client: &Client, grant: &OidcClientCredentials) -> Result<Issued> {
    let endpoint = display_endpoint(&grant.token_endpoint);
    let mut form = form_urlencoded::Serializer::new(String::new());
    form.append_pair("grant_type", "client_credentials");
    if let Some(scope) = &grant.scope {
        form.append_pair("scope", scope);
    }
    // RFC 6749 §2.3.1: the id and secret are form-urlencoded before they go in basic auth.
    let encode = |text: &str| form_urlencoded::byte_serialize(text.as_bytes()).collect::<String>();
    let response = client
        .post(&grant.token_endpoint)
        .basic_auth(
            encode(&grant.client_id),
            Some(encode(grant.client_secret.expose())),
        )
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(ACCEPT, "application/json")
        .body(form.finish())
        .send()
        .map_err(|err| {
            Error::new(
                ErrorKind::Io,
                format!("the OAUTHBEARER token endpoint {endpoint} cannot be reached"),
            )
            .with_source(err.without_url())
        })?;
    let status = response.status();
    let mut body = Vec::new();
    response
        .take(MAX_BODY)
        .read_to_end(&mut body)
        .map_err(|err| {
            Error::new(
                ErrorKind::Io,
                format!("reading the answer of the OAUTHBEARER token endpoint {endpoint}"),
            )
            .with_source(err)
        })?;
    let json = serde_json::from_slice::<serde_json::Value>(&body).ok();
    if !status.is_success() {
        return Err(refused(&endpoint, status, json.as_ref(), grant));
    }
    issued(json).map_err(|why| {
        Error::new(
            ErrorKind::Authentication,
            format!("the OAUTHBEARER token endpoint {endpoint} answered {status} but {why}"),
        )
    })
}

/// The error for a non-2xx answer.
fn refused(
    endpoint: &str,
    status: StatusCode,
    json: Option<&serde_json::Value>,
    grant: &OidcClientCredentials,
) -> Error {
    let secret = grant.client_secret.expose();
    let field = |name| {
        json.and_then(|json| json.get(name))
            .and_then(serde_json::Value::as_str)
            .map(|text| {
                // An endpoint that echoes what it was sent must not get the secret into a log.
                let text = if secret.is_empty() {
                    text.to_owned()
                } else {
                    text.replace(secret, "***")
                };
                quote(&text, QUOTE_MAX)
            })
    };
    let mut message = format!(
        "the OAUTHBEARER token endpoint {endpoint} refused the client credentials grant with {status}"
    );
    if let Some(error) = field("error") {
        message.push_str(&format!(": {error}"));
    }
    if let Some(description) = field("error_description") {
        message.push_str(&format!(" ({description})"));
    }
    Error::new(ErrorKind::Authentication, message)
}

/// The token in a 2xx answer (RFC 6749 §5.1), or what is wrong with the answer.
fn issued(json: Option<serde_json::Value>) -> std::result::Result<Issued, &'static str> {
    let Some(serde_json::Value::Object(fields)) = json else {
        return Err("its answer is not a JSON object");
    };
    let access_token = fields
        .get("access_token")
        .and_then(serde_json::Value::as_str)
        .filter(|token| !token.is_empty())
        .ok_or("its answer has no access_token")?;
    match fields.get("token_type").and_then(serde_json::Value::as_str) {
        Some(kind) if !kind.eq_ignore_ascii_case("bearer") => {
            return Err("the token it issued is not a bearer token (token_type)");
        }
        _ => {}
    }
    // A number of seconds; some endpoints send it as a string.
    let expires_in = match fields.get("expires_in") {
        Some(serde_json::Value::Number(n)) => n.as_f64(),
        Some(serde_json::Value::String(s)) => s.trim().parse::<f64>().ok(),
        _ => None,
    }
    .filter(|secs| secs.is_finite())
    .map(|secs| {
        Duration::try_from_secs_f64(secs.max(0.0))
            .unwrap_or(MAX_EXPIRES_IN)
            .min(MAX_EXPIRES_IN)
    });
    Ok(Issued {
        access_token: access_token.to_owned(),
        expires_in,
    })
}

/// The endpoint for messages: without any user or password written into the URL.
pub(super) fn display_endpoint(endpoint: &str) -> String {
    match reqwest::Url::parse(endpoint) {
        Ok(mut url) => {
            let _ = url.set_username("");
            let _ = url.set_password(None);
            url.to_string()
        }
        Err(_) => quote(endpoint, QUOTE_MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_leniently_but_never_without_a_token() {
        let ok = |json: &str| issued(serde_json::from_str(json).ok());
        assert!(matches!(
            ok(r#"{"access_token":"t","token_type":"Bearer","expires_in":300}"#),
            Ok(Issued { expires_in: Some(d), .. }) if d == Duration::from_secs(300)
        ));
        assert!(matches!(
            ok(r#"{"access_token":"t","token_type":"bearer","expires_in":"3599"}"#),
            Ok(Issued { expires_in: Some(d), .. }) if d == Duration::from_secs(3599)
        ));
        assert!(matches!(
            ok(r#"{"access_token":"t","expires_in":-5}"#),
            Ok(Issued {
                expires_in: Some(Duration::ZERO),
                ..
            })
        ));
        assert!(matches!(
            ok(r#"{"access_token":"t","expires_in":1e300}"#),
            Ok(Issued {
                expires_in: Some(MAX_EXPIRES_IN),
                ..
            })
        ));
        assert!(matches!(
            ok(r#"{"access_token":"t"}"#),
            Ok(Issued {
                expires_in: None,
                ..
            })
        ));
        assert!(ok(r#"{"access_token":"","token_type":"Bearer"}"#).is_err());
        assert!(ok(r#"{"access_token":7}"#).is_err());
        assert!(ok(r#"{"access_token":"t","token_type":"mac"}"#).is_err());
        assert!(ok(r#"["access_token"]"#).is_err());
        assert!(ok("not json").is_err());
    }

    #[test]
    fn the_endpoint_is_shown_without_credentials_in_it() {
        assert_eq!(
            display_endpoint("https://id:pw@idp.example/token?x=1"),
            "https://idp.example/token?x=1"
        );
        assert_eq!(display_endpoint("not a url"), "\"not a url\"");
    }
}
