#!/usr/bin/env bash
# The one test command: start a local Kafka broker and a local 3-broker cluster, then format check,
# supply-chain checks (cargo deny), clippy, the Helm chart's checks and every test.
# Each is stopped again on any exit unless it was already running before.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

started=$(date +%s)
step() { printf '\n==> [%4ds] %s\n' "$(($(date +%s) - started))" "$*" >&2; }
# The run takes about 12 GB of disk (10 of them target/, with line tables only: Cargo.toml);
# free space is printed at each phase so that a full disk shows in the log before it fails a test.
free_space() { df -h --output=avail "$repo" | tail -n 1 | tr -d ' '; }
step "disk: $(free_space) free"
if (($(df --output=avail -k "$repo" | tail -n 1) < 12 * 1024 * 1024)); then
  echo "test.sh: warning: less than 12 GB free on $repo's disk; the run may fail with 'no space left on device'" >&2
fi

for component in rustfmt clippy; do
  if ! rustup component list --installed 2>/dev/null | grep -q "^$component"; then
    step "installing the $component component"
    rustup component add "$component"
  fi
done

# cargo-deny checks licenses, bans, sources and advisories (deny.toml); pinned, built from crates.io.
deny_version=0.20.2
if [[ "$(cargo deny --version 2>/dev/null)" != "cargo-deny $deny_version" ]]; then
  step "installing cargo-deny $deny_version"
  cargo install --locked --quiet cargo-deny --version "$deny_version"
fi

# The dashboard's browser tests (worker-cli/tests/ui) drive Debian's headless Chromium; CHROMIUM
# may name another binary.
if [[ -z "${CHROMIUM:-}" ]] && ! command -v chromium >/dev/null 2>&1; then
  step "installing chromium (the dashboard's browser tests)"
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
fi

# The container image test (worker-cli/tests/cli/image.rs) builds the Dockerfile with podman and
# runs it with runc (crun refuses this machine's hybrid cgroups), on a base image made from
# Debian's packages by debootstrap: no image registry is reachable.
if ! command -v podman >/dev/null 2>&1 || ! command -v runc >/dev/null 2>&1 \
    || ! command -v debootstrap >/dev/null 2>&1; then
  step "installing podman, runc and debootstrap (the container image test)"
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq podman runc debootstrap uidmap \
    slirp4netns fuse-overlayfs >/dev/null
fi
export SHARE_WORKER_BASE_IMAGE=${SHARE_WORKER_BASE_IMAGE:-localhost/share-worker-base:bookworm}
step "the container image test's base image ($SHARE_WORKER_BASE_IMAGE)"
bash deploy/base-image.sh "$SHARE_WORKER_BASE_IMAGE"

# cargo-nextest runs the tests (.config/nextest.toml): binaries in parallel, a deadline per test,
# JUnit output in target/nextest/default/junit.xml; pinned, built from crates.io.
nextest_version=0.9.151
if [[ "$(cargo nextest --version 2>/dev/null | head -n 1)" != "cargo-nextest $nextest_version"* ]]; then
  step "installing cargo-nextest $nextest_version"
  cargo install --locked --quiet cargo-nextest --version "$nextest_version" \
    --no-default-features --features default-no-update
fi

# What this script started, stopped again on exit.
stops=()
stop_started() {
  local s
  for s in "${stops[@]}"; do
    step "stopping $s"
    eval "$s"
  done
}
trap stop_started EXIT

if bash scripts/kafka.sh status >/dev/null 2>&1; then
  step "using the Kafka broker that is already running"
else
  stops+=("bash scripts/kafka.sh stop")
  step "starting Kafka"
  bash scripts/kafka.sh start
fi
# The three-broker cluster of the multi-broker tests (tests/tests/cluster.rs), on its own ports.
export KAFKA_CLUSTER_PORT=${KAFKA_CLUSTER_PORT:-9192}
cluster() { KAFKA_BROKERS=3 KAFKA_PORT=$KAFKA_CLUSTER_PORT bash scripts/kafka.sh "$@"; }
if cluster status >/dev/null 2>&1; then
  step "using the 3-broker cluster that is already running"
  cluster resume >/dev/null
else
  stops+=("KAFKA_BROKERS=3 KAFKA_PORT=$KAFKA_CLUSTER_PORT bash scripts/kafka.sh stop")
  step "starting a 3-broker Kafka cluster"
  cluster start
fi
KAFKA_CLUSTER_BOOTSTRAP=$(cluster env | sed -n "s/^export KAFKA_BOOTSTRAP='\\(.*\\)'$/\\1/p")
export KAFKA_CLUSTER_BOOTSTRAP
# A Kafka 4.1 broker, which the worker must refuse at start (tests/tests/old_broker.rs).
old_broker() { KAFKA_VERSION=4.1.2 KAFKA_PORT=9692 bash scripts/kafka.sh "$@"; }
if old_broker status >/dev/null 2>&1; then
  step "using the Kafka 4.1.2 broker that is already running"
else
  stops+=("KAFKA_VERSION=4.1.2 KAFKA_PORT=9692 bash scripts/kafka.sh stop")
  step "starting a Kafka 4.1.2 broker"
  old_broker start
fi
export KAFKA_OLD_BROKER_BOOTSTRAP=127.0.0.1:9692
# A Kafka 4.4 broker for the suites about the broker's own dead-letter queue (KIP-1191:
# tests/tests/broker_dlq.rs, worker-cli/tests/cli/broker_dlq.rs), which fail without it; it also
# serves the 4.4.0 step of the version matrix below, and is stopped on exit.
dlq_version=4.4.0
dlq_port=${KAFKA_DLQ_PORT:-9672}
dlq_broker() { KAFKA_VERSION=$dlq_version KAFKA_PORT=$dlq_port KAFKA_HEAP=${KAFKA_HEAP:-512m} bash scripts/kafka.sh "$@"; }
if dlq_broker status >/dev/null 2>&1; then
  step "using the Kafka $dlq_version broker that is already running"
