#!/usr/bin/env bash
# `make bench`: usher's figures beside their physical anchors, measured in
# the same run on this machine. Starts a private stack on spare ports (NATS
# 14222, Redis 16379, gateway 18080, admitter 18082), runs the anchors
# (redis-benchmark, nats bench), the Go benchmarks and the load scenarios,
# and writes everything to bench-results/ (raw) — BENCHMARKS.md quotes it.
# The goals come first (scripts/bench-goals.sh: each beside its anchor,
# BENCH_ROUNDS rounds, medians); BENCH_ONLY=goals runs only them.
# Loopback only, every step bounded in time. BENCH_OUT: where the results go
# (default bench-results/); BENCH_GATEWAY_BIN: another gateway binary, for
# before/after runs of a change (default bin/gateway).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=${BENCH_OUT:-$root/bench-results}
work=$(mktemp -d /tmp/usher-bench-XXXX)
mkdir -p "$out"
dur=${BENCH_DURATION:-15s}

pids=()
. scripts/private-stack.sh
trap cleanup EXIT INT TERM

# The nats CLI for `nats bench` (built from the Go module proxy once).
natscli=$root/bin/nats
if [ ! -x "$natscli" ]; then
  echo "bench: building the nats CLI (natscli v0.5.0)…" >&2
  GOBIN=$root/bin go install github.com/nats-io/natscli/nats@v0.5.0
fi

# wrk drives the goals' HTTP rounds.
scripts/deps.sh wrk

