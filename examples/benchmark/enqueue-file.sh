#!/usr/bin/env bash
# `luakiq enqueue` of a big file of JSON lines, as a user runs it
# (docs/cli.md, "JSON lines are streamed"): N jobs of ~210 bytes each (an
# id "order-I", a payload of an object with an array and a 100-letter
# note, a score), 24 shards, into a private redis-server. Prints the wall
# time, the client's user CPU, its peak RSS and Redis's CPU, per run.
# Usage: examples/benchmark/enqueue-file.sh [N] [RUNS]
# (default 1000000 jobs, a 214.4 MB file, and 1 run). LUAKIQ_BIN: the binary
# (build-bench's, else build's); LUAKIQ_SCRIPTS=TREE/scripts runs another
# tree's modules with it, for an A/B. Needs python3 (the file) and GNU time.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -z "${LUAKIQ_BIN:-}" ]; then
  for b in build-bench/luakiq build/luakiq; do [ -x "$b" ] && { export LUAKIQ_BIN=$b; break; }; done
fi
[ -x /usr/bin/time ] || { echo "enqueue-file.sh: needs GNU time (apt-get install time)" >&2; exit 2; }
. tools/private-services.sh
private_session
N=${1:-1000000}
RUNS=${2:-1}
mkdir -p "$PRIVATE_TMP/app/workers"
echo 'return { shards_count = 24, perform = function() end }' >"$PRIVATE_TMP/app/workers/Orders.lua"
python3 - "$N" "$PRIVATE_TMP/jobs.jsonl" <<'EOF'
import random, sys
random.seed(1)
n, path = int(sys.argv[1]), sys.argv[2]
with open(path, "w") as f:
    for i in range(n):
        note = "".join(random.choice("abcdefghij") for _ in range(100))
        f.write('{"id":"order-%d","payload":{"customer":"c-%d","items":[{"sku":"sku-%d","qty":%d}],"note":"%s"},"score":%d}\n'
                % (i, i % 5000, i % 997, i % 7 + 1, note, i))
EOF
private_redis_start "$PRIVATE_TMP"
port=${REDIS_URL##*:}
port=${port%/*}
redis_cpu() { redis-cli -p "$port" info cpu | awk -F: '/^used_cpu_(user|sys):/ { s += $2 } END { printf "%.2f", s }'; }
mb=$(awk -v b="$(stat -c %s "$PRIVATE_TMP/jobs.jsonl")" 'BEGIN { printf "%.1f", b / 1e6 }')
echo "luakiq enqueue of $N jobs, a $mb MB file ($LUAKIQ_BIN${LUAKIQ_SCRIPTS:+, scripts $LUAKIQ_SCRIPTS})"
for run in $(seq "$RUNS"); do
  redis-cli -p "$port" flushall >/dev/null
  c0=$(redis_cpu)
  /usr/bin/time -o "$PRIVATE_TMP/time" -f "%e %U %M" \
    "$LUAKIQ_BIN" enqueue "$PRIVATE_TMP/app" Orders "$PRIVATE_TMP/jobs.jsonl" >"$PRIVATE_TMP/out"
  c1=$(redis_cpu)
  read -r wall user rss <"$PRIVATE_TMP/time"
  echo "run $run: $(cat "$PRIVATE_TMP/out"): $wall s wall, client $user s user CPU, peak RSS $((rss / 1024)) MB," \
    "Redis $(awk -v a="$c0" -v b="$c1" 'BEGIN { printf "%.2f", b - a }') s CPU"
done
