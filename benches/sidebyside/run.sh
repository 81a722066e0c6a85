#!/usr/bin/env bash
# Side-by-side share-consumer benchmark against the local broker (see README.md next to this file).
#   benches/sidebyside/run.sh --quick          a few minutes, 1 run per figure
#   benches/sidebyside/run.sh                  the full set, 3 interleaved runs per figure
# Our contender is benches/src/bin/bench_worker.rs, built in release mode here unless OURS_CMD
# names another command.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
if [[ -z ${OURS_CMD:-} ]]; then
  echo "run.sh: building bench_worker (release)" >&2
  cargo build --quiet --release --manifest-path "$repo/Cargo.toml" -p benches --bin bench_worker
  export OURS_CMD="$repo/target/release/bench_worker"
fi
exec python3 "$here/sidebyside.py" "$@"
