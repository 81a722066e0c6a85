//! A headless Chromium for one test, and what the tests ask of pages.

use std::path::{Path, PathBuf};
use std::time::Duration;

use chromiumoxide::browser::{Browser, BrowserConfig};
use chromiumoxide::handler::viewport::Viewport;
use chromiumoxide::page::{Page, ScreenshotParams};
use futures::StreamExt;
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;

use crate::support::Scratch;

/// How long a page may take to show what a test waits for.
pub(crate) const PAGE_DEADLINE: Duration = Duration::from_secs(60);

/// The Chromium binary: `CHROMIUM`, else Debian's `/usr/bin/chromium`.
fn executable() -> PathBuf {
    let path = std::env::var_os("CHROMIUM")
        .map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from);
    assert!(
        path.exists(),
        "no Chromium at {}: install Debian's chromium (scripts/test.sh does) or set CHROMIUM",
        path.display()
    );
    path
}

/// One browser with a profile of its own, closed when dropped.
pub(crate) struct Chromium {
    browser: Browser,
    events: JoinHandle<()>,
    _profile: Scratch,
}

impl Chromium {
    pub(crate) async fn launch() -> Self {
        Self::launch_with(&[]).await
    }

    /// A browser with more command-line `args`.
    pub(crate) async fn launch_with(args: &[&str]) -> Self {
        let profile = Scratch::new();
        let mut config = BrowserConfig::builder()
            .chrome_executable(executable())
            .new_headless_mode()
            .no_sandbox()
            .user_data_dir(&profile.0)
            .window_size(1400, 1000)
            .viewport(Viewport {
                width: 1400,
                height: 1000,
                ..Viewport::default()
            })
            .arg("--disable-gpu")
            .arg("--disable-dev-shm-usage");
        for arg in args {
            config = config.arg(*arg);
        }
        let config = config
            .launch_timeout(Duration::from_secs(60))
            .request_timeout(Duration::from_secs(30))
            .build()
            .expect("a browser configuration");
        let (browser, mut handler) = Browser::launch(config).await.expect("launching Chromium");
        // The handler drives the protocol; messages it does not know are reported and skipped.
        let events = tokio::spawn(async move { while handler.next().await.is_some() {} });
        Self {
            browser,
            events,
            _profile: profile,
        }
    }

    /// A new tab at `url`, loaded.
    pub(crate) async fn open(&self, url: &str) -> Page {
        let page = self.browser.new_page(url).await.expect("opening a page");
        page.wait_for_navigation().await.expect("loading the page");
        page
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        self.events.abort();
    }
}

/// Evaluates `expression` in `page`.
pub(crate) async fn eval<T: DeserializeOwned>(page: &Page, expression: &str) -> T {
    try_eval(page, expression)
        .await
        .unwrap_or_else(|err| panic!("evaluating {expression}: {err}"))
}

/// Evaluates `expression`; an error while the page navigates (its context is gone) is `Err`.
async fn try_eval<T: DeserializeOwned>(page: &Page, expression: &str) -> Result<T, String> {
    page.evaluate_expression(expression)
        .await
        .map_err(|err| err.to_string())?
        .into_value()
        .map_err(|err| format!("the value: {err}"))
}

/// Evaluates `expression` until `done` says yes, within [`PAGE_DEADLINE`] (an evaluation that
/// fails because the page is navigating is tried again); the last value.
pub(crate) async fn wait_until<T: DeserializeOwned + std::fmt::Debug>(
    page: &Page,
    what: &str,
    expression: &str,
    mut done: impl FnMut(&T) -> bool,
) -> T {
    let deadline = tokio::time::Instant::now() + PAGE_DEADLINE;
    loop {
        let last = match try_eval::<T>(page, expression).await {
            Ok(value) if done(&value) => return value,
            last => last,
        };
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not seen within {PAGE_DEADLINE:?}; last {last:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The page's text (what a person reads).
pub(crate) async fn page_text(page: &Page) -> String {
    eval(page, "document.body.innerText").await
}

/// Clicks the element `selector` (as a person would: the page's own click, form submission and
/// redirects follow) and waits until the page it leads to shows `then`.
pub(crate) async fn click_and_wait(page: &Page, selector: &str, then: &str) {
    page.bring_to_front()
        .await
        .expect("bringing the tab to the front");
    let clicked: bool = eval(
        page,
        &format!(
            "(() => {{ const e = document.querySelector({selector:?}); if (!e) return false; window.leaving = true; e.click(); return true; }})()"
        ),
    )
    .await;
    assert!(clicked, "no {selector} on the page");
    // `leaving` is set on the old page only: the new one has loaded when it is gone.
    let shown = format!(
        "window.leaving === undefined && document.readyState === 'complete' && !!document.querySelector({then:?})"
    );
    let what = format!("{then} after clicking {selector}");
    wait_until(page, &what, &shown, |ready: &bool| *ready).await;
}

/// Ticks the checkbox (or clicks the element) `selector` without leaving the page.
pub(crate) async fn tick(page: &Page, selector: &str) {
    let ticked: bool = eval(
        page,
        &format!(
            "(() => {{ const e = document.querySelector({selector:?}); if (!e) return false; e.click(); return e.checked === true; }})()"
        ),
    )
    .await;
    assert!(ticked, "{selector} is not ticked");
}

/// Types `text` into the field `selector`.
pub(crate) async fn fill(page: &Page, selector: &str, text: &str) {
    let filled: bool = eval(
        page,
        &format!(
            "(() => {{ const e = document.querySelector({selector:?}); if (!e) return false; e.value = {text:?}; return true; }})()"
        ),
    )
    .await;
    assert!(filled, "no {selector} on the page");
}

/// Where screenshots go: `target/ui-screenshots/`.
pub(crate) fn screenshots() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("../ui-screenshots");
    std::fs::create_dir_all(&dir).expect("creating target/ui-screenshots");
    dir
}

/// Saves the whole page as `name`.png under [`screenshots`].
pub(crate) async fn screenshot(page: &Page, name: &str) {
    page.bring_to_front()
        .await
        .expect("bringing the tab to the front");
    let path = screenshots().join(format!("{name}.png"));
    page.save_screenshot(ScreenshotParams::builder().full_page(true).build(), &path)
        .await
        .unwrap_or_else(|err| panic!("saving {}: {err}", path.display()));
}

/// Waits until `url` answers (any status), within the deadline.
pub(crate) async fn wait_listening(url: &str) {
    let deadline = tokio::time::Instant::now() + PAGE_DEADLINE;
    while reqwest::get(url).await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{url} never answered"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An HTTP client that shows redirects instead of following them.
pub(crate) fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("an HTTP client")
}