else
  stops+=("KAFKA_VERSION=$dlq_version KAFKA_PORT=$dlq_port bash scripts/kafka.sh stop")
  step "starting a Kafka $dlq_version broker (broker dead-letter queues)"
  dlq_broker start
fi
export KAFKA_DLQ_BOOTSTRAP=127.0.0.1:$dlq_port
# The broker's listeners, certificates and SASL user for tests (`scripts/kafka.sh env`); a
# KAFKA_BOOTSTRAP set by the caller wins.
bootstrap=${KAFKA_BOOTSTRAP:-}
eval "$(bash scripts/kafka.sh env)"
export KAFKA_BOOTSTRAP=${bootstrap:-$KAFKA_BOOTSTRAP}

step "cargo fmt --check"
cargo fmt --all --check

# The RustSec advisory database is the snapshot committed next to this script, never fetched:
# cloned afresh each run into the directory cargo-deny derives from `db-urls` in deny.toml, then
# checked with --offline (no crate, index or database fetch; `cargo fetch` brings the crates first).
advisory_bundle=scripts/supply-chain/advisory-db.bundle
advisory_db=.cache/advisory-dbs/advisory-db-3157b0e258782691
rm -rf "$advisory_db"
mkdir -p "$(dirname "$advisory_db")"
git clone --quiet "$advisory_bundle" "$advisory_db"
snapshot=$(git -C "$advisory_db" log -1 --format=%cs)
step "cargo deny check (advisories: RustSec snapshot of $snapshot)"
cargo fetch --locked --quiet
cargo deny --offline check

step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --all-features -- -D warnings

# The library builds without librdkafka (feature `rdkafka` off): no C toolchain, no OpenSSL.
step "worker-core without librdkafka"
cargo clippy -p worker-core --no-default-features -- -D warnings
if cargo tree -p worker-core --no-default-features -e normal | grep -E 'rdkafka|openssl-sys'; then
  echo "worker-core without its rdkafka feature still depends on librdkafka or OpenSSL" >&2
  exit 1
fi
# Nor do the native client (worker-kafka), the probes an application mounts (worker-ops) and the
# KEDA scaler (worker-scaler).
for crate in worker-kafka worker-ops worker-scaler; do
  if cargo tree -p "$crate" -e normal | grep -E 'rdkafka|openssl-sys'; then
    echo "$crate depends on librdkafka or OpenSSL" >&2
    exit 1
  fi
done

# The Helm chart: linted, rendered with each CI values file, validated against the Kubernetes and
# KEDA schemas offline (helm from the Go module proxy, kubernetes-validate from PyPI; pinned).
step "the Helm chart (deploy/check.sh)"
bash deploy/check.sh

# Every intra-doc link resolves (the crates' docs as docs.rs builds them: every feature on).
step "cargo doc (broken links are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --all-features --quiet

# The fleet-rate tests bound what ten worker processes start in every second: they run alone,
# one at a time, after the rest, so that what they measure is the workers' timing and not other
# tests' load on two cores.
fleet_rates='package(worker-cli) & binary(cli) & test(/^fleet_rates::/)'
step "cargo nextest run (every test but the fleet rates), then the doc tests (disk: $(free_space) free)"
cargo nextest run --workspace --all-features -E "not ($fleet_rates)"
cargo test --workspace --all-features --doc
step "the fleet-rate tests, one at a time"
cargo nextest run --workspace --all-features -E "$fleet_rates" --test-threads 1

# The version matrix: the real-broker suites of the native client, the admin client, the runtime,
# the dead-letter sink and the binary again on each newer Kafka release, each on a broker of its
# own (KAFKA_MATRIX: the releases, space-separated; empty to skip). The broker-DLQ suites ran
# above, on the 4.4 broker; the binary's run again in each step (its refusal of broker mode
# against the step's release).
# One filter over the workspace's test binaries, built above: the same build, nothing recompiled.
matrix_suites='package(tests) & (binary(kafka_client) | binary(admin) | binary(runtime_kafka) | binary(policy) | binary(dlq) | binary(renewal_off))'
matrix_binary="package(worker-cli) & binary(cli) & not test(/^ui::/) & not ($fleet_rates)"
matrix_port=9592
for version in ${KAFKA_MATRIX-4.3.1 4.4.0}; do
  step "Kafka $version: the native client, admin, runtime, DLQ and binary suites (disk: $(free_space) free)"
  port=$matrix_port
  # The broker-DLQ broker is this release's: it serves the step, and stays up for the others.
  [[ $version == "$dlq_version" ]] && port=$dlq_port
  broker() { KAFKA_VERSION=$version KAFKA_PORT=$port bash scripts/kafka.sh "$@"; }
  if [[ $port != "$dlq_port" ]]; then
    stops+=("KAFKA_VERSION=$version KAFKA_PORT=$port bash scripts/kafka.sh stop")
    broker start
  fi
  (
    eval "$(broker env)"
    export KAFKA_VERSION=$version
    cargo nextest run --workspace --all-features -E "($matrix_suites) | ($matrix_binary)"
  )
  [[ $port == "$dlq_port" ]] || broker stop
  matrix_port=$((matrix_port + 10))
done
step "done"
