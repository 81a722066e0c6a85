#!/usr/bin/env python3
"""Side-by-side share-consumer benchmark against the local broker (issue 9, BENCHMARKS.md).

Every contender consumes the same pre-filled topic with its own fresh share group
(share.auto.offset.reset=earliest). Completion is judged by the broker: the run ends when the
group's lag is 0 on every partition (Admin listShareGroupOffsets, the call behind
`ShareGroupCommand --describe --offsets`, which also checks every group once at the end).
Wall time runs from the contender's spawn to lag 0; CPU seconds and peak RSS come from the
contender's rusage (wait4), so they cover the whole process tree the driver waited for.

Usage: benches/sidebyside/run.sh [--quick] [--runs N] [--only SUBSTRING|SECTION] [--out FILE] [--keep]
Environment: OURS_CMD (our worker; see README.md) and OURS_NAME (its label in the table);
KAFKA_VERSION (default 4.2.2: the clients and tools; the broker at BOOTSTRAP is assumed to run it);
BOOTSTRAP (default 127.0.0.1:9092); JAVA_OPTS (contender JVMs; default -Xms64m -Xmx512m);
KAFKA_CACHE (where scripts/kafka.sh keeps the broker's jars and TLS files). The TLS rows read the
SASL_SSL listener, the CA file, the user and the client properties file from `scripts/kafka.sh env`.
Python 3 standard library only.
"""

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
KAFKA_SH = os.path.join(REPO, "scripts", "kafka.sh")
JAVA_DIR = os.path.join(REPO, "benches", "java")

# Broker limits the slow-handler efficiency is measured against (PROTOCOL.md §6, 4.2 defaults).
MAX_RECORD_LOCKS = 2000


@dataclass(frozen=True)
class Topic:
    partitions: int
    record_size: int
    records: int

    @property
    def key(self):
        return f"p{self.partitions}-{self.record_size}b-{self.records}"


@dataclass(frozen=True)
class Contender:
    """One way of consuming: how to start it for a scenario, and what it is."""

    name: str
    ack: str  # "explicit, per record" / "implicit"
    kind: str  # "java-explicit" | "share-perf" | "ours"
    threads: int = 1
    max_poll_records: int = 500
    acquire_mode: str = ""  # "" = the client's default (batch_optimized)
    # Stop after this many seconds even without lag 0; the rate then comes from the broker's lag
    # drop (first reported lag -> last lag) over that window. 0 = run to lag 0.
    window_s: float = 0.0
    extra: tuple = ()  # more arguments for this contender's command line
    # "plaintext" = BOOTSTRAP; "sasl_ssl" = the broker's SASL_SSL listener with SCRAM-SHA-512 and the
    # test CA (from `scripts/kafka.sh env`). The judge and the pre-fill stay on plaintext.
    security: str = "plaintext"
    # For kind "ours": a command other than OURS_CMD (e.g. an earlier build, OURS_BEFORE_CMD).
    command: str = ""


@dataclass
class Scenario:
    section: str  # "noop" | "tls" | "slow" | "heavy" | "batch" | "cpu" | "latency" | "rss" | "startup" | "scale" | "renew"
    name: str
    topic: Topic
    handler: str
    concurrency: int  # what our worker is given; Java: threads x max.poll.records
    latency_ms: float  # mean handler latency, for the slow-handler limit
    contenders: list
    topic_name: str = ""
    group_configs: tuple = ()  # (key, value) pairs set on each run's group before it starts
    rate: int = 0  # latency: records/s produced while the contender runs
    seconds: int = 0  # latency: for how long
    cluster: bool = False  # runs only with --only cluster, against a 3-broker BOOTSTRAP
    processes: int = 1  # scale: worker processes in the one group
    join_after_s: float = 0.0  # scale: the last process starts this long after the others (0: all at once)
    window_s: float = 0.0  # scale: measure the broker's lag drop over this long


@dataclass
class Result:
    scenario: str
    contender: str
    run: int
    warmup: bool
    records: int
    wall_s: float = float("nan")
    cpu_s: float = float("nan")
    rss_kib: int = 0
    lag_zero: bool = False
    exit_code: object = None
    signalled: bool = False
    report: dict = field(default_factory=dict)
    note: str = ""
    group: str = ""
    first_lag_s: float = float("nan")  # spawn -> the broker first reports a lag for every partition
    first_lag: object = None  # that lag
    last_lag: object = None  # windowed runs: the lag when the window ended
    last_lag_s: float = float("nan")
    rss_now_kib: int = 0  # rss: VmRSS while the handlers are parked
    # The whole machine from the broker's first lag to lag 0, the steady span (/proc): busy CPU
    # seconds of every process, the contender's own share of them, and the others that used the most.
    machine_busy_s: float = float("nan")
    own_busy_s: float = float("nan")
    others: list = field(default_factory=list)  # [(label, CPU s)], most first
    # scale: the aggregate rate over the window, and for a late joiner how long it took to carry
    # its share (see run_scale)
    window_rate: float = float("nan")
    takeup_s: float = float("nan")
    joiner_first_handler_ms: float = float("nan")


def say(msg):
    print(f"sidebyside: {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# The broker judge: one long-lived JVM (benches/java BrokerJudge) answering one JSON line per command.


class Judge:
    def __init__(self, java_cp, bootstrap):
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", "-cp", java_cp, "dev.shareworker.bench.BrokerJudge", bootstrap],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )
        ready = self._read()
        if not ready.get("ready"):
            raise SystemExit(f"broker judge did not start: {ready}")

    def _read(self):
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit("broker judge exited")
        return json.loads(line)

    def ask(self, *words):
        self.proc.stdin.write(" ".join(str(w) for w in words) + "\n")
        self.proc.stdin.flush()
        answer = self._read()
        if "error" in answer:
            raise RuntimeError(f"{' '.join(map(str, words))}: {answer['error']}")
        return answer

    def close(self):
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=15)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


# ---------------------------------------------------------------------------------------------
# Scenarios


