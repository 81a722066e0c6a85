//! Who may see the dashboard and who may act on it.
//!
//! - **Token.** With `ui.token` (or `token-file`) every page needs it: as `Authorization: Bearer`
//!   (scripts, curl) or as the session cookie the login form sets (browsers). Both are compared
//!   in constant time, through an HMAC keyed per process, so neither the token's length nor its
//!   content leaks by timing; the cookie holds the time it was issued and an HMAC of the token
//!   and that time, never the token, and is refused [`SESSION_LIFETIME`] after it was issued.
//!   Failed sign-ins are throttled per address ([`super::throttle`]).
//! - **Actions** need `ui.allow-actions` and, on every POST, the per-process CSRF token of the
//!   form (constant-time compare) and a same-origin request (`Sec-Fetch-Site`, `Origin`).
//! - **Hosts.** Every request of the listener is checked against its `allowed-hosts` before it
//!   gets here (`telemetry::hosts`), so a page of another site cannot reach the dashboard by
//!   DNS rebinding.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::{HeaderMap, header};
use hmac::{Hmac, KeyInit, Mac};
use rand::RngCore;
use sha2::Sha256;
use subtle::ConstantTimeEq;
use worker_core::security::Secret;

/// The session cookie's name.
pub(crate) const COOKIE: &str = "share_worker_ui";

/// How long a session cookie signs in: a working day, after which a stolen cookie is useless.
pub(crate) const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 60 * 60);

/// A session issued up to this far ahead of the clock is taken: the clock stepped back a little.
const CLOCK_STEP_BACK: Duration = Duration::from_secs(60);

/// The dashboard's access rules for one process.
#[derive(Debug)]
pub(crate) struct Guard {
    token: Option<Secret>,
    /// Keys the HMAC of tokens and cookies; random per process.
    key: [u8; 32],
    /// The CSRF token of every form; random per process.
    csrf: String,
    allow_actions: bool,
    /// Browsers reach the dashboard over HTTPS: the cookie is marked `Secure`.
    https: bool,
}

/// Why a request is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// 401: no token, or a session cookie that is not (or no longer) valid.
    Unauthorized,
    /// 401: a bearer token or a sign-in with a wrong token: a failed sign-in.
    WrongToken,
    /// 429: too many failed sign-ins from this address; retry after this many seconds.
    Throttled(u64),
    /// 403: actions are off (`ui.allow-actions`).
    ActionsOff,
    /// 403: the form's CSRF token is missing or wrong, or the request is cross-site.
    Forgery,
}

impl Refusal {
    pub(crate) fn message(self) -> String {
        match self {
            Refusal::Unauthorized => {
                "this dashboard needs its token (ui.token): sign in, or send Authorization: Bearer"
                    .to_owned()
            }
            Refusal::WrongToken => "wrong token".to_owned(),
            Refusal::Throttled(secs) => format!(
                "too many failed sign-ins from your address: try again in {secs} s"
            ),
            Refusal::ActionsOff => {
                "actions are off: this dashboard is read-only (set ui.allow-actions = true)"
                    .to_owned()
            }
            Refusal::Forgery => {
                "refused: the form's CSRF token is missing or wrong, or the request came from another site"
                    .to_owned()
            }
        }
    }
}

