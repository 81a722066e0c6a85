//! This project's contender for the side-by-side benchmark (`benches/sidebyside`, `OURS_CMD`).
//!
//! ```text
//! bench_worker --bootstrap-server HOST:PORT --topic T --group G --records N --concurrency C
//!              --handler noop|sleep:MS|heavy:FAST:SLOW:PCT|cpu:US|park
//!              [--latency] [--profile] [--shutdown-grace-ms MS] [--max-poll-records M] [--max-wait-ms MS] [--busy-max-wait-ms MS]
//!              [--report-every-ms MS] [--batch MAX:LINGER_MS]
//!              [--worker-threads T] [--run-as-task]
//!              [--security-protocol plaintext|ssl|sasl_plaintext|sasl_ssl]
//!              [--sasl-mechanism PLAIN|SCRAM-SHA-256|SCRAM-SHA-512] [--sasl-username U]
//!              [--sasl-password-file F | --sasl-password-env VAR] [--ca-file F]
//!              [--cert-file F --key-file F]
//! ```
//!
//! Joins group `G` on `T`, runs `C` handlers at once and ACCEPTs each record when its handler
//! finishes. With `--batch` the route is a batch route (`Route::batched`): its handler is called
//! once per batch of up to `MAX` records (sent `LINGER_MS` after its first at the latest) and a
//! `sleep:MS` handler sleeps once per call, as a bulk endpoint answers one request. Exits 0 once `N` records were handled and their acknowledgements answered, or on
//! SIGTERM / ctrl-c; prints one JSON summary line on stdout.
//!
//! The worker runs on [`source::BenchSource`], a pass-through around `KafkaSource` that counts
//! redeliveries, lock durations and renewals, and with `--latency` measures produce time → the
//! broker's answer to each ACCEPT. `park` handlers never finish: once `C` handlers are running the
//! worker prints `{"parked":C}` on stdout (the driver then reads its RSS) and waits for SIGTERM.
//!
//! `cpu:US` handlers burn `US` µs of CPU per record, synchronously, on the runtime thread that runs
//! the handler task (no await, no sleep, no `spawn_blocking`): they spin until the thread's own CPU
//! clock (`clock_gettime(CLOCK_THREAD_CPUTIME_ID)`) has advanced by `US` µs, so time the thread is
//! preempted does not count. The Java contenders' `cpu:US` is the same loop on
//! `ThreadMXBean.getCurrentThreadCpuTime()`. That clock has no vDSO fast path, so most of the burn
//! is system time spent reading it (in both contenders).
//!
//! `--worker-threads T` builds the tokio multi-thread runtime with `T` worker threads; without it the
//! runtime is what `#[tokio::main]` builds (one worker thread per core, or `TOKIO_WORKER_THREADS`).
//! The summary's `worker_threads` is the count the runtime runs with. Like `#[tokio::main]`, the
//! worker's own future (and with it the dispatcher, which `Worker::run` polls inline) runs on the
//! main thread inside `block_on`, so the process works on T + 1 threads; `--run-as-task` runs it as
//! a task on the runtime (`tokio::spawn(worker.run())`) instead, so every thread that works is one
//! of the T runtime threads.
//!
//! `--security-protocol` secures every connection of the worker's source (`KafkaSource`) as
//! `worker_core::security::Security` does: TLS trusting `--ca-file` (default: the system roots),
//! with `--cert-file`/`--key-file` for mutual TLS, and SASL with `--sasl-mechanism` (default
//! SCRAM-SHA-512) as `--sasl-username`. The password never goes on the command line (the
//! side-by-side driver logs command lines): it is read from `--sasl-password-file` or from the
//! environment variable named by `--sasl-password-env`.

mod source;

/// The allocator the `share-worker` binary uses (see `worker-cli/src/main.rs`).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use std::io::Write;

use nix::time::ClockId;
use tower::service_fn;
use worker_core::kafka::KafkaSource;
use worker_core::security::{Protocol, SaslConfig, ScramMechanism, Secret, Security, TlsConfig};
use worker_core::{Batch, Job, Outcome, Route, Worker};

use source::{BenchSource, Observed};

/// What each handler does.
#[derive(Clone, Copy, Debug)]
enum Handler {
    Noop,
    Sleep(Duration),
    /// Never finishes (until shutdown cancels it): records stay in flight.
    Park,
    /// `pct` % of records (chosen by [`is_slow`]) take `slow`, the rest `fast`.
    Heavy {
        fast: Duration,
        slow: Duration,
        pct: u64,
    },
    /// Burns this much of the handler thread's CPU time per record, synchronously ([`burn_cpu`]).
    Cpu(Duration),
}

