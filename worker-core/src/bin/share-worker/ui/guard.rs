//! Who may see the dashboard and who may act on it.
//!
//! - **Token.** With `ui.token` (or `token-file`) every page needs it: as `Authorization: Bearer`
//!   (scripts, curl) or as the session cookie the login form sets (browsers). Both are compared
//!   in constant time, through an HMAC keyed per process, so neither the token's length nor its
//!   content leaks by timing; the cookie holds that HMAC, never the token.
//! - **Actions** need `ui.allow-actions` and, on every POST, the per-process CSRF token of the
//!   form (constant-time compare) and a same-origin request (`Sec-Fetch-Site`, `Origin`).
//! - **Loopback listeners** answer only requests for a loopback host name (`Host`), so a page
//!   of another site cannot reach them by DNS rebinding.

use axum::http::{HeaderMap, header};
use hmac::{Hmac, KeyInit, Mac};
use rand::RngCore;
use sha2::Sha256;
use subtle::ConstantTimeEq;
use worker_core::security::Secret;

/// The session cookie's name.
pub(crate) const COOKIE: &str = "share_worker_ui";

/// The dashboard's access rules for one process.
#[derive(Debug)]
pub(crate) struct Guard {
    token: Option<Secret>,
    /// Keys the HMAC of tokens and cookies; random per process.
    key: [u8; 32],
    /// The CSRF token of every form; random per process.
    csrf: String,
    allow_actions: bool,
    loopback: bool,
}

/// Why a request is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// 401: no token, or a wrong one.
    Unauthorized,
    /// 403: actions are off (`ui.allow-actions`).
    ActionsOff,
    /// 403: the form's CSRF token is missing or wrong, or the request is cross-site.
    Forgery,
    /// 421: a loopback listener asked for a host that is not loopback.
    ForeignHost,
}

impl Refusal {
    pub(crate) fn message(self) -> &'static str {
        match self {
            Refusal::Unauthorized => {
                "this dashboard needs its token (ui.token): sign in, or send Authorization: Bearer"
            }
            Refusal::ActionsOff => {
                "actions are off: this dashboard is read-only (set ui.allow-actions = true)"
            }
            Refusal::Forgery => {
                "refused: the form's CSRF token is missing or wrong, or the request came from another site"
            }
            Refusal::ForeignHost => {
                "refused: this dashboard listens on loopback and answers loopback host names only"
            }
        }
    }
}

impl Guard {
    pub(crate) fn new(token: Option<Secret>, allow_actions: bool, loopback: bool) -> Self {
        let mut key = [0u8; 32];
        rand::rng().fill_bytes(&mut key);
        let mut csrf = [0u8; 24];
        rand::rng().fill_bytes(&mut csrf);
        Self {
            token,
            key,
            csrf: hex(&csrf),
            allow_actions,
            loopback,
        }
    }

    /// Whether actions are possible at all (the pages show their buttons only then).
    pub(crate) fn actions_allowed(&self) -> bool {
        self.allow_actions
    }

    /// Whether a token is needed.
    pub(crate) fn needs_token(&self) -> bool {
        self.token.is_some()
    }

    /// The CSRF token for forms.
    pub(crate) fn csrf(&self) -> &str {
        &self.csrf
    }

    /// Checks a request's host and credentials (every dashboard request but the login page and
    /// the static files).
    pub(crate) fn admit(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        self.host(headers)?;
        if self.authorized(headers) {
            Ok(())
        } else {
            Err(Refusal::Unauthorized)
        }
    }

    /// Checks an action (a POST that changes something): admitted, actions on, same origin, and
    /// the form's CSRF token.
    pub(crate) fn act(&self, headers: &HeaderMap, csrf: &str) -> Result<(), Refusal> {
        self.admit(headers)?;
        if !self.allow_actions {
            return Err(Refusal::ActionsOff);
        }
        self.form(headers, csrf)
    }

    /// Checks a form POST that is no action (the login form): host, same origin, CSRF token.
    pub(crate) fn form(&self, headers: &HeaderMap, csrf: &str) -> Result<(), Refusal> {
        self.host(headers)?;
        if !same_origin(headers) || !bool::from(csrf.as_bytes().ct_eq(self.csrf.as_bytes())) {
            return Err(Refusal::Forgery);
        }
        Ok(())
    }

    /// The cookie value for a correct `token`, or `None` when it is wrong (or none is needed).
    pub(crate) fn login(&self, token: &str) -> Option<String> {
        let expected = self.token.as_ref()?;
        self.same_token(token, expected.expose())
            .then(|| self.session(expected.expose()))
    }

    fn authorized(&self, headers: &HeaderMap) -> bool {
        let Some(token) = &self.token else {
            return true;
        };
        let bearer = headers
            .get_all(header::AUTHORIZATION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .filter_map(|v| v.strip_prefix("Bearer "))
            .any(|presented| self.same_token(presented.trim(), token.expose()));
        if bearer {
            return true;
        }
        let session = self.session(token.expose());
        cookies(headers, COOKIE).any(|value| bool::from(value.as_bytes().ct_eq(session.as_bytes())))
    }

    /// Constant time whatever the lengths: the HMACs of both are compared.
    fn same_token(&self, presented: &str, expected: &str) -> bool {
        let a = self.mac(b"token", presented.as_bytes());
        let b = self.mac(b"token", expected.as_bytes());
        bool::from(a.ct_eq(&b))
    }

    fn session(&self, token: &str) -> String {
        hex(&self.mac(b"session", token.as_bytes()))
    }

    fn mac(&self, purpose: &[u8], data: &[u8]) -> [u8; 32] {
        // HMAC takes keys of any length, so this never fails; a zero MAC would match nothing.
        let Ok(mut mac) = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.key) else {
            return [0; 32];
        };
        mac.update(purpose);
        mac.update(&[0]);
        mac.update(data);
        mac.finalize().into_bytes().into()
    }