impl Guard {
    /// The rules for `token` (none: open to whoever reaches the listener); `https` when
    /// browsers reach the dashboard over HTTPS.
    pub(crate) fn new(token: Option<Secret>, allow_actions: bool, https: bool) -> Self {
        let mut key = [0u8; 32];
        rand::rng().fill_bytes(&mut key);
        let mut csrf = [0u8; 24];
        rand::rng().fill_bytes(&mut csrf);
        Self {
            token,
            key,
            csrf: hex(&csrf),
            allow_actions,
            https,
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

    /// Whether the request presents a bearer token: a sign-in attempt, which the throttle may
    /// refuse before it is checked.
    pub(crate) fn has_bearer(&self, headers: &HeaderMap) -> bool {
        self.token.is_some() && bearers(headers).next().is_some()
    }

    /// Checks a request's credentials at `now` (every dashboard request but the login page and
    /// the static files).
    pub(crate) fn admit(&self, headers: &HeaderMap, now: SystemTime) -> Result<(), Refusal> {
        let Some(token) = &self.token else {
            return Ok(());
        };
        let mut presented = false;
        for bearer in bearers(headers) {
            presented = true;
            if self.same_token(bearer, token.expose()) {
                return Ok(());
            }
        }
        let now = unix_secs(now);
        if cookies(headers, COOKIE).any(|value| self.valid_session(token.expose(), value, now)) {
            return Ok(());
        }
        Err(if presented {
            Refusal::WrongToken
        } else {
            Refusal::Unauthorized
        })
    }

    /// Checks an action (a POST that changes something) at `now`: admitted, actions on, same
    /// origin, and the form's CSRF token.
    pub(crate) fn act(
        &self,
        headers: &HeaderMap,
        csrf: &str,
        now: SystemTime,
    ) -> Result<(), Refusal> {
        self.admit(headers, now)?;
        if !self.allow_actions {
            return Err(Refusal::ActionsOff);
        }
        self.form(headers, csrf)
    }

    /// Checks a form POST that is no action (the login form): same origin, CSRF token.
    pub(crate) fn form(&self, headers: &HeaderMap, csrf: &str) -> Result<(), Refusal> {
        if !same_origin(headers) || !bool::from(csrf.as_bytes().ct_eq(self.csrf.as_bytes())) {
            return Err(Refusal::Forgery);
        }
        Ok(())
    }

    /// The session cookie's value for a correct `token` signed in at `now`, or `None` when it
    /// is wrong (or none is needed).
    pub(crate) fn login(&self, token: &str, now: SystemTime) -> Option<String> {
        let expected = self.token.as_ref()?;
        self.same_token(token, expected.expose())
            .then(|| self.session(expected.expose(), unix_secs(now)))
    }

    /// The `Set-Cookie` value of a session: for the dashboard's paths only, hidden from scripts,
    /// never sent by another site's requests, gone after [`SESSION_LIFETIME`], and over HTTPS
    /// only when the dashboard is served so.
    pub(crate) fn cookie(&self, session: &str) -> String {
        format!(
            "{COOKIE}={session}; Path=/ui; Max-Age={}; HttpOnly; SameSite=Strict{}",
            SESSION_LIFETIME.as_secs(),
            if self.https { "; Secure" } else { "" }
        )
    }

    /// Constant time whatever the lengths: the HMACs of both are compared.
    fn same_token(&self, presented: &str, expected: &str) -> bool {
        let a = self.mac(b"token", presented.as_bytes());
        let b = self.mac(b"token", expected.as_bytes());
        bool::from(a.ct_eq(&b))
    }

    /// `ISSUED.MAC`: the issue time (Unix seconds) and the HMAC of the token with it, so that
    /// neither can be changed.
    fn session(&self, token: &str, issued: u64) -> String {
        let mut data = token.as_bytes().to_vec();
        data.push(0);
        data.extend_from_slice(issued.to_string().as_bytes());
        format!("{issued}.{}", hex(&self.mac(b"session", &data)))
    }

    /// A session cookie value this process issued for `token` less than [`SESSION_LIFETIME`]
    /// before `now`.
    fn valid_session(&self, token: &str, value: &str, now: u64) -> bool {
        let Some((issued, _)) = value.split_once('.') else {
            return false;
        };
        if issued.is_empty() || issued.len() > 20 || !issued.bytes().all(|b| b.is_ascii_digit()) {
            return false;
        }
        let Ok(issued) = issued.parse::<u64>() else {
            return false;
        };
        let expected = self.session(token, issued);
        bool::from(value.as_bytes().ct_eq(expected.as_bytes()))
            && issued <= now.saturating_add(CLOCK_STEP_BACK.as_secs())
            && now.saturating_sub(issued) < SESSION_LIFETIME.as_secs()
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
}

fn unix_secs(now: SystemTime) -> u64 {
    now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The bearer tokens of the `Authorization` headers.
fn bearers(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(header::AUTHORIZATION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
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

    const TOKEN: &str = "s3cret-0123456789abcdef-0123456789";

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).expect("a header value"));
        }
        map
    }

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    /// 2026-06-01, a plausible now.
    const NOW: u64 = 1_780_000_000;

    #[test]
    fn a_token_is_needed_as_bearer_or_session_cookie() {
        let guard = Guard::new(Some(Secret::new(TOKEN)), true, false);
        let now = at(NOW);
        assert_eq!(guard.admit(&headers(&[]), now), Err(Refusal::Unauthorized));
        assert!(!guard.has_bearer(&headers(&[])));
        let wrong = headers(&[("authorization", "Bearer s3cre")]);
        assert!(guard.has_bearer(&wrong));
        assert_eq!(guard.admit(&wrong, now), Err(Refusal::WrongToken));
        let bearer = headers(&[("authorization", &format!("Bearer {TOKEN}"))]);
        assert_eq!(guard.admit(&bearer, now), Ok(()));
        assert_eq!(guard.login("nope", now), None);
        let session = guard.login(TOKEN, now).expect("a session");
        assert!(!session.contains(TOKEN));
        assert!(session.starts_with(&format!("{NOW}.")), "{session}");
        let cookie = format!("other=1; {COOKIE}={session}");
        assert_eq!(guard.admit(&headers(&[("cookie", &cookie)]), now), Ok(()));
        let forged = format!("{COOKIE}={NOW}.{}", "0".repeat(64));
        assert_eq!(
            guard.admit(&headers(&[("cookie", &forged)]), now),
            Err(Refusal::Unauthorized)
        );
        // Another process (another key) does not take this one's cookie.
        let other = Guard::new(Some(Secret::new(TOKEN)), true, false);
        assert_eq!(
            other.admit(&headers(&[("cookie", &cookie)]), now),
            Err(Refusal::Unauthorized)
        );
        // Without a token, everything is admitted and no sign-in counts.
        let open = Guard::new(None, false, false);
        assert_eq!(open.admit(&wrong, now), Ok(()));
        assert!(!open.has_bearer(&wrong));
        assert_eq!(open.login(TOKEN, now), None);
    }

    #[test]
    fn a_session_expires_after_its_lifetime_and_its_issue_time_cannot_be_changed() {
        let guard = Guard::new(Some(Secret::new(TOKEN)), false, false);
        let session = guard.login(TOKEN, at(NOW)).expect("a session");
        let with = |value: &str| headers(&[("cookie", &format!("{COOKIE}={value}"))]);
        let lifetime = SESSION_LIFETIME.as_secs();
        assert_eq!(lifetime, 12 * 3600);
        for ok in [NOW, NOW + lifetime - 1, NOW - CLOCK_STEP_BACK.as_secs()] {
            assert_eq!(guard.admit(&with(&session), at(ok)), Ok(()), "at {ok}");
        }
        for refused in [NOW + lifetime, NOW + 10 * lifetime, NOW - 3600] {
            assert_eq!(
                guard.admit(&with(&session), at(refused)),
                Err(Refusal::Unauthorized),
                "at {refused}"
            );
        }
        // A later issue time with the same MAC, a leading zero, garbage: refused.
        let mac = session.split_once('.').expect("ISSUED.MAC").1;
        for tampered in [
            format!("{}.{mac}", NOW + lifetime),
            format!("0{NOW}.{mac}"),
            format!("+{NOW}.{mac}"),
            format!("{NOW}.{mac}0"),
            mac.to_owned(),
            format!("{}.{mac}", "9".repeat(30)),
            String::new(),
        ] {
            assert_eq!(
                guard.admit(&with(&tampered), at(NOW)),
                Err(Refusal::Unauthorized),
                "{tampered}"
            );
        }
        // A session of another token (the token changed with a restart) is refused.
        let before = Guard {
            token: Some(Secret::new("another-token-0123456789abcdef-0123")),
            key: guard.key,
            csrf: guard.csrf.clone(),
            allow_actions: false,
            https: false,
        };
        let old = before
            .login("another-token-0123456789abcdef-0123", at(NOW))
            .expect("a session");
        assert_eq!(
            guard.admit(&with(&old), at(NOW)),
            Err(Refusal::Unauthorized)
        );
    }

    #[test]
    fn the_cookie_is_http_only_same_site_strict_for_the_lifetime_and_secure_over_https() {
        let https = Guard::new(Some(Secret::new(TOKEN)), false, true);
        let session = https.login(TOKEN, at(NOW)).expect("a session");
        assert_eq!(
            https.cookie(&session),
            format!(
                "{COOKIE}={session}; Path=/ui; Max-Age=43200; HttpOnly; SameSite=Strict; Secure"
            )
        );
        let http = Guard::new(Some(Secret::new(TOKEN)), false, false);
        assert!(!http.cookie(&session).contains("Secure"));
    }

    #[test]
    fn actions_need_to_be_on_and_a_same_origin_form_with_the_csrf_token() {
        let now = at(NOW);
        let read_only = Guard::new(None, false, false);
        let local = [("host", "127.0.0.1:9400")];
        assert_eq!(read_only.admit(&headers(&local), now), Ok(()));
        let csrf = read_only.csrf().to_owned();
        assert_eq!(
            read_only.act(&headers(&local), &csrf, now),
            Err(Refusal::ActionsOff)
        );
        let guard = Guard::new(None, true, false);
        let csrf = guard.csrf().to_owned();
        assert_eq!(guard.act(&headers(&local), &csrf, now), Ok(()));
        assert_eq!(guard.act(&headers(&local), "", now), Err(Refusal::Forgery));
        assert_eq!(
            guard.act(&headers(&local), read_only.csrf(), now),
            Err(Refusal::Forgery)
        );
        let cross_site = [("host", "127.0.0.1:9400"), ("sec-fetch-site", "cross-site")];
        assert_eq!(
            guard.act(&headers(&cross_site), &csrf, now),
            Err(Refusal::Forgery)
        );
        let other_origin = [
            ("host", "127.0.0.1:9400"),
            ("origin", "http://evil.example"),
        ];
        assert_eq!(
            guard.act(&headers(&other_origin), &csrf, now),
            Err(Refusal::Forgery)
        );
        let same = [
            ("host", "127.0.0.1:9400"),
            ("origin", "http://127.0.0.1:9400"),
        ];
        assert_eq!(guard.act(&headers(&same), &csrf, now), Ok(()));
        let https = [
            ("host", "worker.example.com"),
            ("origin", "https://worker.example.com"),
        ];
        assert_eq!(guard.act(&headers(&https), &csrf, now), Ok(()));
    }
}
