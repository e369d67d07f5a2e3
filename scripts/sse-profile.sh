#!/usr/bin/env bash
# The READY path under the goals' load, profiled (BENCHMARKS.md, "Push"):
# a private stack (NATS 24222, Redis 26379, PostgreSQL 25432, services on
# 22080–22090), SHOPPERS shoppers (19,000) on
# SSE streams, admitted PER_TICK (500) per 100 ms tick; CPU profiles of the
# notifier, the admitter and nats-server over PROFILE_SECONDS (5) from the
# first admission, and each process's CPU time from /proc/<pid>/stat over
# the whole admission phase (in cores). About 90 s; run after make build.
#
#   scripts/sse-profile.sh
#   SHOPPERS=19000 PER_TICK=250 scripts/sse-profile.sh
#
# Output in bench-results/sse-profile/: lt.txt (the load tool's report),
# sse.json, cpu.txt, {notifier,admitter,nats}.pprof, notifier-heap.pprof
# (every stream open, before the first admission) and
# notifier-metrics-idle.txt (its metrics then), notifier-metrics.txt
# (usher_ready_delivery_seconds, usher_admission_event_lag_seconds).
set -euo pipefail
cd "$(dirname "$0")/.."
for b in nats-server admitter notifier gateway loadtest; do
  [ -x "bin/$b" ] || { echo "sse-profile: bin/$b missing; run make build" >&2; exit 1; }
done
work=$(mktemp -d); pids=()
# shellcheck source=scripts/private-stack.sh
source scripts/private-stack.sh
trap cleanup EXIT
start_stores bin/nats-server 24222 26379 25432 --profile 26065
start_services bin 22
out=bench-results/sse-profile; rm -rf "$out"; mkdir -p "$out"
# The admitter and the notifier again (pids 3 and 6: see start_services),
# each with a profile port.
kill "${pids[3]}" "${pids[6]}"; sleep 1
USHER_PPROF_ADDR=127.0.0.1:26062 USHER_ADMITTER_ADDR=127.0.0.1:22082 bin/admitter >"$work/admitter2.log" 2>&1 & pids+=($!)
USHER_PPROF_ADDR=127.0.0.1:26063 USHER_NOTIFIER_ADDR=127.0.0.1:22081 bin/notifier >"$work/notifier2.log" 2>&1 & pids+=($!)
for _ in $(seq 1 50); do curl -fs http://127.0.0.1:22081/readyz >/dev/null 2>&1 && break; sleep 0.2; done

bin/loadtest -gateway http://127.0.0.1:22080 -admin-token bench-admin -notifier http://127.0.0.1:22081 \
  -scenario sse -shoppers "${SHOPPERS:-19000}" -max-admit-per-tick "${PER_TICK:-500}" -duration 60s -anchor=false \
  -out "$out/sse.json" >"$out/lt.txt" 2>&1 & lt=$!
until grep -q admitting "$out/lt.txt" 2>/dev/null; do sleep 0.1; done
# Every stream is open and idle: the notifier's heap, and its goroutines.
curl -s "http://127.0.0.1:26063/debug/pprof/heap" -o "$out/notifier-heap.pprof"
curl -s "http://127.0.0.1:22081/metrics" -o "$out/notifier-metrics-idle.txt"
s=${PROFILE_SECONDS:-5}
curl -s "http://127.0.0.1:26063/debug/pprof/profile?seconds=$s" -o "$out/notifier.pprof" & profs=($!)
curl -s "http://127.0.0.1:26062/debug/pprof/profile?seconds=$s" -o "$out/admitter.pprof" & profs+=($!)
curl -s "http://127.0.0.1:26065/debug/pprof/profile?seconds=$s" -o "$out/nats.pprof" & profs+=($!)
# CPU ticks (utime + stime) of each process, and the machine's.
ticks() { for p in "${pids[@]}" "$lt"; do [ -r "/proc/$p/stat" ] && echo "$p $(cat "/proc/$p/comm") $(awk '{print $14 + $15}' "/proc/$p/stat")"; done; return 0; }
ticks >"$work/t0"; head -1 /proc/stat >"$work/s0"; t0=$(date +%s.%N)
while ! grep -q "READY delivery" "$out/lt.txt" 2>/dev/null && kill -0 "$lt" 2>/dev/null; do
  ticks >"$work/t1"; head -1 /proc/stat >"$work/s1"; t1=$(date +%s.%N); sleep 0.1
done
wait "$lt" || true
wait "${profs[@]}" || true
{
  d=$(echo "$t1 - $t0" | bc)
  echo "CPU over the admission phase ($d s), in cores:"
  join <(sort "$work/t0") <(sort "$work/t1") | awk -v d="$d" '{printf "  %-14s %.2f\n", $2, ($5 - $3) / 100 / d}'
  paste "$work/s0" "$work/s1" | awk '{t = 0; for (i = 2; i <= 11; i++) t += $(i + 11) - $i; printf "  machine idle   %.1f %%\n", 100 * ($16 - $5) / t}'
} >"$out/cpu.txt"
curl -s http://127.0.0.1:22081/metrics >"$out/notifier-metrics.txt"
cat "$out/lt.txt" "$out/cpu.txt"
grep -E '^usher_(ready_delivery|admission_event_lag)_seconds_(bucket|count)' "$out/notifier-metrics.txt" | sed 's/^/  /'
echo "profiles: go tool pprof -top bin/notifier $out/notifier.pprof (admitter, nats: bin/admitter, bin/nats-server)"