    fn host(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        if !self.loopback {
            return Ok(());
        }
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        if is_loopback_host(host) {
            Ok(())
        } else {
            Err(Refusal::ForeignHost)
        }
    }
}

/// `localhost`, `127.x.y.z` or `[::1]`, with or without a port.
fn is_loopback_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map_or(host, |(name, _)| name)
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// A browser's request from this origin (or a client that sends neither header, like curl).
fn same_origin(headers: &HeaderMap) -> bool {
    let text = |name| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = text(header::HeaderName::from_static("sec-fetch-site"))
        && !matches!(site, "same-origin" | "none")
    {
        return false;
    }
    match (text(header::ORIGIN), text(header::HOST)) {
        (None, _) => true,
        (Some(origin), Some(host)) => {
            origin.strip_prefix("http://") == Some(host)
                || origin.strip_prefix("https://") == Some(host)
        }
        (Some(_), None) => false,
    }
}

/// The values of the cookies named `name`.
fn cookies<'a>(headers: &'a HeaderMap, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(move |pair| {
            let (key, value) = pair.trim().split_once('=')?;
            (key == name).then_some(value)
        })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).expect("a header value"));
        }
        map
    }

    #[test]
    fn a_token_is_needed_as_bearer_or_session_cookie() {
        let guard = Guard::new(Some(Secret::new("s3cret")), true, false);
        assert_eq!(guard.admit(&headers(&[])), Err(Refusal::Unauthorized));
        let wrong = headers(&[("authorization", "Bearer s3cre")]);
        assert_eq!(guard.admit(&wrong), Err(Refusal::Unauthorized));
        let bearer = headers(&[("authorization", "Bearer s3cret")]);
        assert_eq!(guard.admit(&bearer), Ok(()));
        assert_eq!(guard.login("nope"), None);
        let session = guard.login("s3cret").expect("a session");
        assert!(!session.contains("s3cret"));
        let cookie = format!("other=1; {COOKIE}={session}");
        assert_eq!(guard.admit(&headers(&[("cookie", &cookie)])), Ok(()));
        let forged = format!("{COOKIE}={}", "0".repeat(session.len()));
        assert_eq!(
            guard.admit(&headers(&[("cookie", &forged)])),
            Err(Refusal::Unauthorized)
        );
        // Another process (another key) does not take this one's cookie.
        let other = Guard::new(Some(Secret::new("s3cret")), true, false);
        assert_eq!(
            other.admit(&headers(&[("cookie", &cookie)])),
            Err(Refusal::Unauthorized)
        );
    }

    #[test]
    fn actions_need_to_be_on_and_a_same_origin_form_with_the_csrf_token() {
        let read_only = Guard::new(None, false, true);
        let local = [("host", "127.0.0.1:9400")];
        assert_eq!(read_only.admit(&headers(&local)), Ok(()));
        let csrf = read_only.csrf().to_owned();
        assert_eq!(
            read_only.act(&headers(&local), &csrf),
            Err(Refusal::ActionsOff)
        );
        let guard = Guard::new(None, true, true);
        let csrf = guard.csrf().to_owned();
        assert_eq!(guard.act(&headers(&local), &csrf), Ok(()));
        assert_eq!(guard.act(&headers(&local), ""), Err(Refusal::Forgery));
        assert_eq!(
            guard.act(&headers(&local), read_only.csrf()),
            Err(Refusal::Forgery)
        );
        let cross_site = [("host", "127.0.0.1:9400"), ("sec-fetch-site", "cross-site")];
        assert_eq!(
            guard.act(&headers(&cross_site), &csrf),
            Err(Refusal::Forgery)
        );
        let other_origin = [
            ("host", "127.0.0.1:9400"),
            ("origin", "http://evil.example"),
        ];
        assert_eq!(
            guard.act(&headers(&other_origin), &csrf),
            Err(Refusal::Forgery)
        );
        let same = [
            ("host", "127.0.0.1:9400"),
            ("origin", "http://127.0.0.1:9400"),
        ];
        assert_eq!(guard.act(&headers(&same), &csrf), Ok(()));
    }

    #[test]
    fn a_loopback_dashboard_answers_loopback_host_names_only() {
        let guard = Guard::new(None, false, true);
        for host in ["localhost:9400", "127.0.0.1", "127.1.2.3:80", "[::1]:9400"] {
            assert_eq!(guard.admit(&headers(&[("host", host)])), Ok(()), "{host}");
        }
        for host in ["evil.example", "evil.example:9400", "10.0.0.1:9400", ""] {
            assert_eq!(
                guard.admit(&headers(&[("host", host)])),
                Err(Refusal::ForeignHost),
                "{host}"
            );
        }
        let open = Guard::new(None, false, false);
        assert_eq!(open.admit(&headers(&[("host", "worker-7:9464")])), Ok(()));
    }
}
