#!/usr/bin/env bash
# The adaptive admission's figures (BENCHMARKS.md, "Adaptive
# admission"): one private stack (NATS, Redis, PostgreSQL, pgsim and every
# service, built from the committed HEAD, on ports 2xxxx), then
#   sweep     the journey under the same load with fixed targetActive
#             values, and with adaptive admission, alternating (ABAB), so
#             every figure is compared within one run of the machine
#   pairs     the best fixed values (ADAPTIVE_PAIRS, "40 80") each followed
#             by an adaptive run, ADAPTIVE_ROUNDS times: ratios of neighbours
#   slowdown  the journey on an adaptive queue while pgsim slows from its
#             normal latency (200 ms mean) to 1 s and back
# Every run is bounded; results (JSON, HTML reports, the summary) go to
# bench-results/adaptive/. The admitter logs every adaptive decision (debug
# level): each adaptive run's are in adaptive-<run>-decisions.jsonl, one
# adaptive.Trace a line, and its summary row counts their reasons.
#
#   scripts/adaptive-bench.sh [sweep|slowdown|all|pairs]
#   scripts/adaptive-bench.sh run -duration 15s -target-active 80   (one journey run, any loadtest flags)
#   ADAPTIVE_VUS=300 ADAPTIVE_DURATION=30s ADAPTIVE_TARGETS="5 10 20 40 80 160" ADAPTIVE_ROUNDS=2
#   ADAPTIVE_REV=<commit> (default HEAD) ADAPTIVE_SCHEDULE=20s=slow:1000,50s=normal ADAPTIVE_SLOW_DURATION=80s
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
what=${1:-all}
out=$root/bench-results/adaptive
vus=${ADAPTIVE_VUS:-300}
dur=${ADAPTIVE_DURATION:-30s}
targets=${ADAPTIVE_TARGETS:-5 10 20 40 80 160}
rounds=${ADAPTIVE_ROUNDS:-2}
bounds=${ADAPTIVE_BOUNDS:-5:160}
work=$(mktemp -d /tmp/usher-adaptive-XXXX)
mkdir -p "$out"

pids=()
. scripts/private-stack.sh
trap cleanup EXIT INT TERM

rev=$(git rev-parse --short "${ADAPTIVE_REV:-HEAD}")
echo "building the services from $rev" >&2
git archive "$rev" | tar -x -C "$work" --one-top-level=src
(cd "$work/src" && go build -o "$work/bin/" ./gateway ./admitter ./notifier ./orderworker ./tools/pgsim ./tools/loadtest ./usherctl \
  && go build -o "$work/bin/nats-server" github.com/nats-io/nats-server/v2)
bin=$work/bin

start_stores "$bin/nats-server" 24222 26379 25432
ADMITTER_LOG_LEVEL=debug
start_services "$bin" 28

lt() { "$bin/loadtest" -scenario journey -gateway http://127.0.0.1:28080 -admin-token bench-admin -notifier http://127.0.0.1:28081 \
  -orderworker-metrics http://127.0.0.1:28083/metrics -pgsim http://127.0.0.1:28090 -pgsim-token bench-pgsim \
  -vus "$vus" -max-admit-per-tick 0 "$@" 2>/dev/null; }

summary=$out/summary.txt
{
echo "# adaptive admission bench, $rev, $(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# journey: $vus VUs, $dur per run, maxAdmitPerTick 0, pgsim normal (log-normal, mean 200 ms, tail 0.5)"
} | tee -a "$summary"

