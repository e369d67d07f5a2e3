#!/usr/bin/env bash
# The drop's figures (BENCHMARKS.md, "Drop: stock-aware admission"): one
# private stack — NATS JetStream, Redis, PostgreSQL, pgsim and every
# service, built from the committed HEAD (the load tool from the working
# tree), on ports 29xxx, loopback only — then
#   5000   loadtest -scenario drop (5,000 shoppers, 500 units, targetActive 20),
#          stock-aware on and off, alternating, ROUNDS times each
#   10500  the same with 10,500 shoppers (10,000 waiting when it sells
#          out), stock-aware on, ROUNDS times
# Every run is bounded (the scenario's own deadline, 3 minutes); results
# (JSON, the text of each run, the summary) go to bench-results/drop/.
#
#   tools/loadtest/drop-bench.sh [all|5000|10500]
#   tools/loadtest/drop-bench.sh run -shoppers 2000 -stock 100     (one run, any loadtest flags)
#   DROP_ROUNDS=3
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
what=${1:-all}
[ $# -gt 0 ] && shift
rounds=${DROP_ROUNDS:-3}
out=$root/bench-results/drop
work=$(mktemp -d /tmp/usher-drop-XXXX)
mkdir -p "$out"
# Both ends of the anchor's 10,000 streams live in the load tool: two
# descriptors a stream.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

pids=()
. scripts/private-stack.sh
trap cleanup EXIT INT TERM

rev=$(git rev-parse --short HEAD)
echo "building the services from HEAD $rev, the load tool from the working tree" >&2
git archive HEAD | tar -x -C "$work" --one-top-level=src
rm -rf "$work/src/tools/loadtest" && cp -r tools/loadtest "$work/src/tools/loadtest"
(cd "$work/src" && go build -o "$work/bin/" ./gateway ./admitter ./notifier ./orderworker ./tools/pgsim ./tools/loadtest \
  && go build -o "$work/bin/nats-server" github.com/nats-io/nats-server/v2)
bin=$work/bin

start_stores "$bin/nats-server" 29222 29379 29432
start_services "$bin" 29

lt() { "$bin/loadtest" -scenario drop -gateway http://127.0.0.1:29080 -admin-token bench-admin -notifier http://127.0.0.1:29081 \
  -nats nats://127.0.0.1:29222 "$@"; }

summary=$out/summary.txt
echo "# drop bench, HEAD $rev, $(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$summary"

one() { # name, loadtest flags…
  local name=$1; shift
  echo "\$ loadtest -scenario drop $*" | tee -a "$summary"
  lt "$@" -out "$out/$name.json" >"$out/$name.txt" 2>"$out/$name.err" || echo "run $name failed: $(tail -n 3 "$out/$name.err")" | tee -a "$summary"
  grep -E '^drop \(|VIOLATED' "$out/$name.txt" | tee -a "$summary" || true
  # The system's own view of the run: what went wrong, if anything.
  grep -hiE 'level=(warn|error)' "$work"/{gateway,admitter,notifier,orderworker}.log 2>/dev/null | tail -n 5 >"$out/$name.logs" || true
}

case $what in
run) one "run-$(date +%s)" "$@" ;;
5000 | all)
  for r in $(seq 1 "$rounds"); do
    one "5000-on-$r"
    one "5000-off-$r" -stock-aware=false
  done
  ;;&
10500 | all)
  for r in $(seq 1 "$rounds"); do
    one "10500-on-$r" -shoppers 10500
  done
  ;;
esac
