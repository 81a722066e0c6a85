//! Who may read and act: the token, CSRF and same-origin checks, read-only dashboards, the
//! session cookie over HTTPS, and the refusal to start a dashboard off loopback without a token.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chromiumoxide::cdp::browser_protocol::network::{CookieParam, CookieSameSite};
use reqwest::StatusCode;

use crate::support::*;
use crate::ui::browser::{
    Chromium, PAGE_DEADLINE, click_and_wait, fill, http, page_text, screenshot, wait_listening,
    wait_until,
};

/// 32 characters: shorter tokens are refused.
const TOKEN: &str = "ui-test-token-7f3a-0123456789abc";

/// The CSRF token in a page's forms.
fn csrf(page: &str) -> String {
    let at = page
        .find("name=\"csrf\" value=\"")
        .expect("a form with a CSRF token")
        + 19;
    page[at..].split('"').next().expect("its value").to_owned()
}

/// A config whose dashboard listens on `port`, with `ui` keys added.
fn dashboard(group: &str, topic: &str, port: u16, ui: &str) -> String {
    config(group, topic, "handler = \"noop\"").replace(
        "[dlq]",
        &format!("[ui]\nlisten = \"127.0.0.1:{port}\"\n{ui}\n\n[dlq]"),
    )
}

#[tokio::test]
async fn actions_are_refused_without_the_token_the_csrf_token_or_from_another_site() {
    let scratch = Scratch::new();
    let topic = unique("ui-access");
    let group = unique("ui-access-group");
    let port = reserve_port();
    let cfg = scratch.write(
        "worker.toml",
        &dashboard(
            &group,
            &topic,
            port,
            &format!("allow-actions = true\ntoken = \"{TOKEN}\""),
        ),
    );
    let cfg = cfg.to_str().expect("utf-8 path");
    assert_ok(
        &share_worker(&["setup", "--config", cfg], &[]).await,
        "setup",
    );
    let log = scratch.0.join("ui.log");
    let _ui = spawn(&["ui", "--config", cfg], &log);
    let base = format!("http://127.0.0.1:{port}");
    wait_listening(&format!("{base}/ui/login")).await;
    let client = http();
    let bearer = format!("Bearer {TOKEN}");
    let act = format!("{base}/ui/dlq/{topic}.dlq/act");

    // Reading needs the token.
    let anonymous = client
        .get(format!("{base}/ui"))
        .send()
        .await
        .expect("GET /ui");
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    assert!(
        anonymous
            .text()
            .await
            .unwrap_or_default()
            .contains("needs its token")
    );
    let wrong = client
        .get(format!("{base}/ui"))
        .header("authorization", "Bearer not-the-token")
        .send()
        .await
        .expect("GET /ui");
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    let page = client
        .get(format!("{base}/ui/dlq/{topic}.dlq"))
        .header("authorization", &bearer)
        .send()
        .await
        .expect("GET the letters");
    assert_eq!(page.status(), StatusCode::OK);
    let confirm = client
        .get(format!(
            "{base}/ui/dlq/{topic}.dlq/confirm?do=skip-selected&letter=0:0"
        ))
        .header("authorization", &bearer)
        .send()
        .await
        .expect("GET the confirmation")
        .text()
        .await
        .expect("its body");
    let token = csrf(&confirm);
    let form = format!("csrf={token}&action=skip&scope=selected&letter=0:0");
    let post = |auth: Option<&str>, body: String, origin: Option<&str>| {
        let mut request = client
            .post(&act)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        if let Some(auth) = auth {
            request = request.header("authorization", auth.to_owned());
        }
        if let Some(origin) = origin {
            request = request.header("origin", origin.to_owned());
        }
        request.send()
    };
    // An action without the token: 401, nothing done.
    let refused = post(None, form.clone(), None).await.expect("POST");
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    // With the token but without the form's CSRF token, or from another site: 403.
    let forged = post(
        Some(&bearer),
        "action=skip&scope=selected&letter=0:0".into(),
        None,
    )
    .await
    .expect("POST");
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    let cross = post(Some(&bearer), form.clone(), Some("http://evil.example"))
        .await
        .expect("POST");
    assert_eq!(cross.status(), StatusCode::FORBIDDEN);
    // A page asked for under another host name (DNS rebinding): refused.
    let rebound = client
        .get(format!("{base}/ui"))
        .header("authorization", &bearer)
        .header("host", "evil.example")
        .send()
        .await
        .expect("GET");
    assert_eq!(rebound.status(), StatusCode::MISDIRECTED_REQUEST);
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !log_text.contains("dashboard action"),
        "nothing ran: {log_text}"
    );
    // With everything: the action runs.
    let accepted = post(Some(&bearer), form, Some(&base)).await.expect("POST");
    assert_eq!(accepted.status(), StatusCode::SEE_OTHER);
    assert!(
        accepted
            .headers()
            .get("location")
            .and_then(|l| l.to_str().ok())
            .is_some_and(|l| l.starts_with("/ui/jobs/")),
        "{accepted:?}"
    );
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(log_text.contains("dashboard action started"), "{log_text}");
    assert!(!log_text.contains(TOKEN), "the token is never logged");

    // A person signs in with the token in the browser.
    let browser = Chromium::launch().await;
    let page = browser.open(&format!("{base}/ui")).await;
    assert!(page_text(&page).await.contains("needs its token"));
    screenshot(&page, "sign-in").await;
    fill(&page, "input[name=token]", "wrong").await;
    click_and_wait(&page, "button[type=submit]", "p.error").await;
    assert!(page_text(&page).await.contains("wrong token"));
    fill(&page, "input[name=token]", TOKEN).await;
    click_and_wait(&page, "button[type=submit]", "#live").await;
    let shown = page_text(&page).await;
    assert!(shown.contains(&format!("Share group {group}")), "{shown}");
}