start_stores bin/nats-server 14222 16379 15432
export USHER_DATA_DIR=$work/data USHER_ADMIN_TOKEN=bench-admin USHER_LOG_LEVEL=warn
export USHER_PAYMENT_URL=http://127.0.0.1:18090
PGSIM_ADDR=127.0.0.1:18090 bin/pgsim >"$work/pgsim.log" 2>&1 & pids+=($!)
USHER_GATE_FILE=$root/scripts/bench/gate.json USHER_GATEWAY_ADDR=127.0.0.1:18080 USHER_PPROF_ADDR=127.0.0.1:16060 "${BENCH_GATEWAY_BIN:-bin/gateway}" >"$work/gateway.log" 2>&1 & pids+=($!)
# A second gateway on the same broker and Redis: two gateways on one queue.
USHER_GATEWAY_ADDR=127.0.0.1:18086 "${BENCH_GATEWAY_BIN:-bin/gateway}" >"$work/gateway2.log" 2>&1 & pids+=($!)
USHER_ADMITTER_ADDR=127.0.0.1:18082 USHER_PPROF_ADDR=127.0.0.1:16062 bin/admitter >"$work/admitter.log" 2>&1 & pids+=($!)
USHER_ORDERWORKER_ADDR=127.0.0.1:18083 bin/orderworker >"$work/orderworker.log" 2>&1 & pids+=($!)
USHER_NOTIFIER_ADDR=127.0.0.1:18081 bin/notifier >"$work/notifier.log" 2>&1 & pids+=($!)
USHER_NOTIFIER_ADDR=127.0.0.1:18091 bin/notifier >"$work/notifier2.log" 2>&1 & pids+=($!)
# The processes whose CPU time bench-goals.sh charges to each join and poll.
export BENCH_PROCS="gateway=${pids[3]} admitter=${pids[5]} nats-server=${pids[0]} redis=${pids[1]}"
# Every process of the stack, PostgreSQL's postmaster among them, for the
# overload goal to pin them apart from its load tools.
export BENCH_STACK_PIDS="${pids[*]} $(head -n 1 "$work/pg/postmaster.pid" 2>/dev/null)"
for _ in $(seq 1 100); do curl -fs http://127.0.0.1:18080/readyz >/dev/null 2>&1 && break; sleep 0.1; done
lt() { bin/loadtest -gateway http://127.0.0.1:18080 -admin-token bench-admin -notifier http://127.0.0.1:18081 \
  -orderworker-metrics http://127.0.0.1:18083/metrics "$@" 2>/dev/null; }

{
echo "# usher bench $(date -u +%FT%TZ) on $(nproc) cores, $(uname -m), $(git rev-parse --short HEAD 2>/dev/null); load:$(uptime | sed 's/.*load average://')"
echo
export out natscli; export -f lt
scripts/bench-goals.sh
[ "${BENCH_ONLY:-}" = goals ] && exit 0
echo
echo "## Anchors"
echo '$ redis-benchmark -p 16379 -c 50 -n 200000 -q -t zadd'
rb() { redis-benchmark -p 16379 -c 50 -n 200000 -q "$@" | tr '\r' '\n' | grep 'per second'; }
rb -t zadd
sha=$(redis-cli -p 16379 SCRIPT LOAD "return redis.call('ZRANK', KEYS[1], ARGV[1])")
redis-cli -p 16379 ZADD anchor:{q}:z 1 a >/dev/null
echo "\$ redis-benchmark -p 16379 -c 50 -n 200000 -q EVALSHA <zrank script> 1 anchor:{q}:z a"
rb EVALSHA "$sha" 1 'anchor:{q}:z' a
echo "\$ redis-benchmark -p 16379 -c 50 -n 200000 -q -P 16 EVALSHA <zrank script> 1 anchor:{q}:z a   (pipelined 16)"
rb -P 16 EVALSHA "$sha" 1 'anchor:{q}:z' a
echo "\$ nats bench js pub async anchor.bench --msgs 200000 --size 256 --clients 2 --create --purge --dedup"
"$natscli" -s nats://127.0.0.1:14222 bench js pub async anchor.bench --msgs 200000 --size 256 --clients 2 --create --purge --dedup --no-progress 2>&1 | grep -E "stats|msgs/sec" || true
echo
echo "## Go benchmarks"
echo '$ go test ./internal/ticket ./internal/token -run ^$ -bench . -benchmem'
go test ./internal/ticket ./internal/token -run '^$' -bench . -benchmem | grep -E '^Benchmark'
echo '$ go test ./internal/waitqueue -run ^$ -bench . -benchtime 20x'
go test ./internal/waitqueue -run '^$' -bench . -benchtime 20x | grep -E '^Benchmark'
echo '$ go test ./gateway -run ^$ -bench "Poll|Join" -benchtime 5000x -benchmem'
go test ./gateway -run '^$' -bench 'Poll|Join' -benchtime 5000x -benchmem | grep -E '^Benchmark'
echo
echo "## Load (bin/loadtest against the private stack)"
for rate in 2000 5000 10000 20000; do
  echo "\$ loadtest -scenario steady -rate $rate -duration $dur"
  lt -scenario steady -rate $rate -duration "$dur" -out "$out/steady-$rate.json"
done
echo "\$ loadtest -scenario spike -rate 10000 -duration 20s"
lt -scenario spike -rate 10000 -duration 20s -out "$out/spike.json" -report "$out/spike.html"
for n in 1000 10000 100000; do
  echo "\$ loadtest -scenario poll -shoppers $n -conns 64 -duration 10s"
  lt -scenario poll -shoppers $n -conns 64 -duration 10s -out "$out/poll-$n.json"
  echo "redis used_memory after $n more waiting: $(redis-cli -p 16379 INFO memory | grep '^used_memory:' | tr -d '\r')"
done
echo "\$ loadtest -scenario paced -shoppers 5000 -duration 30s"
lt -scenario paced -shoppers 5000 -duration 30s -out "$out/paced-5000.json"
echo "\$ loadtest -scenario sse -shoppers 5000 -max-admit-per-tick 0 -duration 60s"
lt -scenario sse -shoppers 5000 -max-admit-per-tick 0 -duration 60s -out "$out/sse-5000.json"
echo "\$ loadtest -scenario journey -vus 20 -duration 60s   (the seed's k6 flow)"
lt -scenario journey -vus 20 -duration 60s -out "$out/journey.json" -report "$out/journey.html"
for b in 14 500 1000; do
  echo "\$ loadtest -scenario batch -shoppers 500 -target-active 500 -max-admit-per-tick $b"
  lt -scenario batch -shoppers 500 -target-active 500 -max-admit-per-tick $b -duration 60s -out "$out/batch-$b.json"
done
} 2>&1 | tee "$out/bench${BENCH_ONLY:+-$BENCH_ONLY}.txt"
