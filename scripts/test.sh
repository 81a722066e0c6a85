#!/usr/bin/env bash
# The one test command: start a local Kafka broker, then format check, clippy and every test.
# The broker is stopped again on any exit unless it was already running before.
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

if bash scripts/kafka.sh status >/dev/null 2>&1; then
  step "using the Kafka broker that is already running"
else
  trap 'step "stopping Kafka"; bash scripts/kafka.sh stop' EXIT
  step "starting Kafka"
  bash scripts/kafka.sh start
fi
export KAFKA_BOOTSTRAP=${KAFKA_BOOTSTRAP:-127.0.0.1:${KAFKA_PORT:-9092}}

step "cargo fmt --check"
cargo fmt --all --check

step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --all-features -- -D warnings

step "cargo test"
cargo test --workspace --all-features
