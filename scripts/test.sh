#!/usr/bin/env bash
# The one test command: start a local Kafka broker and a local 3-broker cluster, then format check,
# supply-chain checks (cargo deny), clippy and every test.
# Each is stopped again on any exit unless it was already running before.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

step() { printf '\n==> %s\n' "$*" >&2; }

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

step "cargo test"
cargo test --workspace --all-features