def scenarios(quick):
    java1 = Contender("Java explicit-ack loop", "explicit, per record", "java-explicit")
    perf = Contender("Kafka ShareConsumerPerformance", "implicit (lighter contract)", "share-perf")
    ours = Contender(os.environ.get("OURS_NAME", "share-worker (ours)"), "explicit, per record", "ours")

    def java_k(n):
        # K consumers x max.poll.records = N (BENCHMARKS.md); record_limit makes max.poll.records a
        # hard cap on what each consumer holds (batch_optimized acquires whole batches).
        k, mpr = {10: (10, 1), 100: (20, 5), 1000: (50, 20)}[n]
        window = (25.0 if quick else 60.0) if n == 1000 else 0.0
        return Contender(f"Java {k} threads x {mpr} records", "explicit, per record", "java-explicit",
                         threads=k, max_poll_records=mpr, acquire_mode="record_limit", window_s=window)

    # With OURS_BEFORE_CMD, an earlier build of ours runs next to ours in the no-op, slow, latency
    # and start-up rows (and the 3-broker rows), so a change shows as before → after in one run.
    before_cmd = os.environ.get("OURS_BEFORE_CMD", "")

    def before(c, extra=()):
        if not before_cmd:
            return []
        return [Contender(os.environ.get("OURS_BEFORE_NAME", "share-worker (before)"), c.ack, "ours",
                          extra=extra, command=before_cmd)]

    out = []
    noop_counts = {100: 50_000, 1024: 20_000} if quick else {100: 500_000, 1024: 200_000}
    for size in (100, 1024):
        for parts in (1, 4):
            out.append(Scenario("noop", f"no-op, P={parts}, {size_label(size)}",
                                Topic(parts, size, noop_counts[size]), "noop", 500, 0.0,
                                [java1, perf, ours, *before(ours)]))
    # TLS: the no-op rows again, each client over plaintext and over SASL_SSL (SCRAM-SHA-512, the
    # test CA), interleaved in one round; the same topic as the P=4, 100 B no-op row.
    def secured(c):
        return Contender(f"{c.name}, SASL_SSL", c.ack, c.kind, threads=c.threads,
                         max_poll_records=c.max_poll_records, acquire_mode=c.acquire_mode,
                         extra=c.extra, security="sasl_ssl")

    def plain(c):
        return Contender(f"{c.name}, plaintext", c.ack, c.kind, threads=c.threads,
                         max_poll_records=c.max_poll_records, acquire_mode=c.acquire_mode, extra=c.extra)
    out.append(Scenario("tls", "no-op over SASL_SSL vs plaintext, P=4, 100 B", Topic(4, 100, noop_counts[100]),
                        "noop", 500, 0.0, [plain(java1), secured(java1), plain(ours), secured(ours)]))
    # Sized for the Java K-thread loops, which reach only a few % of the limit on 4.2 (see README).
    slow = {10: 200, 100: 2_000, 1000: 20_000} if quick else {10: 1_000, 100: 5_000, 1000: 60_000}
    for n, count in slow.items():
        out.append(Scenario("slow", f"sleep 50 ms, N={n}, P=4, 100 B", Topic(4, 100, count),
                            "sleep:50", n, 50.0, [java_k(n), ours, *before(ours)]))
    # A 3-broker cluster (BOOTSTRAP lists its brokers; `--only cluster` runs these rows alone,
    # and only then): 12 partitions, leaders spread over the brokers. With OURS_BEFORE_CMD an
    # earlier build of ours runs too, so a change to how the brokers are fetched from shows.
    ours_cluster = [ours, *before(ours)]
    # The Java loop sends each broker a fetch for max.poll.records (500), so on 3 brokers it holds up
    # to 1,500 records at once: ours again with as many slots.
    ours_1500 = Contender(f"{ours.name}, concurrency 1500 (the Java loop's records in flight on 3 brokers)",
                          ours.ack, "ours", extra=("--concurrency", "1500"))
    # The loop in the client's default acquisition mode (batch_optimized on 4.2: a broker may answer
    # with whole batches, past max.poll.records) and in record_limit, ours's mode.
    java1_limit = Contender(f"{java1.name}, record_limit", java1.ack, java1.kind, acquire_mode="record_limit")
    out.append(Scenario("noop", "3 brokers: no-op, P=12, 100 B", Topic(12, 100, noop_counts[100]), "noop",
                        500, 0.0, [java1, java1_limit, *ours_cluster, ours_1500], cluster=True))
    out.append(Scenario("slow", "3 brokers: sleep 50 ms, N=100, P=12, 100 B", Topic(12, 100, slow[100]),
                        "sleep:50", 100, 50.0, [java_k(100), *ours_cluster], cluster=True))
    heavy_count = 1_000 if quick else 3_000
    # A bulk endpoint that answers 10 calls at once, 20 ms each: one record per call (concurrency
    # 10) against batches of up to 100 records per call (10 batches in flight: concurrency 1,000).
    bulk_records = 5_000 if quick else 20_000
    single = Contender(f"{ours.name}, one record per call", ours.ack, "ours", extra=("--concurrency", "10"))
    batched = Contender(f"{ours.name}, batches of 100 per call (linger 20 ms)", ours.ack, "ours",
                        extra=("--concurrency", "1000", "--batch", "100:20"))
    out.append(Scenario("batch", "bulk endpoint: 10 calls at once, 20 ms per call, P=4, 100 B",
                        Topic(4, 100, bulk_records), "sleep:20", 10, 20.0, [single, batched]))
    out.append(Scenario("heavy", "heavy tail 95% 20 ms / 5% 2 s, N=100, P=4, 100 B",
                        Topic(4, 100, heavy_count), "heavy:20:2000:5", 100,
                        0.95 * 20 + 0.05 * 2000, [java_k(100), ours, *before(ours)]))

    # CPU-bound handler: 200 µs of the handler thread's CPU per record, spun synchronously on the
    # thread that runs the handler. Ours on a 1- and a 2-thread runtime (the machine's 2 cores), the
    # worker run as a task on the runtime (so the runtime's threads are all the threads that work),
    # against the Java loop with 2 threads, each its own consumer, 2 x max.poll.records = N. Two
    # concurrencies: the broker's CPU per record (which shares the 2 cores) depends on the fetch size.
    cpu_us = 200
    ours_cpu = [Contender(f"{ours.name}, {t} runtime thread{'s' if t > 1 else ''}", ours.ack, "ours", threads=t,
                          extra=("--worker-threads", str(t), "--run-as-task")) for t in (1, 2)]
    ours_cpu += [Contender(f"{b.name}, 2 runtime threads", b.ack, "ours", threads=2, extra=b.extra, command=b.command)
                 for b in before(ours, ("--worker-threads", "2", "--run-as-task"))]
    for n in (64, 500):
        java_cpu = Contender(f"Java 2 threads x {n // 2} records", "explicit, per record", "java-explicit",
                             threads=2, max_poll_records=n // 2, acquire_mode="record_limit")
        out.append(Scenario("cpu", f"CPU-bound, {cpu_us} µs of CPU per record, N={n}, P=4, 100 B",
                            Topic(4, 100, 30_000 if quick else 100_000), f"cpu:{cpu_us}", n, cpu_us / 1000,
                            [*ours_cpu, java_cpu]))

    # End-to-end latency at a fixed produce rate, below either contender's saturation: a fresh
    # empty topic per run, the contender joins, then ProducerPerformance produces at RATE for SECONDS.
    rate, secs = 2_000, (10 if quick else 60)
    java_lat = Contender("Java explicit-ack loop", "explicit, per record", "java-explicit",
                         extra=("--latency-basis", "commit"))
    ours_lat = Contender(ours.name, ours.ack, "ours", extra=("--latency",))
    out.append(Scenario("latency", f"{rate:,} records/s for {secs} s, P=4, 100 B",
                        Topic(4, 100, rate * secs), "noop", 500, 0.0,
                        [java_lat, ours_lat, *before(ours, ("--latency",))],
                        rate=rate, seconds=secs))

    # RSS per in-flight record: handlers parked, 1k and 10k records in flight, 1 KiB records.
    # 8 partitions x 1,250 records stay under group.share.partition.max.record.locks (2,000 on 4.2).
    ours_park = Contender(ours.name, ours.ack, "ours", extra=("--shutdown-grace-ms", "1000"))
    rss_topic = Topic(8, 1024, 10_000)
    for n in (1_000, 10_000):
        out.append(Scenario("rss", f"{n:,} in flight, P=8, 1 KiB", rss_topic, "park", n, 0.0, [ours_park]))

    # Start-up: process start -> the first handler call on a pre-filled topic (ours reports it as
    # first_handler_ms), a fresh group each run.
    out.append(Scenario("startup", "start-up on a pre-filled topic, P=4, 100 B", Topic(4, 100, 20_000), "noop",
                        500, 0.0, [ours, *before(ours)]))

    # Scale-out: K worker processes of ours in one share group, sleep 50 ms, concurrency 250 each,
    # 8 partitions; the aggregate rate over a window, from the broker's lag drop, as a fraction of
    # min(K x 250, 8 x max.record.locks) / 50 ms. Then a second process joining a running one: how
    # long until it carries its share.
    window = 10.0 if quick else 20.0
    scale_topic = Topic(8, 100, 300_000 if quick else 600_000)
    for k in (1, 2, 4):
        out.append(Scenario("scale", f"scale-out: {k} process{'es' if k > 1 else ''} x 250, sleep 50 ms, P=8, 100 B",
                            scale_topic, "sleep:50", 250, 50.0, [ours], processes=k, window_s=window))
    join = 6.0 if quick else 10.0
    out.append(Scenario("scale", f"scale-out: a 2nd process joins after {join:.0f} s, sleep 50 ms, P=8, 100 B",
                        scale_topic, "sleep:50", 250, 50.0, [ours], processes=2, join_after_s=join,
                        window_s=join + window))

    # RENEW: 5 s group lock, 20 s handler, a few dozen records all at once.
    renew_cs = [ours]
    if not quick:
        # The Java loop has no automatic renew: with the same handler its locks run out.
        renew_cs.insert(0, Contender("Java 40 threads x 1 record", "explicit, per record", "java-explicit",
                                     threads=40, max_poll_records=1, acquire_mode="record_limit",
                                     window_s=45.0))
    out.append(Scenario("renew", "lock 5 s, sleep 20 s, 40 records, P=4, 100 B", Topic(4, 100, 40),
                        "sleep:20000", 40, 20_000.0, renew_cs,
                        group_configs=(("share.record.lock.duration.ms", "5000"),)))
    if os.environ.get("OURS_ONLY"):
        # An A/B of two builds of ours: the Java contenders' runs would only add minutes.
        for sc in out:
            sc.contenders = [c for c in sc.contenders if c.kind == "ours"]
        out = [sc for sc in out if sc.contenders]
    return out


def size_label(size):
    return "1 KiB" if size == 1024 else f"{size} B"


# ---------------------------------------------------------------------------------------------
# Running one contender


def contender_command(c, sc, group, bootstrap, java_cp, tools_cp, java_opts, ours_cmd, secure=None):
    """The contender's command line. `secure`: the SASL_SSL settings (ctx["secure"]), for contenders
    with security "sasl_ssl". No secret goes on the command line (it is logged): the Java loop reads
    the client properties file, ours the password from the environment (`contender_env`)."""
    topic = sc.topic_name
    n = sc.topic.records
    sec_java, sec_ours = [], []
    if c.security == "sasl_ssl":
        if not secure:
            raise SystemExit(f"{c.name}: no SASL_SSL settings (scripts/kafka.sh env)")
        bootstrap = secure["KAFKA_SASL_SSL_BOOTSTRAP"]
        sec_java = ["--command-config", secure["KAFKA_CLIENT_PROPERTIES"]]
        sec_ours = ["--security-protocol", "sasl_ssl", "--sasl-mechanism", "SCRAM-SHA-512",
                    "--sasl-username", secure["KAFKA_SASL_USERNAME"],
                    "--sasl-password-env", "KAFKA_SASL_PASSWORD", "--ca-file", secure["KAFKA_TLS_CA_FILE"]]
    elif c.security != "plaintext":
        raise ValueError(c.security)
    if c.kind == "java-explicit":
        cmd = ["java", *java_opts, "-cp", java_cp, "dev.shareworker.bench.ExplicitAckLoop",
               "--bootstrap-server", bootstrap, "--topic", topic, "--group", group,
               # Run until SIGTERM: the broker, not the loop's own count, says when all is acked
               # (a loop that stops at N handled records can leave records whose acks were lost).
               "--records", "0", "--threads", str(c.threads),
               "--max-poll-records", str(c.max_poll_records), "--handler", sc.handler,
               "--label", c.name]
        if c.acquire_mode:
            cmd += ["--acquire-mode", c.acquire_mode]
        return cmd + sec_java + list(c.extra)
    if c.kind == "share-perf":
        return ["java", *java_opts, "-cp", tools_cp, "org.apache.kafka.tools.ShareConsumerPerformance",
                "--bootstrap-server", bootstrap, "--topic", topic, "--group", group,
                "--num-records", str(n), "--timeout", "30000"]
    if c.kind == "ours":
        return [*shlex.split(c.command or ours_cmd), "--bootstrap-server", bootstrap, "--topic", topic,
                "--group", group, "--records", str(n), "--concurrency", str(sc.concurrency),
                "--handler", sc.handler, *sec_ours, *c.extra]
    raise ValueError(c.kind)


def contender_env(c, ctx):
    """The contender's environment: the driver's, plus the SASL password for a secured contender."""
    if c.security == "plaintext":
        return None  # inherit
    return dict(os.environ, KAFKA_SASL_PASSWORD=ctx["secure"]["KAFKA_SASL_PASSWORD"])


def secure_settings(bootstrap, env):
    """`scripts/kafka.sh env` for the broker at `bootstrap` (its port, unless KAFKA_PORT is set)."""
    env = dict(env)
    env.setdefault("KAFKA_PORT", bootstrap.rsplit(":", 1)[-1])
    proc = subprocess.run([KAFKA_SH, "env"], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"scripts/kafka.sh env failed: {proc.stderr.strip()}")
    out = {}
    for line in proc.stdout.splitlines():
        words = shlex.split(line)
        if len(words) == 2 and words[0] == "export" and "=" in words[1]:
            key, value = words[1].split("=", 1)
            out[key] = value
    need = ["KAFKA_SASL_SSL_BOOTSTRAP", "KAFKA_TLS_CA_FILE", "KAFKA_SASL_USERNAME", "KAFKA_SASL_PASSWORD",
            "KAFKA_CLIENT_PROPERTIES"]
    missing = [k for k in need if not out.get(k)]
    for k in ("KAFKA_TLS_CA_FILE", "KAFKA_CLIENT_PROPERTIES"):
        if out.get(k) and not os.path.isfile(out[k]):
            missing.append(f"{k} ({out[k]}: no such file; {proc.stderr.strip()})")
    if missing:
        raise SystemExit(f"scripts/kafka.sh env: missing {', '.join(missing)}")
    return out


CLK_TCK = os.sysconf("SC_CLK_TCK")
JAVA_MAIN = re.compile(r"^[A-Za-z_][\w]*(\.[\w$]+)+$")


def machine_busy():
    """Busy CPU seconds of the whole machine since boot, every core (/proc/stat: all but idle, iowait)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
    return (sum(ticks) - ticks[3] - ticks[4]) / CLK_TCK


def process_label(argv):
    name = os.path.basename(argv[0].decode(errors="replace")) if argv and argv[0] else "?"
    args = [a.decode(errors="replace") for a in argv[1:] if a]
    if name == "java":  # the main class: the broker is kafka.Kafka, the judge BrokerJudge
        main = next((a for a in args if JAVA_MAIN.match(a)), "")
        return f"java {main}".strip()
    if name == "rustc" and "--crate-name" in args[:-1]:
        return f"rustc {args[args.index('--crate-name') + 1]}"
    return " ".join([name, *args[:1]])[:60]


def process_cpu():
    """{pid: (label, CPU seconds so far)} for every process now (/proc/PID/stat utime + stime)."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()  # fields[0] is field 3 (state) of proc(5)
        out[int(pid)] = (process_label(argv), (int(fields[11]) + int(fields[12])) / CLK_TCK)
    return out


def machine_snapshot():
    return machine_busy(), process_cpu()


def machine_usage(res, before, pid, own_cpu_s=None):
    """Fills res.machine_busy_s / own_busy_s / others from `before` (machine_snapshot()) to now.
    own_cpu_s: the contender's CPU so far when it has already exited (its rusage), else from /proc."""
    busy0, procs0 = before
    busy1, procs1 = machine_snapshot()
    res.machine_busy_s = busy1 - busy0
    by_label = {}
    for p, (label, cpu) in procs1.items():
        delta = cpu - procs0.get(p, (label, 0.0))[1]
        if p == pid:
            res.own_busy_s = delta
        elif delta >= 0.05:
            by_label[label] = by_label.get(label, 0.0) + delta
    if own_cpu_s is not None:
        res.own_busy_s = own_cpu_s - procs0.get(pid, ("", 0.0))[1]
    res.others = sorted(((k, round(v, 2)) for k, v in by_label.items()), key=lambda kv: -kv[1])[:6]


def security_tag(c):
    return "" if c.security == "plaintext" else f"-{c.security.replace('_', '')}"


def run_one(judge, c, sc, run, warmup, ctx):
    # Another build of ours, or other arguments: a group of its own.
    variant = (("-alt" if c.command else "") + (f"-{slug(' '.join(c.extra))[:16]}" if c.extra else "")
               + (f"-{slug(c.acquire_mode)}" if c.acquire_mode else ""))
    group = f"sbs-{ctx['session']}-{c.kind}{variant}{security_tag(c)}-t{c.threads}-{slug(sc.name)}-r{run}"
    ctx["groups"].append(group)
    res = Result(sc.name, c.name, run, warmup, sc.topic.records, group=group)
    judge.ask("earliest", group)
    for key, value in sc.group_configs:
        judge.ask("group-config", group, key, value)
    cmd = contender_command(c, sc, group, ctx["bootstrap"], ctx["java_cp"], ctx["tools_cp"],
                            ctx["java_opts"], ctx["ours_cmd"], ctx.get("secure"))
    log_path = os.path.join(ctx["logdir"], f"{group}.log")
    timeout = ctx["timeout_s"]
    say(f"{'warm-up' if warmup else f'run {run}'}: {c.name} on {sc.name} ({sc.topic.records} records)")
    with open(log_path, "w") as log:
        log.write(" ".join(shlex.quote(a) for a in cmd) + "\n")
        log.flush()
        before = None  # machine_snapshot() at the first reported lag
        start = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, start_new_session=True,
                                text=True, env=contender_env(c, ctx))
        stdout_lines = []
        reader = threading.Thread(target=lambda: stdout_lines.extend(proc.stdout), daemon=True)
        reader.start()
        status = rusage = None
        done_at = exited_at = None
        while True:
            if status is None:
                pid, st, ru = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    status, rusage = st, ru
            lag = judge.ask("lag", group).get("lag")
            now = time.monotonic()
            if lag is not None and res.first_lag is None:
                res.first_lag, res.first_lag_s = lag, now - start
                if lag:
                    before = machine_snapshot()
            if lag == 0:
                done_at = now
                break
            if c.window_s and now - start > c.window_s and res.first_lag is not None:
                res.last_lag, res.last_lag_s = lag, now - start
                res.note = f"stopped after {c.window_s:.0f} s: rate from the broker's lag drop"
                break
            if now - start > timeout:
                res.note = f"no lag 0 within {timeout:.0f} s (lag {lag})"
                break
            if status is not None:
                exited_at = exited_at or now
                if now - exited_at > 10:  # the broker may need a moment to show the last acks
                    res.note = f"exited before lag 0 (lag {lag})"
                    break
            time.sleep(ctx["poll_s"])
        if before is not None:
            machine_usage(res, before, proc.pid,
                          None if status is None else rusage.ru_utime + rusage.ru_stime)
        if done_at is not None:
            res.lag_zero = True
            res.wall_s = done_at - start
        # Done (or given up): SIGTERM at once if it still runs, SIGKILL after 30 s.
        if status is None:
            status, rusage = wait_or_signal(proc, res)
        reader.join(timeout=5)
    res.exit_code = os.waitstatus_to_exitcode(status)
    res.cpu_s = rusage.ru_utime + rusage.ru_stime
    res.rss_kib = rusage.ru_maxrss
    res.report = parse_report(c, stdout_lines)
    if res.exit_code != 0 and not res.signalled:
        res.note = (res.note + "; " if res.note else "") + f"exit {res.exit_code}"
    with open(log_path, "a") as log:
        log.write("--- stdout\n" + "".join(stdout_lines))
    return res