#[tokio::test]
async fn a_read_only_dashboard_shows_no_action_and_refuses_every_one() {
    let scratch = Scratch::new();
    let topic = unique("ui-readonly");
    let group = unique("ui-readonly-group");
    let port = reserve_port();
    let cfg = scratch.write("worker.toml", &dashboard(&group, &topic, port, ""));
    let cfg = cfg.to_str().expect("utf-8 path");
    assert_ok(
        &share_worker(&["setup", "--config", cfg], &[]).await,
        "setup",
    );
    let _ui = spawn(&["ui", "--config", cfg], &scratch.0.join("ui.log"));
    let base = format!("http://127.0.0.1:{port}");
    wait_listening(&format!("{base}/ui/login")).await;
    let client = http();
    let page = client
        .get(format!("{base}/ui/dlq/{topic}.dlq"))
        .send()
        .await
        .expect("GET")
        .text()
        .await
        .expect("a page");
    assert!(page.contains("read-only"), "{page}");
    assert!(!page.contains("Replay selected"), "no action buttons");
    let login = client
        .get(format!("{base}/ui/login"))
        .send()
        .await
        .expect("GET")
        .text()
        .await
        .expect("a page");
    let form = format!("csrf={}&action=replay&scope=filter", csrf(&login));
    let refused = client
        .post(format!("{base}/ui/dlq/{topic}.dlq/act"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form)
        .send()
        .await
        .expect("POST");
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    assert!(
        refused
            .text()
            .await
            .unwrap_or_default()
            .contains("read-only")
    );
}

#[tokio::test]
async fn an_actionable_dashboard_off_loopback_without_a_token_does_not_start() {
    let scratch = Scratch::new();
    let topic = unique("ui-open");
    let cfg = config(&unique("ui-open-group"), &topic, "handler = \"noop\"").replace(
        "[dlq]",
        "[ui]\nlisten = \"0.0.0.0:0\"\nallow-actions = true\n\n[dlq]",
    );
    let cfg = scratch.write("worker.toml", &cfg);
    let out = share_worker(&["ui", "--config", cfg.to_str().expect("utf-8 path")], &[]).await;
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("`ui.listen`") && stderr.contains("not on loopback"),
        "{stderr}"
    );
}

/// The session cookie's name and lifetime (`ui/guard.rs`).
const COOKIE: &str = "share_worker_ui";
const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 60 * 60);

