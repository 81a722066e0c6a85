#!/usr/bin/env bash
# The soak (RELIABILITY scenario 13): MINUTES (default 30) of steady production, 1 % panics, 0.1 %
# poison records and a SIGKILL of the worker every few minutes; passes when nothing is lost and the
# worker's memory stays flat. Starts the local broker unless one answers (and then stops it).
#
#   scripts/soak.sh [MINUTES]
set -euo pipefail
cd "$(dirname "$0")/.."
minutes="${1:-30}"
started_broker=0
if ! bash scripts/kafka.sh status >/dev/null 2>&1; then
  bash scripts/kafka.sh start
  started_broker=1
fi
cleanup() { if [ "$started_broker" = 1 ]; then bash scripts/kafka.sh stop; fi; }
trap cleanup EXIT
SOAK_MINUTES="$minutes" cargo test -p tests --test soak -- --nocapture