def spawn(cmd, log):
    log.write(" ".join(shlex.quote(a) for a in cmd) + "\n")
    log.flush()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, start_new_session=True, text=True)
    stdout_lines = []
    reader = threading.Thread(target=lambda: stdout_lines.extend(proc.stdout), daemon=True)
    reader.start()
    return proc, stdout_lines, reader


def finish(proc, reader, stdout_lines, c, res, log, status=None, rusage=None):
    if status is None:
        pid, st, ru = os.wait4(proc.pid, os.WNOHANG)
        status, rusage = (st, ru) if pid else wait_or_signal(proc, res)
    reader.join(timeout=5)
    res.exit_code = os.waitstatus_to_exitcode(status)
    res.cpu_s = rusage.ru_utime + rusage.ru_stime
    res.rss_kib = rusage.ru_maxrss
    res.report = parse_report(c, stdout_lines)
    if res.exit_code != 0 and not res.signalled:
        res.note = (res.note + "; " if res.note else "") + f"exit {res.exit_code}"
    log.write("--- stdout\n" + "".join(stdout_lines))


def run_latency(judge, c, sc, run, warmup, ctx):
    """Fixed produce rate into a fresh empty topic while the contender consumes.

    The contender starts first; once the broker shows share state for every partition (the group
    has joined and fetched) the producer starts: ProducerPerformance, --throughput RATE, linger.ms=0,
    acks=1, round-robin. After it has sent everything the run ends at lag 0. Latency is the
    contender's own measurement from each record's timestamp (CreateTime: set by the producer when
    it sends) to the broker's answer to that record's ACCEPT (ours: the receipt resolving OK;
    Java: the acknowledgement commit callback reporting it without error)."""
    tag = f"{c.kind}{'-alt' if c.command else ''}-r{run}{'w' if warmup else ''}"
    topic = f"sbs-{ctx['session']}-lat-{tag}"
    judge.ask("create-topic", topic, sc.topic.partitions)
    ctx["extra_topics"].append(topic)
    sc_run = Scenario(sc.section, sc.name, sc.topic, sc.handler, sc.concurrency, sc.latency_ms,
                      sc.contenders, topic_name=topic)
    group = f"sbs-{ctx['session']}-{c.kind}-lat-{slug(sc.name)}-r{run}"
    ctx["groups"].append(group)
    res = Result(sc.name, c.name, run, warmup, sc.topic.records, group=group)
    judge.ask("earliest", group)
    cmd = contender_command(c, sc_run, group, ctx["bootstrap"], ctx["java_cp"], ctx["tools_cp"],
                            ctx["java_opts"], ctx["ours_cmd"], ctx.get("secure"))
    say(f"{'warm-up' if warmup else f'run {run}'}: {c.name} on latency {sc.name}")
    log_path = os.path.join(ctx["logdir"], f"{group}.log")
    with open(log_path, "w") as log:
        start = time.monotonic()
        proc, stdout_lines, reader = spawn(cmd, log)
        # Joined: every partition assigned to it (an empty topic shows no lag yet).
        while judge.ask("assigned", group).get("assigned", 0) < sc.topic.partitions:
            if time.monotonic() - start > 120:
                res.note = "not assigned every partition within 120 s"
                break
            time.sleep(ctx["poll_s"])
        status = rusage = None
        if not res.note:
            time.sleep(1.0)
            res.first_lag_s = time.monotonic() - start
            with open(os.path.join(ctx["logdir"], f"produce-{group}.log"), "w") as plog:
                sh([KAFKA_SH, "tool", "org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
                    "--num-records", str(sc.topic.records), "--record-size", str(sc.topic.record_size),
                    "--throughput", str(sc.rate), "--command-property",
                    f"bootstrap.servers={ctx['bootstrap']}", "acks=1", "linger.ms=0",
                    "partitioner.class=org.apache.kafka.clients.producer.RoundRobinPartitioner"],
                   stdout=plog, stderr=subprocess.STDOUT)
            produced_at = time.monotonic()
            while True:
                lag = judge.ask("lag", group).get("lag")
                now = time.monotonic()
                if lag == 0:
                    res.lag_zero, res.wall_s = True, now - start
                    break
                if now - produced_at > 120:
                    res.note = f"no lag 0 within 120 s of the last record (lag {lag})"
                    break
                time.sleep(ctx["poll_s"])
            # Ours exits by itself once it has every record; give it 5 s, then SIGTERM.
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                pid, st, ru = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    status, rusage = st, ru
                    break
                time.sleep(0.05)
        finish(proc, reader, stdout_lines, c, res, log, status, rusage)
    return res


