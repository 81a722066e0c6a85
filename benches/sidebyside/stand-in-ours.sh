#!/usr/bin/env bash
# A stand-in for our worker, to exercise the OURS_CMD hook before the Rust worker exists. It takes
# exactly the arguments the driver gives OURS_CMD and runs the Java explicit-ack loop with
# max.poll.records = concurrency (record_limit). NOT our worker: label it so if you use it:
#   OURS_NAME="stand-in (Java, 1 thread)" OURS_CMD=benches/sidebyside/stand-in-ours.sh \
#     benches/sidebyside/run.sh --quick --only "P=1, 100 B"
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
args=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --concurrency) args+=(--max-poll-records "$2" --acquire-mode record_limit); shift 2 ;;
    --bootstrap-server|--topic|--group|--records|--handler) args+=("$1" "$2"); shift 2 ;;
    *) echo "stand-in-ours.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
exec "$here/../java/run.sh" ExplicitAckLoop --label "stand-in" "${args[@]}"
