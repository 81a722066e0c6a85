//! The container image: the repository's Dockerfile built with podman — its runtime stage on a
//! base image made from Debian's packages (`deploy/base-image.sh`, named by
//! `SHARE_WORKER_BASE_IMAGE`), the binary this test run built standing in for the Rust build stage
//! (no Rust image can be pulled here) — then run against the local broker with a mounted TOML
//! file: it runs as a non-root user, processes records, answers `/healthz`, and stops cleanly on
//! SIGTERM.

use std::time::Duration;

use tokio::process::Command;

use crate::fake_http::Endpoint;
use crate::support::*;

/// podman's flags for running on this machine: runc (crun refuses its hybrid cgroups), cgroupfs,
/// and ulimits the host allows.
const RUN_FLAGS: &[&str] = &["--runtime", "runc", "--cgroup-manager", "cgroupfs"];

async fn podman(args: &[&str]) -> std::process::Output {
    Command::new("podman")
        .args(args)
        .output()
        .await
        .expect("running podman (scripts/test.sh installs it)")
}

/// Removes the test's container and image, whatever happened.
struct Cleanup {
    container: String,
    image: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::process::Command::new("podman")
            .args(RUN_FLAGS)
            .args(["rm", "--force", &self.container])
            .output();
        let _ = std::process::Command::new("podman")
            .args(["rmi", "--force", &self.image])
            .output();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_image_runs_a_worker_and_stops_cleanly_on_sigterm() {
    let base = std::env::var("SHARE_WORKER_BASE_IMAGE").expect(
        "SHARE_WORKER_BASE_IMAGE names the base image (scripts/test.sh makes it with deploy/base-image.sh)",
    );
    let scratch = Scratch::new();
    let topic = unique("image");
    let group = unique("image-group");
    let endpoint = Endpoint::start().await;
    let port = reserve_port();
    let config = config(&group, &topic, &endpoint.route()).replace(
        "[dlq]",
        &format!("[telemetry]\nlisten = \"127.0.0.1:{port}\"\n\n[dlq]"),
    );
    let cfg = scratch.write("worker.toml", &config);
    let cfg = cfg.to_str().expect("utf-8 path");
    assert_ok(
        &share_worker(&["setup", "--config", cfg, "--partitions", "2"], &[]).await,
        "setup",
    );

    // The build stage's output, `/out/share-worker`, from this run's binary.
    let context = scratch.0.join("build");
    std::fs::create_dir_all(context.join("out")).expect("the build context");
    std::fs::copy(BIN, context.join("out/share-worker")).expect("the binary");
    let image = format!("localhost/{}:test", unique("share-worker"));
    let container = unique("share-worker");
    let _cleanup = Cleanup {
        container: container.clone(),
        image: image.clone(),
    };
    let dockerfile = concat!(env!("CARGO_MANIFEST_DIR"), "/../Dockerfile");
    let repo = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let build_context = format!("build={}", context.display());
    let base_arg = format!("BASE_IMAGE={base}");
    let built = podman(&[
        "build",
        "--network",
        "host",
        "--build-context",
        &build_context,
        "--build-arg",
        &base_arg,
        "--target",
        "runtime",
        "--tag",
        &image,
        "--file",
        dockerfile,
        repo,
    ])
    .await;
    assert!(
        built.status.success(),
        "podman build: {}",
        text(&built.stderr)
    );
    let user = podman(&["image", "inspect", "--format", "{{.Config.User}}", &image]).await;
    assert_eq!(text(&user.stdout).trim(), "10001:10001", "a non-root user");

    let mount = format!("{cfg}:/etc/share-worker/worker.toml:ro");
    let mut run = RUN_FLAGS.to_vec();
    run.extend([
        "run",
        "--detach",
        "--name",
        &container,
        "--network",
        "host",
        "--ulimit",
        "nofile=1000:1000",
        "--ulimit",
        "nproc=1000:1000",
        "--volume",
        &mount,
        &image,
    ]);
    let started = podman(&run).await;
    assert!(
        started.status.success(),
        "podman run: {}",
        text(&started.stderr)
    );
    let values: Vec<String> = (0..20).map(|i| format!("ok-{i}")).collect();
    let producer = tests::producer(&[]).expect("a producer");
    tests::produce(&producer, &topic, None, &values)
        .await
        .expect("producing");
    let logs = async || {
        let out = podman(&["logs", &container]).await;
        format!("{}{}", text(&out.stdout), text(&out.stderr))
    };
    let handled = tests::wait_for("the records handled", Duration::from_secs(60), async || {
        let bodies: std::collections::HashSet<String> = endpoint.bodies().into_iter().collect();
        Ok(values.iter().all(|v| bodies.contains(v)))
    })
    .await;
    if let Err(err) = handled {
        panic!("{err}: the container said {}", logs().await);
    }
    assert_eq!(
        wait_ok(&format!("http://127.0.0.1:{port}/healthz")).await,
        "ok\n"
    );

    // SIGTERM, as Kubernetes sends it: a clean stop well within the grace period.
    let mut stop = RUN_FLAGS.to_vec();
    stop.extend(["stop", "--time", "30", &container]);
    let stopped = podman(&stop).await;
    assert!(
        stopped.status.success(),
        "podman stop: {}",
        text(&stopped.stderr)
    );
    let exit = podman(&["inspect", "--format", "{{.State.ExitCode}}", &container]).await;
    let said = logs().await;
    assert_eq!(text(&exit.stdout).trim(), "0", "a clean exit: {said}");
    assert!(said.contains("worker stopped"), "{said}");
}
