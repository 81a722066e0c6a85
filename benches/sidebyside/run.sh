#!/usr/bin/env bash
# Side-by-side share-consumer benchmark against the local broker (see README.md next to this file).
#   benches/sidebyside/run.sh --quick          a few minutes, 1 run per figure
#   benches/sidebyside/run.sh                  the full set, 3 interleaved runs per figure
#   OURS_CMD="target/release/share-worker-bench" benches/sidebyside/run.sh --quick
set -euo pipefail
exec python3 "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/sidebyside.py" "$@"
