#!/usr/bin/env bash
# The quickstart: a local broker, the topics, a mock SMS gateway, 10,000 SMS jobs, and the worker
# configured by examples/sms.toml until it is idle. Prints what happened, then stops what it started.
#
#   scripts/quickstart.sh            JOBS=10000 by default; KAFKA_PORT picks the broker's port
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
jobs=${JOBS:-10000}
bootstrap=127.0.0.1:${KAFKA_PORT:-9092}
work=$(mktemp -d)
step() { printf '\n==> %s\n' "$*" >&2; }

pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  if [[ ${started_kafka:-0} == 1 ]]; then step "stopping Kafka"; bash scripts/kafka.sh stop; fi
  rm -rf "$work"
}
trap cleanup EXIT

if bash scripts/kafka.sh status >/dev/null 2>&1 || (exec 3<>"/dev/tcp/${bootstrap%:*}/${bootstrap##*:}") 2>/dev/null; then
  step "using the Kafka broker that is already running"
else
  step "starting Kafka"
  bash scripts/kafka.sh start
  started_kafka=1
fi

step "building share-worker and the mock SMS gateway"
cargo build -q -p worker-cli --bin share-worker
cargo build -q -p examples --bin mock_sms_gateway
bin=$repo/target/debug

step "starting the mock SMS gateway (20 ms latency, 5% 429/503)"
"$bin/mock_sms_gateway" 127.0.0.1:8080 20 5 &
pids+=($!)

export SHARE_WORKER__KAFKA__BOOTSTRAP=$bootstrap
step "share-worker setup"
"$bin/share-worker" setup --config examples/sms.toml

step "share-worker produce: $jobs SMS jobs"
"$bin/share-worker" produce --bootstrap "$bootstrap" --topic sms --count "$jobs" --size 120

step "share-worker run until idle for 10s"
"$bin/share-worker" run --config examples/sms.toml --exit-when-idle 10s --stats-json "$work/stats.json"

step "result"
python3 - "$work/stats.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print(f"processed {s['processed']}  accepted {s['accepted']}  retried {s['retried']}  "
      f"dlq {s['dlq']}  throughput ~{s['rate_per_s']:.0f} jobs/s")
PY