row() { # name file
  python3 - "$1" "$2" <<'EOF' | tee -a "$summary"
import json, sys
name, path = sys.argv[1], sys.argv[2]
r = json.load(open(path))
f, inv = r["figures"], r["invariants"]
order = next(s for s in r["steps"] if s["name"].startswith("order"))
wait = next(s for s in r["steps"] if s["name"].startswith("token"))
lim = [p["limit"] for p in r.get("timeline", []) if p.get("limit")]
tail = lim[len(lim)//3:] or [0]
print(f"{name:>12}  orders/s {f.get('orders per second', 0):7.1f}  order p50 {order['p50Ms']:7.1f}  p99 {order['p99Ms']:7.1f} ms  "
      f"wait p50 {wait['p50Ms']:8.1f} ms  DB hold p99 ≤ {f.get('DB connection hold p99 ms (bucket bound)', float('nan')):5.1f} ms  "
      f"failed {inv.get('failed orders', 0)}  errors {inv.get('journeys that errored', 0)}  over {inv.get('over-admission (sampled)', 0)}  "
      f"limit (last 2/3) {min(tail)}–{max(tail)}")
EOF
}

fixed() { # targetActive round
  echo "\$ loadtest -scenario journey -vus $vus -duration $dur -max-admit-per-tick 0 -target-active $1" >>"$summary"
  lt -duration "$dur" -target-active "$1" -out "$out/fixed-$1-r$2.json"
  row "fixed $1" "$out/fixed-$1-r$2.json"
  sleep 3
}
adaptive() { # name
  echo "\$ loadtest -scenario journey -vus $vus -duration $dur -max-admit-per-tick 0 -target-active 20 -adaptive $bounds" >>"$summary"
  lt -duration "$dur" -target-active 20 -adaptive "$bounds" -out "$out/adaptive-$1.json" -report "$out/adaptive-$1.html"
  row "adaptive" "$out/adaptive-$1.json"
  decisions "$out/adaptive-$1-decisions.jsonl"
  sleep 3
}
decisions() { # file: the last adaptive queue's decisions, as the admitter logged them
  python3 - "$work/admitter.log" "$1" <<'EOF' | tee -a "$summary"
import collections, json, sys
recs = []
for line in open(sys.argv[1]):
    try:
        recs.append(json.loads(line))
    except ValueError:
        pass
started = [r["queue"] for r in recs if r.get("msg") == "adaptive admission started"]
q = started[-1] if started else None
mine = [r for r in recs if r.get("msg") == "adaptive decision" and r.get("queue") == q]
with open(sys.argv[2], "w") as f:
    for r in mine:
        f.write(json.dumps(r) + "\n")
reasons = collections.Counter(r["trace"]["reason"] for r in mine)
print(f"{'':>12}  decisions {len(mine)}: " + ", ".join(f"{k} {v}" for k, v in reasons.most_common()))
EOF
}

if [ "$what" = sweep ] || [ "$what" = all ]; then
  # Fixed values with an adaptive run after every second one (ABAB): the
  # machine's drift during the sweep shows in the adaptive runs' spread.
  for round in $(seq 1 "$rounds"); do
    i=0
    for t in $targets; do
      fixed "$t" "$round"
      i=$((i + 1))
      if [ $((i % 2)) -eq 0 ]; then adaptive "r$round-$i"; fi
    done
  done
fi

if [ "$what" = pairs ]; then
  # The best fixed values against adaptive, each fixed run followed by an
  # adaptive one (F A F A …): adjacent runs share the machine's state, so
  # their ratio is what to read on a shared machine.
  for round in $(seq 1 "$rounds"); do
    for t in ${ADAPTIVE_PAIRS:-40 80}; do
      fixed "$t" "p$round"
      adaptive "p$round-$t"
    done
  done
fi

if [ "$what" = run ]; then
  shift
  echo "\$ loadtest -scenario journey -vus $vus -max-admit-per-tick 0 $*" >>"$summary"
  lt "$@" -out "$out/run.json" -report "$out/run.html"
  row "run" "$out/run.json"
fi

if [ "$what" = slowdown ] || [ "$what" = all ]; then
  sched=${ADAPTIVE_SCHEDULE:-20s=slow:1000,50s=normal}
  sdur=${ADAPTIVE_SLOW_DURATION:-80s}
  q=slowdown-$(date +%s)
  echo "\$ loadtest -scenario journey -vus $vus -duration $sdur -max-admit-per-tick 0 -target-active 20 -adaptive $bounds -pgsim-schedule $sched" >>"$summary"
  lt -queue "$q" -duration "$sdur" -target-active 20 -adaptive "$bounds" -pgsim-schedule "$sched" -out "$out/slowdown.json" -report "$out/slowdown.html"
  row "slowdown" "$out/slowdown.json"
  # The large moves the admitters recorded on USHER_OPS.
  "$bin/usherctl" replay --stream ops --queue "$q" >"$out/slowdown-ops.jsonl"
  echo "usher.ops.limit_changed events: $(grep -c limit_changed "$out/slowdown-ops.jsonl" || true)" | tee -a "$summary"
fi
cp "$work"/*.log "$out/" 2>/dev/null || true
