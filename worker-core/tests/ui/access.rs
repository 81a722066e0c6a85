//! Who may read and act: the token, CSRF and same-origin checks, read-only dashboards, and the
//! refusal to start an actionable dashboard off loopback without a token.

use reqwest::StatusCode;

use crate::browser::{
    Chromium, click_and_wait, fill, free_port, http, page_text, screenshot, spawn, wait_listening,
};
use crate::support::*;

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
    let port = free_port();
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
    let port = free_port();
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
