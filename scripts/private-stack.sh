# Sourced by the benchmark scripts (scripts/bench.sh, scripts/adaptive-bench.sh,
# tools/loadtest/drop-bench.sh): a private stack on loopback, torn down on exit.
# The caller sets work (a scratch folder) and pids=() and traps cleanup.

# cleanup stops what was started and removes the scratch folder.
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; stop_pg; rm -rf "$work"; }
stop_pg() { :; }

# start_stores NATS_SERVER NATS_PORT REDIS_PORT PG_PORT [NATS_ARGS…] starts NATS
# JetStream (file store), Redis (no persistence) and a throwaway PostgreSQL
# cluster (durable commits, as in production) with database usher, and
# exports the services' URLs for them.
start_stores() {
  local nats_server=$1 nats_port=$2 redis_port=$3 pg_port=$4
  shift 4 # the rest: more nats-server arguments (--profile PORT, say)
  "$nats_server" -a 127.0.0.1 -p "$nats_port" -js -sd "$work/js" "$@" >"$work/nats.log" 2>&1 & pids+=($!)
  redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" >"$work/redis.log" 2>&1 & pids+=($!)
  pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
  mkdir -p "$work/pg"; [ "$(id -u)" -eq 0 ] && chown postgres "$work" "$work/pg"
  as_pg "$pgbin/initdb" -D "$work/pg" -U postgres --auth=trust >/dev/null
  as_pg "$pgbin/pg_ctl" -D "$work/pg" -l "$work/pg.log" -o "-h 127.0.0.1 -p $pg_port -k $work/pg -c max_connections=200" -w start >/dev/null
  stop_pg() { as_pg "$pgbin/pg_ctl" -D "$work/pg" -m fast stop >/dev/null 2>&1 || true; }
  as_pg "$pgbin/createdb" -h 127.0.0.1 -p "$pg_port" -U postgres usher
  sleep 1
  export USHER_NATS_URL=nats://127.0.0.1:$nats_port USHER_REDIS_URL=redis://127.0.0.1:$redis_port/0
  export USHER_DATABASE_URL="postgres://postgres@127.0.0.1:$pg_port/usher?sslmode=disable"
}

# start_services BIN P starts pgsim (admin token bench-pgsim) and one of
# each service from folder BIN on ports P080 (gateway), P081 (notifier),
# P082 (admitter), P083 (order worker) and P090 (pgsim), admin token
# bench-admin, and waits until the gateway and the order worker are ready.
# Every service logs at warn; the admitter at ADMITTER_LOG_LEVEL if set.
start_services() {
  local bin=$1 p=$2
  export USHER_DATA_DIR=$work/data USHER_ADMIN_TOKEN=bench-admin USHER_LOG_LEVEL=warn
  export USHER_PAYMENT_URL=http://127.0.0.1:${p}090
  PGSIM_ADDR=127.0.0.1:${p}090 PGSIM_ADMIN_TOKEN=bench-pgsim "$bin/pgsim" >"$work/pgsim.log" 2>&1 & pids+=($!)
  USHER_ADMITTER_ADDR=127.0.0.1:${p}082 USHER_LOG_LEVEL=${ADMITTER_LOG_LEVEL:-warn} "$bin/admitter" >"$work/admitter.log" 2>&1 & pids+=($!)
  sleep 1
  USHER_GATEWAY_ADDR=127.0.0.1:${p}080 USHER_NOTIFIER_PUBLIC_URL=http://127.0.0.1:${p}081 "$bin/gateway" >"$work/gateway.log" 2>&1 & pids+=($!)
  USHER_ORDERWORKER_ADDR=127.0.0.1:${p}083 "$bin/orderworker" >"$work/orderworker.log" 2>&1 & pids+=($!)
  USHER_NOTIFIER_ADDR=127.0.0.1:${p}081 "$bin/notifier" >"$work/notifier.log" 2>&1 & pids+=($!)
  for _ in $(seq 1 150); do curl -fs http://127.0.0.1:${p}080/readyz >/dev/null 2>&1 && curl -fs http://127.0.0.1:${p}083/readyz >/dev/null 2>&1 && break; sleep 0.2; done
}
