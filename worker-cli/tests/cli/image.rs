//! The container image: the repository's Dockerfile built with podman — its runtime stage on a
//! base image made from Debian's packages (`deploy/base-image.sh`, named by
//! `SHARE_WORKER_BASE_IMAGE`), the binary this test run built standing in for the Rust build stage
//! (no Rust image can be pulled here) — then run against the local broker with a mounted TOML
//! file: it runs as a non-root user, processes records, answers `/healthz`, stops cleanly on
//! SIGTERM, and its PID 1 reaps the orphans that exec handlers' commands leave behind.

use std::time::Duration;

use tokio::process::Command;

use crate::fake_http::Endpoint;
use crate::support::*;
use crate::telemetry::{metric, parse_prometheus};

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

/// `podman` with the runtime flags first, for the commands that reach a container.
async fn podman_runtime(args: &[&str]) -> std::process::Output {
    let mut all = RUN_FLAGS.to_vec();
    all.extend(args);
    podman(&all).await
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

/// A container of the image, built for one test and run with `config` mounted as the worker's
/// TOML file on the host's network; the container and the image are removed when it is dropped.
struct Container {
    name: String,
    image: String,
    _cleanup: Cleanup,
}

impl Container {
    async fn start(scratch: &Scratch, config: &str) -> Self {
        let base = std::env::var("SHARE_WORKER_BASE_IMAGE").expect(
            "SHARE_WORKER_BASE_IMAGE names the base image (scripts/test.sh makes it with deploy/base-image.sh)",
        );
        let cfg = scratch.write("worker.toml", config);
        let cfg = cfg.to_str().expect("utf-8 path");

        // The build stage's output, `/out/share-worker`, from this run's binary.
        let context = scratch.0.join("build");
        std::fs::create_dir_all(context.join("out")).expect("the build context");
        std::fs::copy(BIN, context.join("out/share-worker")).expect("the binary");
        let image = format!("localhost/{}:test", unique("share-worker"));
        let name = unique("share-worker");
        let cleanup = Cleanup {
            container: name.clone(),
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

        let mount = format!("{cfg}:/etc/share-worker/worker.toml:ro");
        let started = podman_runtime(&[
            "run",
            "--detach",
            "--name",
            &name,
            "--network",
            "host",
            "--ulimit",
            "nofile=1000:1000",
            "--ulimit",
            "nproc=1000:1000",
            "--volume",
            &mount,
            &image,
        ])
        .await;
        assert!(
            started.status.success(),
            "podman run: {}",
            text(&started.stderr)
        );
        Self {
            name,
            image,
            _cleanup: cleanup,
        }
    }

    /// What the container wrote to stdout and stderr so far.
    async fn logs(&self) -> String {
        let out = podman(&["logs", &self.name]).await;
        format!("{}{}", text(&out.stdout), text(&out.stderr))
    }

    /// SIGTERM, as Kubernetes sends it: asserts a clean stop well within the grace period.
    async fn stop_cleanly(&self) {
        let stopped = podman_runtime(&["stop", "--time", "30", &self.name]).await;
        assert!(
            stopped.status.success(),
            "podman stop: {}",
            text(&stopped.stderr)
        );
        let exit = podman(&["inspect", "--format", "{{.State.ExitCode}}", &self.name]).await;
        let said = self.logs().await;
        assert_eq!(text(&exit.stdout).trim(), "0", "a clean exit: {said}");
        assert!(said.contains("worker stopped"), "{said}");
    }

    /// Every process of the container, from its `/proc/<pid>/stat` (the image has no `ps`).
    async fn processes(&self) -> Vec<Process> {
        let out = podman_runtime(&[
            "exec",
            &self.name,
            "/bin/sh",
            "-c",
            // A process may exit between the glob and its read: its file is then skipped.
            "cat /proc/[0-9]*/stat 2>/dev/null; true",
        ])
        .await;
        assert!(out.status.success(), "podman exec: {}", text(&out.stderr));
        text(&out.stdout)
            .lines()
            .filter_map(Process::parse)
            .collect()
    }
}

/// One line of `/proc/<pid>/stat`: `pid (comm) state ppid …`.
struct Process {
    pid: u32,
    comm: String,
    state: char,
    ppid: u32,
}

impl Process {
    fn parse(line: &str) -> Option<Self> {
        let (pid, rest) = line.split_once(" (")?;
        // comm may hold spaces and parentheses itself: it ends at the last ')'.
        let (comm, rest) = rest.rsplit_once(") ")?;
        let mut fields = rest.split(' ');
        let state = fields.next()?.chars().next()?;
        let ppid = fields.next()?.parse().ok()?;
        Some(Self {
            pid: pid.parse().ok()?,
            comm: comm.to_owned(),
            state,
            ppid,
        })
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_image_runs_a_worker_and_stops_cleanly_on_sigterm() {
    let scratch = Scratch::new();
    let topic = unique("image");
    let group = unique("image-group");
    let endpoint = Endpoint::start().await;
    let port = reserve_port();
    let config = config(&group, &topic, &endpoint.route()).replace(
        "[dlq]",
        &format!("[telemetry]\nlisten = \"127.0.0.1:{port}\"\n\n[dlq]"),
    );
    let setup_cfg = scratch.write("setup.toml", &config);
    let setup_cfg = setup_cfg.to_str().expect("utf-8 path");
    assert_ok(
        &share_worker(&["setup", "--config", setup_cfg, "--partitions", "2"], &[]).await,
        "setup",
    );

    let container = Container::start(&scratch, &config).await;
    let user = podman(&[
        "image",
        "inspect",
        "--format",
        "{{.Config.User}}",
        &container.image,
    ])
    .await;
    assert_eq!(text(&user.stdout).trim(), "10001:10001", "a non-root user");

    let values: Vec<String> = (0..20).map(|i| format!("ok-{i}")).collect();
    let producer = tests::producer(&[]).expect("a producer");
    tests::produce(&producer, &topic, None, &values)
        .await
        .expect("producing");
    let handled = tests::wait_for("the records handled", Duration::from_secs(60), async || {
        let bodies: std::collections::HashSet<String> = endpoint.bodies().into_iter().collect();
        Ok(values.iter().all(|v| bodies.contains(v)))
    })
    .await;
    if let Err(err) = handled {
        panic!("{err}: the container said {}", container.logs().await);
    }
    assert_eq!(
        wait_ok(&format!("http://127.0.0.1:{port}/healthz")).await,
        "ok\n"
    );
    container.stop_cleanly().await;
}

/// An exec handler whose command starts a background process and exits: the background process
/// is orphaned, reparented to the container's PID 1 and killed with the command's process group.
/// A hundred such jobs leave no zombie behind: PID 1 reaps them.
#[tokio::test(flavor = "multi_thread")]
async fn the_image_reaps_what_exec_handlers_leave_behind() {
    const JOBS: usize = 100;
    let scratch = Scratch::new();
    let topic = unique("image-reap");
    let group = unique("image-reap-group");
    let port = reserve_port();
    let route = r#"handler = "exec"
command = ["/bin/sh", "-c", "(/bin/sleep 0.1 &); exit 0"]"#;
    let config = config(&group, &topic, route).replace(
        "[dlq]",
        &format!("[telemetry]\nlisten = \"127.0.0.1:{port}\"\n\n[dlq]"),
    );
    let setup_cfg = scratch.write("setup.toml", &config);
    let setup_cfg = setup_cfg.to_str().expect("utf-8 path");
    assert_ok(
        &share_worker(&["setup", "--config", setup_cfg, "--partitions", "2"], &[]).await,
        "setup",
    );
    let container = Container::start(&scratch, &config).await;

    let values: Vec<String> = (0..JOBS).map(|i| format!("job-{i}")).collect();
    let producer = tests::producer(&[]).expect("a producer");
    tests::produce(&producer, &topic, None, &values)
        .await
        .expect("producing");
    let metrics = format!("http://127.0.0.1:{port}/metrics");
    let accepted = tests::wait_for("every job accepted", Duration::from_secs(60), async || {
        let Some((200, body)) = get(&metrics).await else {
            return Ok(false);
        };
        let samples = parse_prometheus(&body);
        let done = metric(
            &samples,
            "share_worker_records_completed_total",
            &[("topic", &topic), ("outcome", "accept")],
        );
        Ok(done == Some(JOBS as f64))
    })
    .await;
    if let Err(err) = accepted {
        panic!("{err}: the container said {}", container.logs().await);
    }

    // Reaping follows each orphan's death by at most a scheduling delay: wait for it, bounded.
    let mut zombies = Vec::new();
    let reaped = tests::wait_for("no zombie left", Duration::from_secs(10), async || {
        zombies = container
            .processes()
            .await
            .into_iter()
            .filter(|p| p.state == 'Z')
            .collect();
        Ok(zombies.is_empty())
    })
    .await;
    if let Err(err) = reaped {
        let some: Vec<String> = zombies
            .iter()
            .take(5)
            .map(|p| format!("pid {} ({}) child of {}", p.pid, p.comm, p.ppid))
            .collect();
        panic!("{err}: {} zombies, e.g. {some:?}", zombies.len());
    }
    container.stop_cleanly().await;
}