/// Over HTTPS the browser gets a session cookie that is Secure, HttpOnly, SameSite=Strict, for
/// the dashboard's paths only and for 12 hours; scripts cannot read it, and the same cookie with
/// its issue time moved back past the lifetime signs nobody in (its MAC covers the time; expiry
/// itself is tested with a clock in `ui/guard.rs`).
#[tokio::test]
async fn over_https_the_session_cookie_is_secure_and_a_backdated_one_signs_nobody_in() {
    let scratch = Scratch::new();
    let port = reserve_port();
    let generated =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .expect("a certificate");
    let cert = scratch.write("tls.crt", &generated.cert.pem());
    let key = scratch.write("tls.key", &generated.signing_key.serialize_pem());
    let cfg = scratch.write(
        "worker.toml",
        &dashboard(
            &unique("ui-https-group"),
            &unique("ui-https"),
            port,
            &format!(
                "token = \"{TOKEN}\"\ntls-cert-file = \"{}\"\ntls-key-file = \"{}\"",
                cert.display(),
                key.display()
            ),
        ),
    );
    let _ui = spawn(
        &["ui", "--config", cfg.to_str().expect("utf-8 path")],
        &scratch.0.join("ui.log"),
    );
    let base = format!("https://127.0.0.1:{port}");
    // The certificate is its own: only the browser below is told to take it.
    let insecure = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .build()
        .expect("an HTTPS client");
    let deadline = tokio::time::Instant::now() + PAGE_DEADLINE;
    while insecure
        .get(format!("{base}/ui/login"))
        .send()
        .await
        .is_err()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{base} never answered"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let browser = Chromium::launch_with(&["--ignore-certificate-errors"]).await;
    // The tab takes the self-signed certificate once it is set up: open it blank first.
    let page = browser.open("about:blank").await;
    page.goto(format!("{base}/ui"))
        .await
        .expect("loading the dashboard");
    let shown = page_text(&page).await;
    assert!(shown.contains("needs its token"), "{shown}");
    fill(&page, "input[name=token]", TOKEN).await;
    let signed_in = SystemTime::now();
    click_and_wait(&page, "button[type=submit]", "#live").await;
    let cookies = page.get_cookies().await.expect("the page's cookies");
    let session = cookies
        .iter()
        .find(|c| c.name == COOKIE)
        .unwrap_or_else(|| panic!("no {COOKIE} among {cookies:?}"));
    assert!(session.secure, "{session:?}");
    assert!(session.http_only, "{session:?}");
    assert_eq!(
        session.same_site,
        Some(CookieSameSite::Strict),
        "{session:?}"
    );
    assert_eq!(session.path, "/ui");
    assert!(!session.session, "it has a lifetime: {session:?}");
    let lifetime_end = signed_in
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_secs_f64()
        + SESSION_LIFETIME.as_secs_f64();
    assert!(
        (session.expires - lifetime_end).abs() < 120.0,
        "expires {} (12 h after the sign-in: {lifetime_end})",
        session.expires
    );
    let seen_by_scripts: String = crate::ui::browser::eval(&page, "document.cookie").await;
    assert!(!seen_by_scripts.contains(COOKIE), "{seen_by_scripts}");

    // The same cookie, its issue time 12 hours and a minute earlier: the sign-in page again.
    let (issued, mac) = session.value.split_once('.').expect("ISSUED.MAC");
    let issued: u64 = issued.parse().expect("an issue time");
    let expired = format!("{}.{mac}", issued - SESSION_LIFETIME.as_secs() - 60);
    let forged = CookieParam::builder()
        .name(COOKIE)
        .value(expired)
        .url(format!("{base}/ui"))
        .path("/ui")
        .secure(true)
        .http_only(true)
        .same_site(CookieSameSite::Strict)
        .build()
        .expect("a cookie");
    page.set_cookie(forged).await.expect("setting the cookie");
    page.goto(format!("{base}/ui"))
        .await
        .expect("loading the overview");
    wait_until(
        &page,
        "the sign-in page for a backdated session",
        "document.body.innerText.includes('needs its token')",
        |shown: &bool| *shown,
    )
    .await;
    let page_text = page_text(&page).await;
    assert!(!page_text.contains("Share group"), "{page_text}");
}