impl Handler {
    fn parse(spec: &str) -> Result<Self, String> {
        let parts: Vec<&str> = spec.split(':').collect();
        let ms = |s: &str| {
            s.parse::<u64>()
                .map(Duration::from_millis)
                .map_err(|_| format!("--handler {spec}: {s:?} is not a number of milliseconds"))
        };
        match parts.as_slice() {
            ["noop"] => Ok(Handler::Noop),
            ["park"] => Ok(Handler::Park),
            ["sleep", delay] => Ok(Handler::Sleep(ms(delay)?)),
            ["cpu", us] => Ok(Handler::Cpu(Duration::from_micros(us.parse().map_err(
                |_| format!("--handler {spec}: {us:?} is not a number of microseconds"),
            )?))),
            ["heavy", fast, slow, pct] => Ok(Handler::Heavy {
                fast: ms(fast)?,
                slow: ms(slow)?,
                pct: pct
                    .parse()
                    .map_err(|_| format!("--handler {spec}: bad percentage {pct:?}"))?,
            }),
            _ => Err(format!(
                "--handler {spec}: expected noop, sleep:MS, heavy:FAST:SLOW:PCT, cpu:US or park"
            )),
        }
    }

    fn delay(self, partition: i32, offset: i64) -> Option<Duration> {
        match self {
            Handler::Noop => None,
            Handler::Park | Handler::Cpu(_) => None,
            Handler::Sleep(delay) => Some(delay),
            Handler::Heavy { fast, slow, pct } => Some(if is_slow(partition, offset, pct) {
                slow
            } else {
                fast
            }),
        }
    }
}

/// This thread's CPU time so far (`clock_gettime(CLOCK_THREAD_CPUTIME_ID)`).
fn thread_cpu_time() -> Duration {
    ClockId::CLOCK_THREAD_CPUTIME_ID
        .now()
        .expect("CLOCK_THREAD_CPUTIME_ID is available on Linux")
        .into()
}

/// The `cpu:US` handler's work: spins until this thread's CPU clock has advanced by `cpu`. The
/// thread is busy (in user space and in the clock's system call) the whole time; time it spends
/// preempted does not count, so every record costs the same CPU whatever else runs.
fn burn_cpu(cpu: Duration) {
    let start = thread_cpu_time();
    while thread_cpu_time().saturating_sub(start) < cpu {
        std::hint::spin_loop();
    }
}

/// The benchmark's shared choice of slow records: a SplitMix64 finaliser of (partition, offset),
/// identical to the Java contenders' so every contender gets the same slow records.
fn is_slow(partition: i32, offset: i64, pct: u64) -> bool {
    let mut z = (offset as u64)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(partition as i64 as u64);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    z % 100 < pct
}

#[derive(Debug)]
struct Args {
    bootstrap: String,
    topic: String,
    group: String,
    records: u64,
    concurrency: usize,
    handler: Handler,
    latency: bool,
    profile: bool,
    shutdown_grace: Option<Duration>,
    /// Default: the concurrency.
    max_poll_records: Option<u32>,
    /// Default: the source's (500 ms).
    max_wait: Option<Duration>,
    busy_max_wait: Option<Duration>,
    /// Print `{"t_ms":..,"handled":..}` this often (process start → now, records handled so far).
    report_every: Option<Duration>,
    /// Tokio runtime worker threads. Default: tokio's (one per core).
    worker_threads: Option<usize>,
    /// Run the worker as a task on the runtime rather than on the main thread in `block_on`.
    run_as_task: bool,
    /// A batch route: (max, linger).
    batch: Option<(usize, Duration)>,
    security: SecurityArgs,
}

/// Where the SASL password comes from: never the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
enum PasswordFrom {
    File(String),
    Env(String),
}

/// `--security-protocol` and its companions, as given (checked by [`SecurityArgs::security`]).
#[derive(Debug, Default)]
struct SecurityArgs {
    protocol: Option<String>,
    mechanism: Option<String>,
    username: Option<String>,
    password: Option<PasswordFrom>,
    ca_file: Option<String>,
    cert_file: Option<String>,
    key_file: Option<String>,
}

