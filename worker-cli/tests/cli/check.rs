//! `check`: the effective config, or what is wrong with the file.

use crate::support::*;

#[tokio::test]
async fn check_prints_the_effective_config_or_names_what_is_wrong() {
    let scratch = Scratch::new();
    let topic = unique("cli-check");
    let group = unique("cli-check-group");
    let good = scratch.write("good.toml", &config(&group, &topic, "handler = \"noop\""));
    let good = good.to_str().unwrap();
    // Before setup the route topic is missing.
    let out = share_worker(&["check", "--config", good], &[]).await;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("share-worker setup"),
        "{}",
        text(&out.stderr)
    );
    assert_ok(
        &share_worker(&["setup", "--config", good], &[]).await,
        "setup",
    );
    let out = share_worker(
        &["check", "--config", good],
        &[("SHARE_WORKER__WORKER__CONCURRENCY", "5")],
    )
    .await;
    assert_ok(&out, "check");
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("share groups with RENEW (ShareFetch/ShareAcknowledge v2): supported"),
        "{stdout}"
    );
    assert!(stdout.contains(&format!("group = \"{group}\"")), "{stdout}");
    assert!(
        stdout.contains("concurrency = 5"),
        "the override applies: {stdout}"
    );
    // A broken file names the file, the line and the key.
    let broken = config(&group, &topic, "handler = \"ftp\"");
    let line = broken.lines().position(|l| l.contains("ftp")).unwrap() + 1;
    let bad = scratch.write("bad.toml", &broken);
    let out = share_worker(&["check", "--config", bad.to_str().unwrap()], &[]).await;
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "bad.toml:{line}: `route[0].handler`: unknown value \"ftp\""
        )),
        "{stderr}"
    );
}