def proc_status_kib(pid, key):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def run_rss(judge, c, sc, run, warmup, ctx):
    """Our worker with `park` handlers: once it reports C handlers running, wait 3 s and read its
    VmRSS from /proc, then SIGTERM (it releases what it holds)."""
    group = f"sbs-{ctx['session']}-{c.kind}{'-alt' if c.command else ''}-rss-{sc.concurrency}-r{run}"
    ctx["groups"].append(group)
    res = Result(sc.name, c.name, run, warmup, sc.concurrency, group=group)
    judge.ask("earliest", group)
    cmd = contender_command(c, sc, group, ctx["bootstrap"], ctx["java_cp"], ctx["tools_cp"],
                            ctx["java_opts"], ctx["ours_cmd"], ctx.get("secure"))
    say(f"{'warm-up' if warmup else f'run {run}'}: {c.name} with {sc.concurrency} parked")
    with open(os.path.join(ctx["logdir"], f"{group}.log"), "w") as log:
        start = time.monotonic()
        proc, stdout_lines, reader = spawn(cmd, log)
        while not any('"parked"' in line for line in list(stdout_lines)):
            if time.monotonic() - start > 120:
                res.note = f"{sc.concurrency} handlers not running within 120 s"
                break
            time.sleep(0.1)
        if not res.note:
            res.wall_s = time.monotonic() - start
            time.sleep(3.0)
            res.rss_now_kib = proc_status_kib(proc.pid, "VmRSS")
        finish(proc, reader, stdout_lines, c, res, log)
    return res


def run_scale(judge, c, sc, run, warmup, ctx):
    """K processes of ours in one group for a window; with join_after_s, the last one starts late.

    Each process prints {"t_ms", "handled"} every 250 ms; lines are timestamped as they arrive.
    Rate: the broker's lag drop over the window, from the first lag every partition reports.
    Take-up (a late joiner): from its spawn until, over a whole second, it handled at least 80 % of
    what each process already running handled in that second."""
    group = f"sbs-{ctx['session']}-scale-k{sc.processes}-j{int(sc.join_after_s)}-r{run}{'w' if warmup else ''}"
    ctx["groups"].append(group)
    res = Result(sc.name, c.name, run, warmup, sc.topic.records, group=group)
    judge.ask("earliest", group)
    cmd = contender_command(c, sc, group, ctx["bootstrap"], ctx["java_cp"], ctx["tools_cp"],
                            ctx["java_opts"], ctx["ours_cmd"])
    # Run until stopped: the window, not a record count, ends the run.
    at = cmd.index("--records")
    cmd[at + 1] = str(10 ** 12)
    cmd += ["--report-every-ms", "250"]
    say(f"{'warm-up' if warmup else f'run {run}'}: {c.name} on {sc.name}")
    log_path = os.path.join(ctx["logdir"], f"{group}.log")
    procs = []  # (proc, lines [(t, line)], reader, spawned_at)

    def start(log):
        log.write(" ".join(shlex.quote(a) for a in cmd) + "\n")
        log.flush()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, start_new_session=True, text=True)
        lines = []
        reader = threading.Thread(target=lambda: lines.extend((time.monotonic(), ln) for ln in proc.stdout),
                                  daemon=True)
        reader.start()
        procs.append((proc, lines, reader, time.monotonic()))

    with open(log_path, "w") as log:
        t0 = time.monotonic()
        late = 1 if sc.join_after_s else 0
        for _ in range(sc.processes - late):
            start(log)
        while True:
            now = time.monotonic()
            if late and len(procs) < sc.processes and now - t0 >= sc.join_after_s:
                start(log)
            lag = judge.ask("lag", group).get("lag")
            now = time.monotonic()
            if lag is not None and res.first_lag is None:
                res.first_lag, res.first_lag_s = lag, now - t0
            if res.first_lag is not None and now - t0 - res.first_lag_s >= sc.window_s:
                res.last_lag, res.last_lag_s = lag, now - t0
                break
            if now - t0 > ctx["timeout_s"]:
                res.note = f"no lag within {ctx['timeout_s']:.0f} s"
                break
            time.sleep(ctx["poll_s"])
        for proc, _, _, _ in procs:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        codes = []
        for proc, lines, reader, _ in procs:
            status, _ = wait_or_signal(proc, res)
            reader.join(timeout=5)
            codes.append(os.waitstatus_to_exitcode(status))
            log.write("--- stdout\n" + "".join(ln for _, ln in lines))
    res.exit_code = max(codes, key=abs) if codes else None
    if res.first_lag is not None and res.last_lag is not None and res.last_lag_s > res.first_lag_s:
        res.window_rate = (res.first_lag - res.last_lag) / (res.last_lag_s - res.first_lag_s)
    res.lag_zero = res.last_lag == 0
    if sc.join_after_s and len(procs) == sc.processes:
        res.takeup_s = takeup(procs)
        report = parse_report(c, [ln for _, ln in procs[-1][1]])
        res.joiner_first_handler_ms = report.get("first_handler_ms") or float("nan")
    res.report = parse_report(c, [ln for _, ln in procs[0][1]]) if procs else {}
    return res


def handled_series(lines):
    """(arrival time, records handled) from a process's progress lines."""
    out = []
    for t, line in lines:
        try:
            d = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "handled" in d and "t_ms" in d:
            out.append((t, d["handled"]))
    return out


def handled_at(series, t):
    """Records handled by time t (the last report at or before it; 0 before the first)."""
    n = 0
    for at, h in series:
        if at > t:
            break
        n = h
    return n


def takeup(procs):
    """Seconds from the late joiner's spawn until, over a whole second, it handled at least 80 % of
    the mean of what the processes already running handled in that second; NaN if it never did."""
    *early, late = procs
    joiner = handled_series(late[1])
    others = [handled_series(p[1]) for p in early]
    spawned = late[3]
    if not joiner:
        return float("nan")
    t = spawned + 1.0
    end = joiner[-1][0]
    while t <= end:
        mine = handled_at(joiner, t) - handled_at(joiner, t - 1.0)
        theirs = [handled_at(o, t) - handled_at(o, t - 1.0) for o in others]
        mean = sum(theirs) / len(theirs) if theirs else 0
        if mine > 0 and mine >= 0.8 * mean:
            return t - spawned
        t += 0.25
    return float("nan")


def run_scenario(judge, c, sc, run, warmup, ctx):
    if sc.section == "scale":
        return run_scale(judge, c, sc, run, warmup, ctx)
    if sc.section == "latency":
        return run_latency(judge, c, sc, run, warmup, ctx)
    if sc.section == "rss":
        return run_rss(judge, c, sc, run, warmup, ctx)
    return run_one(judge, c, sc, run, warmup, ctx)