impl SecurityArgs {
    /// The worker's [`Security`]; an error says which flag is missing or out of place.
    fn security(&self) -> Result<Security, String> {
        let protocol = match self.protocol.as_deref().unwrap_or("plaintext") {
            "plaintext" | "PLAINTEXT" => Protocol::Plaintext,
            "ssl" | "SSL" => Protocol::Ssl,
            "sasl_plaintext" | "SASL_PLAINTEXT" => Protocol::SaslPlaintext,
            "sasl_ssl" | "SASL_SSL" => Protocol::SaslSsl,
            other => {
                return Err(format!(
                    "--security-protocol {other}: expected plaintext, ssl, sasl_plaintext or sasl_ssl"
                ));
            }
        };
        let tls_flags =
            self.ca_file.is_some() || self.cert_file.is_some() || self.key_file.is_some();
        let sasl_flags =
            self.mechanism.is_some() || self.username.is_some() || self.password.is_some();
        let uses_tls = matches!(protocol, Protocol::Ssl | Protocol::SaslSsl);
        let uses_sasl = matches!(protocol, Protocol::SaslPlaintext | Protocol::SaslSsl);
        if tls_flags && !uses_tls {
            return Err(format!(
                "--ca-file/--cert-file/--key-file need --security-protocol ssl or sasl_ssl, not {protocol}"
            ));
        }
        if sasl_flags && !uses_sasl {
            return Err(format!(
                "--sasl-* need --security-protocol sasl_plaintext or sasl_ssl, not {protocol}"
            ));
        }
        let tls = || -> Result<TlsConfig, String> {
            let tls = match &self.ca_file {
                Some(ca) => TlsConfig::ca_file(ca),
                None => TlsConfig::system_roots(),
            };
            match (&self.cert_file, &self.key_file) {
                (Some(cert), Some(key)) => Ok(tls.client_cert(cert, key)),
                (None, None) => Ok(tls),
                _ => Err("--cert-file and --key-file go together".to_owned()),
            }
        };
        let sasl = || -> Result<SaslConfig, String> {
            let username = self
                .username
                .clone()
                .ok_or("--sasl-username is required with SASL")?;
            let password = match &self.password {
                Some(PasswordFrom::File(path)) => Secret::from_file(path),
                Some(PasswordFrom::Env(name)) => Secret::from_env(name),
                None => {
                    return Err(
                        "--sasl-password-file or --sasl-password-env is required with SASL".into(),
                    );
                }
            }
            .map_err(|err| err.to_string())?;
            match self.mechanism.as_deref().unwrap_or("SCRAM-SHA-512") {
                "PLAIN" => Ok(SaslConfig::plain(username, password)),
                "SCRAM-SHA-256" => Ok(SaslConfig::scram(
                    ScramMechanism::Sha256,
                    username,
                    password,
                )),
                "SCRAM-SHA-512" => Ok(SaslConfig::scram(
                    ScramMechanism::Sha512,
                    username,
                    password,
                )),
                other => Err(format!(
                    "--sasl-mechanism {other}: expected PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"
                )),
            }
        };
        Ok(match protocol {
            Protocol::Ssl => Security::ssl(tls()?),
            Protocol::SaslPlaintext => Security::sasl_plaintext(sasl()?),
            Protocol::SaslSsl => Security::sasl_ssl(sasl()?, tls()?),
            _ => Security::plaintext(),
        })
    }
}

fn parse_args() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let (mut bootstrap, mut topic, mut group) = (None, None, None);
    let (mut records, mut concurrency, mut handler) = (None, 500, Handler::Noop);
    let (mut latency, mut shutdown_grace, mut profile) = (false, None, false);
    let (mut max_poll_records, mut max_wait, mut worker_threads) = (None, None, None);
    let (mut busy_max_wait, mut report_every) = (None, None);
    let mut run_as_task = false;
    let mut batch = None;
    let mut security = SecurityArgs::default();
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--bootstrap-server" => bootstrap = Some(value()?),
            "--topic" => topic = Some(value()?),
            "--group" => group = Some(value()?),
            "--records" => {
                records = Some(
                    value()?
                        .parse()
                        .map_err(|_| "--records: expected a count")?,
                )
            }
            "--concurrency" => {
                concurrency = value()?
                    .parse()
                    .map_err(|_| "--concurrency: expected a count")?
            }
            "--handler" => handler = Handler::parse(&value()?)?,
            "--latency" => latency = true,
            "--profile" => profile = true,
            "--max-poll-records" => {
                max_poll_records = Some(
                    value()?
                        .parse()
                        .map_err(|_| "--max-poll-records: expected a count")?,
                )
            }
            "--report-every-ms" => {
                report_every = Some(Duration::from_millis(
                    value()?
                        .parse()
                        .map_err(|_| "--report-every-ms: expected milliseconds")?,
                ));
            }
            "--busy-max-wait-ms" => {
                busy_max_wait = Some(Duration::from_millis(
                    value()?
                        .parse()
                        .map_err(|_| "--busy-max-wait-ms: expected milliseconds")?,
                ));
            }
            "--max-wait-ms" => {
                max_wait = Some(Duration::from_millis(
                    value()?
                        .parse()
                        .map_err(|_| "--max-wait-ms: expected milliseconds")?,
                ))
            }
            "--worker-threads" => {
                worker_threads = Some(
                    value()?
                        .parse::<usize>()
                        .ok()
                        .filter(|&n| n > 0)
                        .ok_or("--worker-threads: expected a count > 0")?,
                )
            }
            "--run-as-task" => run_as_task = true,
            "--batch" => {
                let text = value()?;
                let parsed = text.split_once(':').and_then(|(max, linger)| {
                    Some((
                        max.parse().ok()?,
                        Duration::from_millis(linger.parse().ok()?),
                    ))
                });
                batch = Some(parsed.ok_or("--batch: expected MAX:LINGER_MS")?);
            }
            "--security-protocol" => security.protocol = Some(value()?),
            "--sasl-mechanism" => security.mechanism = Some(value()?),
            "--sasl-username" => security.username = Some(value()?),
            "--sasl-password-file" => security.password = Some(PasswordFrom::File(value()?)),
            "--sasl-password-env" => security.password = Some(PasswordFrom::Env(value()?)),
            "--ca-file" => security.ca_file = Some(value()?),
            "--cert-file" => security.cert_file = Some(value()?),
            "--key-file" => security.key_file = Some(value()?),
            "--shutdown-grace-ms" => {
                shutdown_grace = Some(Duration::from_millis(
                    value()?
                        .parse()
                        .map_err(|_| "--shutdown-grace-ms: expected milliseconds")?,
                ))
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(Args {
        bootstrap: bootstrap.ok_or("--bootstrap-server is required")?,
        topic: topic.ok_or("--topic is required")?,
        group: group.ok_or("--group is required")?,
        records: records.ok_or("--records is required")?,
        concurrency,
        handler,
        latency,
        profile,
        shutdown_grace,
        max_poll_records,
        max_wait,
        busy_max_wait,
        report_every,
        worker_threads,
        run_as_task,
        batch,
        security,
    })
}

/// When the process started (the first thing `main` does), for `first_handler_ms`.
static PROCESS_START: OnceLock<Instant> = OnceLock::new();

fn main() {
    PROCESS_START.get_or_init(Instant::now);
    let args = match parse_args() {
        Ok(args) => args,
        Err(err) => {
            eprintln!("bench_worker: {err}");
            std::process::exit(2);
        }
    };
    // What `#[tokio::main]` builds, with `--worker-threads` on top.
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.enable_all();
    if let Some(threads) = args.worker_threads {
        runtime.worker_threads(threads);
    }
    let runtime = match runtime.build() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("bench_worker: cannot start the tokio runtime: {err}");
            std::process::exit(1);
        }
    };
    let result = if args.run_as_task {
        runtime.block_on(async {
            tokio::spawn(run(args))
                .await
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic.into_panic()))
        })
    } else {
        runtime.block_on(run(args))
    };
    if let Err(err) = result {
        eprintln!("bench_worker: {err}");
        std::process::exit(1);
    }
}