def wait_or_signal(proc, res):
    for sig, grace in ((None, 0.2), (signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
        if sig is not None:
            res.signalled = True
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            pid, st, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                return st, ru
            time.sleep(0.05)
    _, st, ru = os.wait4(proc.pid, 0)
    return st, ru


def parse_report(c, lines):
    if c.kind == "share-perf":
        # CSV: start.time, end.time, data.consumed.in.MB, MB.sec, nMsg.sec, data.consumed.in.nMsg, fetch.time.ms
        for line in lines:
            parts = [p.strip() for p in line.split(",")]
            if len(parts) == 7 and parts[0][:2].isdigit():
                try:
                    return {"records": int(parts[5]), "records_per_s": float(parts[4])}
                except ValueError:
                    pass
        return {}
    for line in reversed(lines):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                pass
    return {}


def steady(r):
    """Records/s from the broker's first reported lag to lag 0 (NaN when it went straight to 0).

    Windowed runs: the lag drop from the first reported lag to the window's end over that time."""
    if not r.lag_zero and r.last_lag is not None and r.first_lag is not None:
        span = r.last_lag_s - r.first_lag_s
        return (r.first_lag - r.last_lag) / span if span > 0 else float("nan")
    if not r.lag_zero or not r.first_lag or r.wall_s - r.first_lag_s <= 0:
        return float("nan")
    return r.first_lag / (r.wall_s - r.first_lag_s)


def slug(text):
    keep = "".join(ch if ch.isascii() and ch.isalnum() else "-" for ch in text.lower())
    return "-".join(filter(None, keep.split("-")))[:40]


# ---------------------------------------------------------------------------------------------
# Set-up: build, topics, pre-fill


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, **kw)


def prefill(topic_name, topic, bootstrap, logdir):
    log_path = os.path.join(logdir, f"prefill-{topic_name}.log")
    with open(log_path, "w") as log:
        sh([KAFKA_SH, "tool", "org.apache.kafka.tools.ProducerPerformance", "--topic", topic_name,
            "--num-records", str(topic.records), "--record-size", str(topic.record_size),
            "--throughput", "-1", "--command-property", f"bootstrap.servers={bootstrap}", "acks=all",
            "linger.ms=5", "batch.size=65536",
            # One record per partition in turn: the default sticky partitioner puts a small topic's
            # records into a single partition.
            "partitioner.class=org.apache.kafka.clients.producer.RoundRobinPartitioner"],
           stdout=log, stderr=subprocess.STDOUT)


# ---------------------------------------------------------------------------------------------
# Report


def fmt_range(values, fmt="{:.0f}"):
    values = [v for v in values if v == v]  # drop NaN
    if not values:
        return "–"
    med = statistics.median(values)
    if len(values) == 1:
        return fmt.format(med)
    return f"{fmt.format(med)} ({fmt.format(min(values))}–{fmt.format(max(values))})"


def span(r):
    """The steady span: the broker's first reported lag → lag 0 (NaN when not measured)."""
    if not r.lag_zero or r.machine_busy_s != r.machine_busy_s:
        return float("nan")
    return r.wall_s - r.first_lag_s


def cpu_section(lines, scs, kept, ours_available, cell, check):
    """CPU-bound handler: records/s and CPU of ours on 1 and 2 runtime threads and of the Java loop
    with 2 threads, and ours-2 / ours-1 and ours-2 / Java, each taken per round (same run)."""
    if not scs:
        return
    lines.append("## CPU-bound handler: does handler work use every core?")
    lines.append("")
    lines.append("`cpu:US`: each record's handler spins on the thread that runs it, synchronously (no await, no "
                 "sleep), until that thread's own CPU clock has advanced by US µs (ours: "
                 "`clock_gettime(CLOCK_THREAD_CPUTIME_ID)`; Java: `ThreadMXBean.getCurrentThreadCpuTime()`, the "
                 "same clock on Linux), so N records cost N × US CPU seconds of handler work whatever else runs. "
                 "share-worker: concurrency N, `--worker-threads T` = the tokio runtime's worker threads, "
                 "`--run-as-task` = the worker runs as a task on that runtime (`tokio::spawn(worker.run())`), so "
                 "handlers, the dispatcher and the Kafka session all run on those T threads and nothing of ours runs "
                 "elsewhere (under plain `#[tokio::main]` the dispatcher runs on the main thread in `block_on`: "
                 "T + 1 threads). Java: `ExplicitAckLoop --threads 2`, two `KafkaShareConsumer`s each on its own "
                 "thread, `share.acquire.mode=record_limit`, `max.poll.records` = N ÷ 2 (2 × N/2 = our concurrency "
                 "N: at most N records held at once by either); its consumers' network threads and the JIT come on "
                 "top. N = 64 and N = 500: the broker's CPU per record (on the same cores) falls with the fetch "
                 "size. "
                 "The broker, the judge JVM, the driver and anything else running on the machine share the same "
                 "cores: \"cores busy\" = the contender's CPU over the steady span (the broker's first lag → lag 0) "
                 "÷ that span (`/proc/PID/stat`), \"others' cores\" = every other process's over the same span "
                 "(`/proc/stat`), listed below the table. CPU s = the whole run's rusage (start-up and close "
                 "included). Ratios use the steady rate and pair runs of the same round.")
    lines.append("")
    lines.append("| scenario | contender | threads | records/s spawn → lag 0 | steady records/s | CPU s "
                 "| handler CPU s | cores busy | others' cores | CPU s / 1M records | peak RSS MiB | handled "
                 "| broker lag 0 |")
    lines.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    ratios = []
    for sc in scs:
        per_us = float(sc.handler.split(":")[1])
        for c in sc.contenders:
            if c.kind == "ours" and not ours_available:
                lines.append(f"| {sc.name} | {c.name} | not yet available (set OURS_CMD) |" + " |" * 10)
                continue
            threads = (lambda r: r.report["worker_threads"]) if c.kind == "ours" else (lambda r: r.report["threads"])
            lines.append(
                f"| {sc.name} | {c.name} | {cell(sc.name, c.name, lambda r, t=threads: t(r))} | "
                f"{cell(sc.name, c.name, lambda r: r.records / r.wall_s)} | "
                f"{cell(sc.name, c.name, steady)} | {cell(sc.name, c.name, lambda r: r.cpu_s, '{:.1f}')} | "
                f"{sc.topic.records * per_us / 1e6:.1f} | "
                f"{cell(sc.name, c.name, lambda r: r.own_busy_s / span(r), '{:.2f}')} | "
                f"{cell(sc.name, c.name, lambda r: (r.machine_busy_s - r.own_busy_s) / span(r), '{:.2f}')} | "
                f"{cell(sc.name, c.name, lambda r: r.cpu_s / r.records * 1e6, '{:.0f}')} | "
                f"{cell(sc.name, c.name, lambda r: r.rss_kib / 1024)} | "
                f"{cell(sc.name, c.name, lambda r: r.report.get('records', float('nan')))} | "
                f"{check(sc.name, c.name)} |")
        ours = [c for c in sc.contenders if c.kind == "ours"]
        java = [c for c in sc.contenders if c.kind != "ours"]
        if not ours_available or len(ours) < 2:
            continue
        one, two = sorted(ours, key=lambda c: c.threads)[:2]

        def paired(a, b):
            out = []
            for run in sorted({r.run for r in kept}):
                ra = [steady(r) for r in kept if r.scenario == sc.name and r.contender == a.name and r.run == run]
                rb = [steady(r) for r in kept if r.scenario == sc.name and r.contender == b.name and r.run == run]
                if ra and rb and rb[0] == rb[0] and rb[0] > 0:
                    out.append(ra[0] / rb[0])
            return out
        ratios.append((sc, f"{two.name} ÷ {one.name}", paired(two, one), "target ≥ 1.8"))

        def ceiling():
            # What ours-2 ÷ ours-1 can be at most on this machine when both cost the same CPU per
            # record: the cores the other processes left ours while ours-2 ran ÷ the cores ours-1
            # used (one, if its thread was busy all along).
            out = []
            for run in sorted({r.run for r in kept}):
                ra = [r for r in kept if r.scenario == sc.name and r.contender == two.name and r.run == run]
                rb = [r for r in kept if r.scenario == sc.name and r.contender == one.name and r.run == run]
                if ra and rb and span(ra[0]) > 0 and span(rb[0]) > 0 and rb[0].own_busy_s > 0:
                    left = os.cpu_count() - (ra[0].machine_busy_s - ra[0].own_busy_s) / span(ra[0])
                    out.append(left / (rb[0].own_busy_s / span(rb[0])))
            return out
        ratios.append((sc, f"ceiling (estimate): ({os.cpu_count()} − others' cores while {two.name} ran) ÷ "
                           f"cores busy of {one.name}", ceiling(), "–"))
        for j in java:
            ratios.append((sc, f"{two.name} ÷ {j.name}", paired(two, j), "target ≥ 1"))
        for b in sorted(ours, key=lambda c: c.threads)[2:]:
            ratios.append((sc, f"{two.name} ÷ {b.name}", paired(two, b), "no regression: ≥ 0.95"))
    lines.append("")
    for sc in scs:
        for c in sc.contenders:
            rs = [r for r in kept if r.scenario == sc.name and r.contender == c.name and span(r) == span(r)]
            if not rs:
                continue
            wall = sum(span(r) for r in rs)
            total = {}
            for r in rs:
                for label, cpu in r.others:
                    total[label] = total.get(label, 0.0) + cpu
            top = sorted(total.items(), key=lambda kv: -kv[1])[:4]
            lines.append(f"- others while {c.name} ran (cores, mean over its runs): "
                         + (", ".join(f"`{label}` {cpu / wall:.2f}" for label, cpu in top) or "none"))
    if ratios:
        lines.append("")
        lines.append("| scenario | ratio of steady records/s | per round: median (min–max) | target |")
        lines.append("|---|---|---:|---|")
        for sc, label, values, target in ratios:
            lines.append(f"| {sc.name} | {label} | {fmt_range(values, '{:.2f}')} | {target} |")
    lines.append("")


BROKER_LABEL = "java kafka.Kafka"


def tls_section(lines, scs, kept, ours_available, cell, check, ctx):
    """No-op over SASL_SSL vs plaintext: records/s and CPU of each client both ways, and per round the
    throughput drop of SASL_SSL against plaintext for each client."""
    if not scs:
        return
    secure = ctx.get("secure", {})
    lines.append("## TLS: no-op handler over SASL_SSL vs plaintext")
    lines.append("")
    lines.append("The no-op row again (same topic, same fetch sizing: share-worker concurrency 500, the Java loop "
                 "`max.poll.records` 500), each client once over the plaintext listener and once over the broker's "
                 f"SASL_SSL listener ({secure.get('KAFKA_SASL_SSL_BOOTSTRAP', 'SASL_SSL')}: TLS with the test CA, "
                 "SASL SCRAM-SHA-512; the broker has `connections.max.reauth.ms` = 10000, so a connection "
                 "re-authenticates every 10 s), all four interleaved in each round. share-worker: `bench_worker "
                 "--security-protocol sasl_ssl --sasl-mechanism SCRAM-SHA-512 --sasl-username U --sasl-password-env "
                 "KAFKA_SASL_PASSWORD --ca-file CA` (rustls); Java: `ExplicitAckLoop --command-config` the client "
                 "properties file `scripts/kafka.sh env` prints (JSSE). The judge and the pre-fill stay on "
                 "plaintext. \"broker CPU s / 1M records\" = the broker JVM's CPU (`/proc`) over the steady span ÷ "
                 "the records acknowledged in it: TLS costs the broker too. Drops pair the runs of one round: "
                 "1 − SASL_SSL ÷ plaintext.")
    lines.append("")
    lines.append("| scenario | contender | security | records/s spawn → lag 0 | steady records/s | CPU s / 1M records "
                 "| broker CPU s / 1M records | peak RSS MiB | handled | broker lag 0 |")
    lines.append("|---|---|---|---:|---:|---:|---:|---:|---:|---|")

    def broker_cpu(r):
        cpu = dict(r.others).get(BROKER_LABEL)
        return cpu / r.first_lag * 1e6 if cpu is not None and r.first_lag and span(r) == span(r) else float("nan")
    pairs = []
    for sc in scs:
        for c in sc.contenders:
            label = "SASL_SSL (SCRAM-SHA-512)" if c.security == "sasl_ssl" else c.security
            if c.kind == "ours" and not ours_available:
                lines.append(f"| {sc.name} | {c.name} | {label} | not yet available (set OURS_CMD) |" + " |" * 6)
                continue
            lines.append(
                f"| {sc.name} | {c.name} | {label} | {cell(sc.name, c.name, lambda r: r.records / r.wall_s)} | "
                f"{cell(sc.name, c.name, steady)} | "
                f"{cell(sc.name, c.name, lambda r: r.cpu_s / r.records * 1e6, '{:.1f}')} | "
                f"{cell(sc.name, c.name, broker_cpu, '{:.1f}')} | "
                f"{cell(sc.name, c.name, lambda r: r.rss_kib / 1024)} | "
                f"{cell(sc.name, c.name, lambda r: r.report.get('records', float('nan')))} | "
                f"{check(sc.name, c.name)} |")
        for c in sc.contenders:
            if c.security != "plaintext" or (c.kind == "ours" and not ours_available):
                continue
            for t in sc.contenders:
                if t.security != "plaintext" and t.kind == c.kind and t.threads == c.threads:
                    pairs.append((sc, c, t))
    if not pairs:
        lines.append("")
        return

    def paired(sc, a, b, fn):
        out = []
        for run in sorted({r.run for r in kept}):
            ra = [fn(r) for r in kept if r.scenario == sc.name and r.contender == a.name and r.run == run]
            rb = [fn(r) for r in kept if r.scenario == sc.name and r.contender == b.name and r.run == run]
            if ra and rb and ra[0] == ra[0] and rb[0] == rb[0] and ra[0] > 0:
                out.append(rb[0] / ra[0])
        return out
    lines.append("")
    lines.append("| scenario | client | throughput drop, steady (1 − SASL_SSL ÷ plaintext) | drop, spawn → lag 0 "
                 "| CPU per record, SASL_SSL ÷ plaintext | broker CPU per record, SASL_SSL ÷ plaintext | target |")
    lines.append("|---|---|---:|---:|---:|---:|---|")
    ctx["tls_drop"] = {}
    for sc, plain_c, tls_c in pairs:
        base = plain_c.name.rsplit(", plaintext", 1)[0]
        drop = [100 * (1 - x) for x in paired(sc, plain_c, tls_c, steady)]
        drop_spawn = [100 * (1 - x) for x in paired(sc, plain_c, tls_c, lambda r: r.records / r.wall_s)]
        ctx["tls_drop"][base] = drop
        lines.append(f"| {sc.name} | {base} | {fmt_range(drop, '{:.1f}')} % | {fmt_range(drop_spawn, '{:.1f}')} % | "
                     f"{fmt_range(paired(sc, plain_c, tls_c, lambda r: r.cpu_s / r.records), '{:.2f}')} | "
                     f"{fmt_range(paired(sc, plain_c, tls_c, broker_cpu), '{:.2f}')} | "
                     f"{'≤ 15 %' if plain_c.kind == 'ours' else '–'} |")
    lines.append("")


def write_report(path, ctx, scs, results, broker_check, ours_available):
    kept = [r for r in results if not r.warmup]
    lines = []
    mode = "quick" if ctx["quick"] else "full"
    lines.append(f"# Side-by-side share-consumer benchmark ({mode})")
    lines.append("")
    lines.append(f"- Date: {ctx['date']}")
    nodes = len(ctx['bootstrap'].split(','))
    where = 'single local node' if nodes == 1 else f'{nodes} local brokers'
    lines.append(f"- Kafka: {ctx['kafka_version']} (broker and clients), {where} at {ctx['bootstrap']}")
    lines.append(f"- Machine: `nproc` = {os.cpu_count()}, {platform.machine()}, {platform.system()} "
                 f"{platform.release()}; {ctx['java_version']}")
    lines.append(f"- Runs: {ctx['runs']} interleaved per figure after discarded warm-up rounds "
                 f"({ctx.get('warmed_s', 0):.0f} s of them, at least {ctx['warmup_s']:.0f} s); "
                 "figures are median (min–max)")
    lines.append(f"- Contender JVM options: `{' '.join(ctx['java_opts'])}`")
    spread = ", ".join(f"{'/'.join(map(str, v))}" for v in ctx["spread"].values())
    lines.append(f"- Topics pre-filled once by ProducerPerformance (round-robin), records per partition: {spread}")
    layout = "; ".join(sorted({"/".join(map(str, v)) for v in ctx["layout"].values()}))
    lines.append(f"- Partition leaders (partition P on the (P mod brokers)-th broker, the same for every "
                 f"contender): {layout}")
    lines.append("- records/s spawn → lag 0 = records ÷ (contender spawn → the broker reports lag 0): "
                 "includes process start, group join and share-state initialisation. Steady records/s = "
                 "the lag the broker first reports ÷ (that moment → lag 0): the same broker view without "
                 "the start-up (the first lag appears a few seconds in). % of limit uses the steady rate")
    lines.append("- CPU seconds (user + sys) and peak RSS: the contender process tree's rusage, start-up "
                 "included (a JVM start costs about 1–2 CPU s: small runs overstate CPU per record)")
    lines.append("")

    def cell(scenario, contender, fn, fmt="{:.0f}"):
        vals = [fn(r) for r in kept if r.scenario == scenario and r.contender == contender]
        return fmt_range(vals, fmt)

    def check(scenario, contender):
        rs = [r for r in kept if r.scenario == scenario and r.contender == contender]
        ok = sum(1 for r in rs if r.lag_zero and broker_check.get(r.group) == 0)
        notes = "; ".join(sorted({r.note for r in rs if r.note}))
        return f"{ok}/{len(rs)}" + (f" ({notes})" if notes else "")

    def rows(sc, extra):
        out = []
        for c in sc.contenders:
            if c.kind == "ours" and not ours_available:
                out.append(f"| {sc.name} | {c.name} | {c.ack} | not yet available (set OURS_CMD) |"
                           + " |" * (5 + len(extra)))
                continue
            base = (f"| {sc.name} | {c.name} | {c.ack} | "
                    f"{cell(sc.name, c.name, lambda r: r.records / r.wall_s)} | "
                    f"{cell(sc.name, c.name, steady)} | "
                    f"{cell(sc.name, c.name, lambda r: r.cpu_s / r.records * 1e6, '{:.1f}')} | "
                    f"{cell(sc.name, c.name, lambda r: r.rss_kib / 1024)} |")
            for _, fn, fmt in extra:
                base += f" {cell(sc.name, c.name, fn, fmt)} |"
            base += f" {cell(sc.name, c.name, lambda r: r.report.get('records', float('nan')))} |"
            base += f" {check(sc.name, c.name)} |"
            out.append(base)
        return out

    head = ("| scenario | contender | acks | records/s spawn → lag 0 | steady records/s | CPU s / 1M records "
            "| peak RSS MiB |")
    sep = "|---|---|---|---:|---:|---:|---:|"

    def section(key, title, extra_head, extra_sep, extras_for):
        """One table of the scenarios of section `key`, each row with its extra columns."""
        if not any(sc.section == key for sc in scs):
            return
        lines.extend([f"## {title}", "", head + extra_head, sep + extra_sep])
        for sc in scs:
            if sc.section == key:
                lines.extend(rows(sc, extras_for(sc)))
        lines.append("")

    def efficiency(sc):
        limit = min(sc.concurrency, sc.topic.partitions * MAX_RECORD_LOCKS) / (sc.latency_ms / 1000)
        return [("eff", lambda r, lim=limit: 100 * steady(r) / lim, "{:.0f}")]

    section("noop", "No-op handler: throughput, CPU, memory",
            " handled | broker lag 0 |", "---:|---|", lambda sc: [])
    tls_section(lines, [sc for sc in scs if sc.section == "tls"], kept, ours_available, cell, check, ctx)
    section("slow", "Slow handler (50 ms): efficiency against min(N, P × max.record.locks) / latency",
            " % of limit | handled | broker lag 0 |", "---:|---:|---|", efficiency)
    section("heavy", "Heavy-tailed handler",
            " handled | broker lag 0 |", "---:|---|", lambda sc: [])
    section("batch", "Batch handler against a bulk endpoint",
            " handled | broker lag 0 |", "---:|---|", lambda sc: [])
    cpu_section(lines, [sc for sc in scs if sc.section == "cpu"], kept, ours_available, cell, check)

    def runs_of(scenario, contender):
        return [r for r in kept if r.scenario == scenario and r.contender == contender]

    def rep_cell(scenario, contender, fn, fmt="{:.0f}"):
        def safe(r):
            try:
                v = fn(r)
            except (KeyError, TypeError, ValueError, ZeroDivisionError):
                return float("nan")
            return float("nan") if v is None else v
        return fmt_range([safe(r) for r in runs_of(scenario, contender)], fmt)

    lat = [sc for sc in scs if sc.section == "latency"]
    if lat:
        lines.append("## End-to-end latency at a fixed produce rate")
        lines.append("")
        lines.append("Each run: a fresh empty 4-partition topic; the contender joins; then ProducerPerformance "
                     "sends 100 B records at the fixed rate (`linger.ms=0`, `acks=1`, round-robin). Latency = "
                     "the broker's answer to the record's ACCEPT as the consumer learns it − the record's "
                     "timestamp (CreateTime, set by the producer at send), in ms, over every record. "
                     "share-worker: its ACCEPT receipt resolving OK (measured by a pass-through source around "
                     "KafkaSource, `benches/src/bin/bench_worker/source.rs`); Java explicit-ack loop: the "
                     "acknowledgement commit callback reporting the record's offset without error (it runs on the "
                     "loop's thread inside a later `poll`/`commitAsync`, so it includes waiting for that call). "
                     "Same machine, same clock. Percentiles per run, then median (min–max) over runs.")
        lines.append("")
        lines.append("| rate | contender | p50 ms | p99 ms | p99.9 ms | max ms | records timed | CPU s / 1M records "
                     "| broker lag 0 |")
        lines.append("|---|---|---:|---:|---:|---:|---:|---:|---|")
        for sc in lat:
            for c in sc.contenders:
                if c.kind == "ours" and not ours_available:
                    continue
                q = lambda key: (lambda r: r.report["latency_ms"][key])  # noqa: E731
                count = lambda r: r.report["latency_ms"].get("count", sc.topic.records)  # noqa: E731
                lines.append(f"| {sc.name} | {c.name} | {rep_cell(sc.name, c.name, q('p50'))} | "
                             f"{rep_cell(sc.name, c.name, q('p99'))} | {rep_cell(sc.name, c.name, q('p999'))} | "
                             f"{rep_cell(sc.name, c.name, q('max'))} | {rep_cell(sc.name, c.name, count)} | "
                             f"{cell(sc.name, c.name, lambda r: r.cpu_s / r.records * 1e6, '{:.1f}')} | "
                             f"{check(sc.name, c.name)} |")
        lines.append("")

    rss = [sc for sc in scs if sc.section == "rss"]
    if rss and ours_available:
        lines.append("## Memory per in-flight record (share-worker, handlers parked)")
        lines.append("")
        lines.append("`park` handlers never finish: once C handlers run (C records fetched, locked and held), "
                     "the driver waits 3 s and reads the worker's VmRSS from `/proc/PID/status`. Topic: 8 "
                     "partitions × 1,250 records of 1 KiB (the broker holds at most "
                     f"`group.share.partition.max.record.locks` = {MAX_RECORD_LOCKS:,} per partition on 4.2, so 10k "
                     "in flight needs ≥ 5 partitions). Slope = (RSS at 10k − RSS at 1k) ÷ 9,000, per round. Target ≤ 4 KiB "
                     "per record (the record's own 1 KiB payload included).")
        lines.append("")
        lines.append("| in flight | contender | VmRSS MiB, parked | peak RSS MiB (whole run) | time to C running, s |")
        lines.append("|---|---|---:|---:|---:|")
        for sc in rss:
            for c in sc.contenders:
                lines.append(f"| {sc.name} | {c.name} | {rep_cell(sc.name, c.name, lambda r: r.rss_now_kib / 1024 if r.rss_now_kib else None, '{:.1f}')} | "
                             f"{rep_cell(sc.name, c.name, lambda r: r.rss_kib / 1024, '{:.1f}')} | "
                             f"{rep_cell(sc.name, c.name, lambda r: r.wall_s, '{:.1f}')} |")
        slopes = []
        if len(rss) == 2:
            lo, hi = rss
            for run in sorted({r.run for r in kept}):
                a = [r for r in kept if r.scenario == lo.name and r.run == run and r.rss_now_kib]
                b = [r for r in kept if r.scenario == hi.name and r.run == run and r.rss_now_kib]
                if a and b:
                    slopes.append((b[0].rss_now_kib - a[0].rss_now_kib) / (hi.concurrency - lo.concurrency))
        ctx["rss_slope"] = slopes
        lines.append(f"| **slope** | {rss[0].contenders[0].name} | **{fmt_range(slopes, '{:.2f}')} KiB per "
                     "in-flight record** | | |")
        lines.append("")

    startup = [sc for sc in scs if sc.section == "startup"]
    if startup and ours_available:
        lines.append("## Start-up: process start → first handler call")
        lines.append("")
        lines.append("A fresh group per run (`share.auto.offset.reset=earliest`) on a pre-filled topic: the "
                     "worker's own clock from the first thing `main` does to the first handler call "
                     "(`first_handler_ms` in its report): connecting, joining the group, the share state "
                     "initialised by the broker, the first fetch. Target ≤ 1 s.")
        lines.append("")
        lines.append("| scenario | contender | first handler call, ms | records/s spawn → lag 0 | broker lag 0 |")
        lines.append("|---|---|---:|---:|---|")
        for sc in startup:
            for c in sc.contenders:
                lines.append(f"| {sc.name} | {c.name} | "
                             f"{rep_cell(sc.name, c.name, lambda r: r.report['first_handler_ms'])} | "
                             f"{cell(sc.name, c.name, lambda r: r.records / r.wall_s)} | {check(sc.name, c.name)} |")
        lines.append("")

    scale = [sc for sc in scs if sc.section == "scale"]
    if scale and ours_available:
        lines.append("## Scale-out: several worker processes in one share group")
        lines.append("")
        lines.append("K processes of ours, each concurrency 250 with a 50 ms sleep handler, in one group on 8 "
                     "partitions. Rate = the broker's lag drop over the window (from the first lag every partition "
                     "reports), against the limit min(K × 250, 8 × max.record.locks) ÷ 50 ms. Take-up: a second "
                     "process starts while the first runs; the time from its spawn until, over a whole second, it "
                     "handles at least 80 % of what the first handles (its own first handler call in brackets).")
        lines.append("")
        lines.append("| scenario | aggregate records/s | limit | % of limit | take-up s (first handler ms) |")
        lines.append("|---|---:|---:|---:|---:|")
        for sc in scale:
            c = sc.contenders[0]
            limit = min(sc.processes * sc.concurrency, sc.topic.partitions * MAX_RECORD_LOCKS) / (sc.latency_ms / 1000)
            take = "–"
            if sc.join_after_s:
                take = (f"{rep_cell(sc.name, c.name, lambda r: r.takeup_s, '{:.1f}')} "
                        f"({rep_cell(sc.name, c.name, lambda r: r.joiner_first_handler_ms)})")
            if sc.join_after_s:
                # Its window spans the time before the join: no aggregate to compare with a limit.
                lines.append(f"| {sc.name} | – | – | – | {take} |")
                continue
            lines.append(f"| {sc.name} | {rep_cell(sc.name, c.name, lambda r: r.window_rate)} | {limit:,.0f} | "
                         f"{rep_cell(sc.name, c.name, lambda r, lim=limit: 100 * r.window_rate / lim)} | {take} |")
        lines.append("")

    renew = [sc for sc in scs if sc.section == "renew"]
    if renew:
        lines.append("## RENEW: lock shorter than the handler")
        lines.append("")
        lines.append("Group config `share.record.lock.duration.ms` = 5000 (set with IncrementalAlterConfigs before "
                     "the group starts; the broker's `group.share.min.record.lock.duration.ms` is 1000 in "
                     "`scripts/kafka.sh`), handler sleeps 20 s, concurrency 40 = every record at once. "
                     "share-worker renews each running record's lock at half its duration (`renew_at` 0.5). "
                     "\"renewals/s\" = RENEW acknowledgements the worker queued ÷ the time from the first to the last "
                     "(one per record per renewal; they ride in ShareFetch/ShareAcknowledge requests). "
                     "\"max delivery count\" is the highest delivery count on any record the contender was given: "
                     "1 means no record was ever redelivered. Java has no automatic renew: its row (full mode only) "
                     "is stopped after 45 s and shows its failed commits and redeliveries.")
        lines.append("")
        lines.append("| scenario | contender | lock ms seen | deliveries | redelivered | max delivery count "
                     "| renewals | renewals/s | failed acks + renewals | records/s spawn → lag 0 | broker lag 0 |")
        lines.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for sc in renew:
            for c in sc.contenders:
                if c.kind == "ours" and not ours_available:
                    continue
                rg = lambda key: (lambda r: r.report[key])  # noqa: E731
                if c.kind == "ours":
                    lines.append(
                        f"| {sc.name} | {c.name} | {rep_cell(sc.name, c.name, lambda r: r.report['lock_ms'][0])} | "
                        f"{rep_cell(sc.name, c.name, rg('fetched'))} | {rep_cell(sc.name, c.name, rg('redelivered'))} | "
                        f"{rep_cell(sc.name, c.name, rg('max_delivery_count'))} | "
                        f"{rep_cell(sc.name, c.name, rg('renewals'))} | "
                        f"{rep_cell(sc.name, c.name, lambda r: r.report['renewals'] / r.report['renew_span_s'], '{:.1f}')} | "
                        f"{rep_cell(sc.name, c.name, lambda r: r.report['ack_failures'] + r.report['renewal_failures'])} | "
                        f"{cell(sc.name, c.name, lambda r: r.records / r.wall_s, '{:.2f}')} | {check(sc.name, c.name)} |")
                else:
                    lines.append(
                        f"| {sc.name} | {c.name} | 5000 | {rep_cell(sc.name, c.name, rg('records'))} handled | "
                        f"{rep_cell(sc.name, c.name, rg('redelivered'))} | – | 0 (none) | – | "
                        f"{rep_cell(sc.name, c.name, rg('commit_failures'))} failed commit callbacks | – | "
                        f"{check(sc.name, c.name)} |")
        lines.append("")

    lines.append("## Not measured yet")
    lines.append("")
    lines.append("| figure | status |")
    lines.append("|---|---|")
    lines.append("| heavy-tail p99 latency (needs records produced during the run at a fixed rate: on a "
                 "pre-filled topic a record's age is mostly how long it sat there) | driver step not written yet |")
    lines.append("| Java RSS per in-flight record | not measured (optional) |")
    lines.append("")
    lines.append("Notes: Java K-thread contenders run K `KafkaShareConsumer`s in one JVM with "
                 "`share.acquire.mode=record_limit` and K × `max.poll.records` = N; each thread runs "
                 "its records one after another, so at most K handlers run at once. "
                 "ShareConsumerPerformance uses implicit acknowledgement (acks ride on the next poll) — a "
                 "lighter contract than acking each record. \"handled\" is the contender's own count of handled "
                 "records (more than the topic holds = records handled twice). \"broker lag 0\": runs that "
                 "reached lag 0 while watched and still show it in ShareGroupCommand at the end. Raw results: the `.jsonl` file next to this one.")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


# ---------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small record counts, 1 run (a few minutes)")
    ap.add_argument("--runs", type=int, help="interleaved runs per figure (default 3; --quick: 1)")
    ap.add_argument("--only", help="run only scenarios whose name contains this (case-insensitive) "
                                   "or of this section (noop, tls, slow, heavy, cpu, latency, rss, startup, scale, renew; "
                                   "cluster: the 3-broker rows alone); several, comma-separated")
    ap.add_argument("--out", help="Markdown output (default benches/sidebyside/results/<quick|full>.md)")
    ap.add_argument("--keep", action="store_true", help="keep the topics and groups afterwards")
    ap.add_argument("--timeout", type=float, default=None, help="seconds per run before giving up")
    ap.add_argument("--warmup-s", type=float, default=None,
                    help="repeat the discarded warm-up round until this many seconds have passed, so a "
                         "freshly started broker is warm before the first measured round "
                         "(default 120; --quick: 20)")
    args = ap.parse_args()

    quick = args.quick
    runs = args.runs or (1 if quick else 3)
    bootstrap = os.environ.get("BOOTSTRAP", "127.0.0.1:9092")
    kafka_version = os.environ.get("KAFKA_VERSION", "4.2.2")
    ours_cmd = os.environ.get("OURS_CMD", "").strip()
    java_opts = shlex.split(os.environ.get("JAVA_OPTS", "-Xms64m -Xmx512m"))
    out = args.out or os.path.join(HERE, "results", f"{'quick' if quick else 'full'}.md")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    session = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d%H%M%S") + "-" + uuid.uuid4().hex[:4]
    logdir = os.path.join(REPO, "target", "sidebyside", session)
    os.makedirs(logdir, exist_ok=True)
    say(f"session {session}, logs in {logdir}")

    env = dict(os.environ, KAFKA_VERSION=kafka_version)
    sh([os.path.join(JAVA_DIR, "build.sh")], env=env)
    with open(os.path.join(JAVA_DIR, "target", kafka_version, "run-classpath.txt")) as f:
        java_cp = f.read().strip()
    # Resolves the broker's jars (tools included) into <repo>/.cache/kafka/jars/<version>.
    sh([KAFKA_SH, "tool", "org.apache.kafka.tools.ShareConsumerPerformance", "--version"],
       stdout=subprocess.DEVNULL, env=env)
    jars = os.path.join(os.environ.get("KAFKA_CACHE", os.path.join(REPO, ".cache", "kafka")), "jars", kafka_version)
    tools_cp = os.path.join(jars, "*")
    java_version = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]

    ctx = dict(session=session, bootstrap=bootstrap, java_cp=java_cp, tools_cp=tools_cp,
               java_opts=java_opts, ours_cmd=ours_cmd, logdir=logdir, groups=[], extra_topics=[], spread={}, layout={},
               quick=quick,
               runs=runs, poll_s=0.1, kafka_version=kafka_version, java_version=java_version,
               date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
               timeout_s=args.timeout or (300 if quick else 1800),
               warmup_s=args.warmup_s if args.warmup_s is not None else (20.0 if quick else 120.0))

    wanted = [w for w in (args.only or "").split(",") if w]
    scs = [s for s in scenarios(quick)
           if (s.cluster == (args.only == "cluster"))
           and (not wanted or args.only == "cluster"
                or any(w.lower() in s.name.lower() or w == s.section for w in wanted))]
    if not scs:
        raise SystemExit(f"no scenario matches --only {args.only!r}")
    if any(c.security != "plaintext" for sc in scs for c in sc.contenders):
        ctx["secure"] = secure_settings(bootstrap, env)
        say(f"TLS rows: SASL_SSL at {ctx['secure']['KAFKA_SASL_SSL_BOOTSTRAP']}, CA "
            f"{ctx['secure']['KAFKA_TLS_CA_FILE']}, client properties {ctx['secure']['KAFKA_CLIENT_PROPERTIES']}")

    judge = Judge(java_cp, bootstrap)
    topics = {}
    results = []
    try:
        for sc in scs:
            if sc.section == "latency":
                continue  # a fresh empty topic per run
            if sc.topic.key not in topics:
                name = f"sbs-{session}-{sc.topic.key}"
                created = judge.ask("create-topic", name, sc.topic.partitions)
                ctx["layout"][name] = created["leaders"]
                say(f"pre-filling {name} with {sc.topic.records} records of {sc.topic.record_size} B")
                prefill(name, sc.topic, bootstrap, logdir)
                ends = judge.ask("end-offsets", name)
                if ends["records"] != sc.topic.records or min(ends["partitions"]) == 0:
                    raise SystemExit(f"{name} holds {ends}, expected {sc.topic.records} records in every partition")
                ctx["spread"][name] = ends["partitions"]
                topics[sc.topic.key] = name
            sc.topic_name = topics[sc.topic.key]

        def active(c):
            return c.kind != "ours" or bool(ours_cmd)

        # A discarded warm-up round: one run per kind of contender (a JVM, the perf tool, ours) and
        # security protocol, on the first scenario it appears in, repeated until `warmup_s` have
        # passed. Every run is a fresh process: this warms the page cache and the broker (its TLS
        # path too), not the contender; a freshly started broker answers share fetches 2-3x
        # slower for its first minutes.
        # Each pass is numbered 0, -1, -2, ... so its groups are fresh (a group that has read the
        # topic has nothing left to read).
        warm_start = time.monotonic()
        warm_pass = 0
        while True:
            warmed = set()
            for sc in scs:
                for c in sc.contenders:
                    if active(c) and (c.kind, c.security) not in warmed and not c.window_s:
                        warmed.add((c.kind, c.security))
                        results.append(run_scenario(judge, c, sc, -warm_pass, True, ctx))
            warm_pass += 1
            if not warmed or time.monotonic() - warm_start >= ctx["warmup_s"]:
                break
        ctx["warmed_s"] = time.monotonic() - warm_start
        for run in range(1, runs + 1):
            for sc in scs:
                cs = [c for c in sc.contenders if active(c)]
                shift = (run - 1) % max(1, len(cs))
                for c in cs[shift:] + cs[:shift]:  # rotate the order between runs
                    results.append(run_scenario(judge, c, sc, run, False, ctx))

        broker_check = verify_with_share_group_command(ctx, env)
        jsonl = os.path.splitext(out)[0] + ".jsonl"
        with open(jsonl, "w") as f:
            for r in results:
                d = dict(r.__dict__)
                d["broker_lag_after"] = broker_check.get(r.group)
                f.write(json.dumps(d) + "\n")
        write_report(out, ctx, scs, results, broker_check, bool(ours_cmd))
        say(f"wrote {out}")
        with open(out) as f:
            print(f.read())
    finally:
        if not args.keep:
            try:
                if ctx["groups"]:
                    judge.ask("delete-groups", *ctx["groups"])
                if topics or ctx["extra_topics"]:
                    judge.ask("delete-topics", *topics.values(), *ctx["extra_topics"])
            except (RuntimeError, SystemExit) as e:
                say(f"clean-up: {e}")
        judge.close()


def verify_with_share_group_command(ctx, env):
    """Total LAG per group from `ShareGroupCommand --describe --offsets` (one JVM for all groups)."""
    groups = ctx["groups"]
    if not groups:
        return {}
    cmd = [KAFKA_SH, "tool", "org.apache.kafka.tools.consumer.group.ShareGroupCommand",
           "--bootstrap-server", ctx["bootstrap"], "--describe", "--offsets"]
    for g in groups:
        cmd += ["--group", g]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    with open(os.path.join(ctx["logdir"], "share-group-command.txt"), "w") as f:
        f.write(proc.stdout + proc.stderr)
    lags = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 5 and parts[0] in groups:
            try:
                lag = int(parts[4])
            except ValueError:  # "-": no state for that partition
                lag = None
            prev = lags.get(parts[0], 0)
            lags[parts[0]] = None if prev is None or lag is None else prev + lag
    return lags


if __name__ == "__main__":
    main()