async fn run(args: Args) -> worker_core::Result<()> {
    let started = Instant::now();
    let security = args
        .security
        .security()
        .map_err(|err| worker_core::Error::new(worker_core::ErrorKind::Config, err))?;
    let protocol = security.protocol();
    let mut kafka = KafkaSource::builder(&args.bootstrap, &args.group)
        .topic(&args.topic)
        .client_id("bench-worker")
        .security(security);
    if let Some(max_wait) = args.max_wait {
        kafka = kafka.max_wait(max_wait);
    }
    if let Some(wait) = args.busy_max_wait {
        kafka = kafka.busy_max_wait(wait);
    }
    let kafka = kafka.build().await?;
    let observed = Observed::new(args.latency, args.profile);
    let source = BenchSource::new(kafka, observed.clone());
    let handled = Arc::new(AtomicU64::new(0));
    let running = Arc::new(AtomicU64::new(0));
    let (counter, starts) = (handled.clone(), running.clone());
    // Process start → the first handler call: the start-up figure.
    let first_call = Arc::new(OnceLock::<Duration>::new());
    let first = first_call.clone();
    let handler = args.handler;
    let park = matches!(handler, Handler::Park);
    let route = match args.batch {
        None => Route::new(
            args.topic.as_str(),
            service_fn(move |job: Job| {
                let delay = handler.delay(job.id().partition, job.id().offset);
                let counter = counter.clone();
                first.get_or_init(|| PROCESS_START.get().map_or(Duration::ZERO, Instant::elapsed));
                starts.fetch_add(1, Ordering::Relaxed);
                async move {
                    if park {
                        std::future::pending::<()>().await;
                    }
                    if let Handler::Cpu(cpu) = handler {
                        // Here, in the handler's task, not in `service_fn`'s closure: the closure
                        // runs on the dispatcher.
                        burn_cpu(cpu);
                    }
                    if let Some(delay) = delay {
                        tokio::time::sleep(delay).await;
                    }
                    counter.fetch_add(1, Ordering::Relaxed);
                    Ok::<_, Infallible>(Outcome::Accept)
                }
            }),
        ),
        Some((max, linger)) => Route::batched(
            args.topic.as_str(),
            Batch::new(max, linger),
            service_fn(move |jobs: Vec<Job>| {
                let delay = jobs
                    .first()
                    .and_then(|job| handler.delay(job.id().partition, job.id().offset));
                let counter = counter.clone();
                first.get_or_init(|| PROCESS_START.get().map_or(Duration::ZERO, Instant::elapsed));
                starts.fetch_add(jobs.len() as u64, Ordering::Relaxed);
                async move {
                    if let Some(delay) = delay {
                        tokio::time::sleep(delay).await;
                    }
                    counter.fetch_add(jobs.len() as u64, Ordering::Relaxed);
                    Ok::<_, Infallible>(vec![Outcome::Accept; jobs.len()])
                }
            }),
        ),
    };
    let mut builder = Worker::builder(source)
        .add_route(route)
        .concurrency(args.concurrency)
        .max_poll_records(
            args.max_poll_records
                .unwrap_or(args.concurrency.min(u32::MAX as usize) as u32),
        );
    if let Some(grace) = args.shutdown_grace {
        builder = builder.shutdown_grace(grace);
    }
    let worker = builder.build()?;

    let shutdown = worker.shutdown_handle();
    let target = args.records;
    let parked = matches!(handler, Handler::Park).then_some(args.concurrency as u64);
    let report_every = args.report_every;
    let watcher = tokio::spawn(async move {
        let mut reported = false;
        let mut next_report = report_every.map(|every| Instant::now() + every);
        loop {
            if let (Some(at), Some(every)) = (next_report, report_every)
                && Instant::now() >= at
            {
                let t_ms = PROCESS_START.get().map_or(0, |s| s.elapsed().as_millis());
                let mut out = std::io::stdout().lock();
                let _ = writeln!(
                    out,
                    "{{\"t_ms\":{t_ms},\"handled\":{}}}",
                    handled.load(Ordering::Relaxed)
                );
                let _ = out.flush();
                next_report = Some(at + every);
            }
            if let Some(parked) = parked {
                if !reported && running.load(Ordering::Relaxed) >= parked {
                    // The driver reads our RSS when it sees this line.
                    let mut out = std::io::stdout().lock();
                    let _ = writeln!(out, "{{\"parked\":{parked}}}");
                    let _ = out.flush();
                    reported = true;
                }
            } else if handled.load(Ordering::Relaxed) >= target {
                shutdown.shutdown();
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    let summary = worker.run_until_signal().await?;
    watcher.abort();
    let elapsed = started.elapsed().as_secs_f64();
    let worker_threads = tokio::runtime::Handle::current().metrics().num_workers();
    let min_lock = observed.min_lock_ms.load(Ordering::Relaxed);
    println!(
        "{{\"contender\":\"share-worker\",\"worker_threads\":{worker_threads},\"run_as_task\":{},\"security_protocol\":\"{protocol}\",\"records\":{},\"accepted\":{},\"elapsed_s\":{elapsed:.3},\"records_per_s\":{:.1},\"renewals\":{},\"renewal_failures\":{},\"renew_span_s\":{:.3},\"ack_failures\":{},\"fetched\":{},\"redelivered\":{},\"max_delivery_count\":{},\"lock_ms\":[{},{}],\"released_on_shutdown\":{},\"first_handler_ms\":{},\"latency_basis\":\"record timestamp to the broker's answer to the ACCEPT\",\"latency_ms\":{},\"profile\":{}}}",
        args.run_as_task,
        args.records,
        summary.accepted,
        summary.accepted as f64 / elapsed.max(1e-9),
        summary.renewals,
        summary.renewal_failures,
        observed.renew_span_s(),
        summary.ack_failures.total(),
        observed.fetched.load(Ordering::Relaxed),
        observed.redelivered.load(Ordering::Relaxed),
        observed.max_delivery_count.load(Ordering::Relaxed),
        if min_lock == u64::MAX { 0 } else { min_lock },
        observed.max_lock_ms.load(Ordering::Relaxed),
        summary.released_on_shutdown,
        first_call.get().map_or_else(
            || "null".to_owned(),
            |d| format!("{:.1}", d.as_secs_f64() * 1000.0)
        ),
        observed.latency_json(),
        observed.profile_json(),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_records_are_about_pct_percent() {
        let slow = (0..10_000).filter(|&o| is_slow(0, o, 5)).count();
        assert!((400..600).contains(&slow), "{slow}");
    }

    #[test]
    fn cpu_handler_burns_this_threads_cpu_time() {
        let (wall, cpu) = (Instant::now(), thread_cpu_time());
        burn_cpu(Duration::from_millis(20));
        let burnt = thread_cpu_time() - cpu;
        assert!(burnt >= Duration::from_millis(20), "{burnt:?}");
        assert!(wall.elapsed() >= burnt);
    }

    #[test]
    fn handler_specs_parse() {
        assert!(matches!(Handler::parse("noop"), Ok(Handler::Noop)));
        assert!(
            matches!(Handler::parse("sleep:50"), Ok(Handler::Sleep(d)) if d == Duration::from_millis(50))
        );
        assert!(matches!(
            Handler::parse("heavy:20:2000:5"),
            Ok(Handler::Heavy { pct: 5, .. })
        ));
        assert!(
            matches!(Handler::parse("cpu:200"), Ok(Handler::Cpu(d)) if d == Duration::from_micros(200))
        );
        assert!(Handler::parse("cpu:x").is_err());
        assert!(Handler::parse("sleep").is_err());
        assert!(Handler::parse("heavy:1:x:5").is_err());
    }

    #[test]
    fn security_flags_make_the_setting() {
        assert_eq!(
            SecurityArgs::default().security().unwrap().protocol(),
            Protocol::Plaintext
        );
        let dir = std::env::temp_dir().join(format!("bench-worker-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let password = dir.join("password");
        std::fs::write(&password, "secret\n").unwrap();
        let sasl_ssl = SecurityArgs {
            protocol: Some("sasl_ssl".into()),
            username: Some("worker".into()),
            password: Some(PasswordFrom::File(password.display().to_string())),
            ca_file: Some("/ca.pem".into()),
            ..SecurityArgs::default()
        }
        .security()
        .unwrap();
        assert_eq!(sasl_ssl.protocol(), Protocol::SaslSsl);
        let sasl = sasl_ssl.sasl().unwrap();
        assert_eq!(sasl.mechanism_name(), "SCRAM-SHA-512");
        assert_eq!(sasl.username(), Some("worker"));
        assert_eq!(
            sasl_ssl.tls().unwrap().ca_path(),
            Some(std::path::Path::new("/ca.pem"))
        );
        // The password's origin is required, and flags must fit the protocol.
        let no_password = SecurityArgs {
            protocol: Some("sasl_ssl".into()),
            username: Some("worker".into()),
            ..SecurityArgs::default()
        };
        assert!(no_password.security().is_err());
        let ca_on_plaintext = SecurityArgs {
            ca_file: Some("/ca.pem".into()),
            ..SecurityArgs::default()
        };
        assert!(ca_on_plaintext.security().is_err());
        let bad_mechanism = SecurityArgs {
            protocol: Some("sasl_plaintext".into()),
            mechanism: Some("GSSAPI".into()),
            username: Some("worker".into()),
            password: Some(PasswordFrom::File(password.display().to_string())),
            ..SecurityArgs::default()
        };
        assert!(bad_mechanism.security().is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
