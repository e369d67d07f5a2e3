#!/usr/bin/env bash
# `make run`: the whole of usher on this machine, in the foreground.
# Starts NATS (JetStream on disk), Redis and PostgreSQL unless something
# already answers at their addresses, then every service, then creates the
# queue `demo`. Ctrl-C stops everything it started.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

export USHER_DATA_DIR=${USHER_DATA_DIR:-$root/.usher}
export USHER_NATS_URL=${USHER_NATS_URL:-nats://127.0.0.1:4222}
export USHER_REDIS_URL=${USHER_REDIS_URL:-redis://127.0.0.1:6379/0}
export USHER_DATABASE_URL=${USHER_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/usher?sslmode=disable}
export USHER_GATEWAY_ADDR=${USHER_GATEWAY_ADDR:-127.0.0.1:8080}
export USHER_NOTIFIER_ADDR=${USHER_NOTIFIER_ADDR:-127.0.0.1:8081}
export USHER_ADMITTER_ADDR=${USHER_ADMITTER_ADDR:-127.0.0.1:8082}
export USHER_ORDERWORKER_ADDR=${USHER_ORDERWORKER_ADDR:-127.0.0.1:8083}
export USHER_PAYMENT_URL=${USHER_PAYMENT_URL:-http://127.0.0.1:8090}
export PGSIM_ADDR=${PGSIM_ADDR:-127.0.0.1:8090}
export USHER_ADMIN_TOKEN=${USHER_ADMIN_TOKEN:-dev-admin-token}
export USHER_NOTIFIER_PUBLIC_URL=${USHER_NOTIFIER_PUBLIC_URL:-http://$USHER_NOTIFIER_ADDR}
# The downstream readers: nats-auth gives each a key, the admitter declares
# each a durable consumer (examples/downstream is example-downstream).
export USHER_DOWNSTREAM_READERS=${USHER_DOWNSTREAM_READERS:-example-downstream}
logs=$USHER_DATA_DIR/logs
mkdir -p "$logs"

pids=()
stop_all() {
  trap - INT TERM EXIT
  echo
  echo "stopping…"
  for ((i=${#pids[@]}-1; i>=0; i--)); do kill -TERM "${pids[i]}" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ -n "${pg_started:-}" ]; then pgctl stop -m fast >/dev/null 2>&1 || true; fi
  echo "stopped."
  exit 0
}
trap stop_all INT TERM EXIT

# answers HOST:PORT — something accepts TCP connections there.
answers() { (exec 3<>"/dev/tcp/${1%:*}/${1##*:}") 2>/dev/null; }
hostport() { local u=${1#*://}; u=${u#*@}; u=${u%%/*}; echo "${u%%\?*}"; }

start() { # name, command…
  local name=$1; shift
  "$@" >>"$logs/$name.log" 2>&1 &
  pids+=($!)
}

wait_for() { # what, HOST:PORT
  for _ in $(seq 1 100); do answers "$2" && return 0; sleep 0.1; done
  echo "$1 did not come up on $2; see $logs" >&2
  exit 1
}

# NATS with authentication: every service connects with an NKey of its own
# (generated on first start, <data>/nats/<service>.nk, the default of
# USHER_NATS_NKEY_FILE) and holds only its role's permissions, written from
# the code into <data>/nats/auth.conf at every start.
nats_addr=$(hostport "${USHER_NATS_URL%%,*}")
natsdir=$USHER_DATA_DIR/nats
if answers "$nats_addr"; then
  echo "nats:        using the server at $nats_addr"
else
  bin/usherctl nats-auth --dir "$natsdir" --base nats.conf >>"$logs/nats-auth.log"
  start nats-server bin/nats-server -c "$natsdir/nats.conf"
  wait_for nats "$nats_addr"
  echo "nats:        started on $nats_addr (NKey auth: keys in $natsdir; JetStream in .usher/nats, monitor http://127.0.0.1:8222)"
fi

# Redis with ACL users: every service connects as its own user
# (usher-<service>, with a password generated on first start in
# <data>/redis/usher-<service>.pass, where the service finds it) holding only
# its commands and keys; users.acl is written from the code (internal/redisacl)
# at every start, and the default user is off. People use usher-admin.
redis_addr=$(hostport "$USHER_REDIS_URL")
redisdir=$USHER_DATA_DIR/redis
redis_admin() { REDISCLI_AUTH=$(cat "$redisdir/usher-admin.pass" 2>/dev/null) redis-cli --user usher-admin \
  -h "${redis_addr%:*}" -p "${redis_addr##*:}" "$@"; }
if answers "$redis_addr"; then
  if [ -f "$redisdir/usher-admin.pass" ] && [ "$(redis_admin ping 2>/dev/null)" != PONG ]; then
    echo "redis:       the server at $redis_addr does not know usher's users, whose passwords are in $redisdir:" >&2
    echo "             stop it (make run starts its own, with $redisdir/users.acl), or move $redisdir/*.pass away" >&2
    exit 1
  fi
  echo "redis:       using the server at $redis_addr"
else
  bin/usherctl redis-acl --dir "$redisdir" >>"$logs/redis-acl.log"
  start redis-server redis-server --bind "${redis_addr%:*}" --port "${redis_addr##*:}" \
    --dir "$redisdir" --appendonly yes --save "" --aclfile "$redisdir/users.acl"
  wait_for redis "$redis_addr"
  # Answering TCP is not enough: a Redis replaying its AOF answers LOADING.
  for _ in $(seq 1 300); do
    [ "$(redis_admin ping 2>/dev/null)" = PONG ] && break
    sleep 0.1
  done
  echo "redis:       started on $redis_addr (ACL users: passwords in $redisdir; AOF in .usher/redis)"
fi

# PostgreSQL: a throwaway cluster in the data folder, trust auth on loopback.
pg_addr=$(hostport "$USHER_DATABASE_URL")
pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
pgdata=$USHER_DATA_DIR/pg
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
pgctl() { as_pg "$pgbin/pg_ctl" -D "$pgdata" "$@"; }
if answers "$pg_addr"; then
  echo "postgresql:  using the server at $pg_addr"
elif [ -n "$pgbin" ]; then
  if [ ! -f "$pgdata/PG_VERSION" ]; then
    mkdir -p "$pgdata"
    # As root, PostgreSQL runs as postgres, which must pass through the
    # data folder (a tool that made it first may have made it 0700; its
    # secrets keep their own modes).
    [ "$(id -u)" -eq 0 ] && chown postgres "$pgdata" && chmod o+x "$USHER_DATA_DIR"
    as_pg "$pgbin/initdb" -D "$pgdata" -U postgres --auth=trust >"$logs/initdb.log" 2>&1
  fi
  pgctl -l "$pgdata/server.log" -o "-h ${pg_addr%:*} -p ${pg_addr##*:} -k /tmp -c max_connections=200" -w start >/dev/null
  pg_started=1
  as_pg "$pgbin/psql" -h "${pg_addr%:*}" -p "${pg_addr##*:}" -U postgres -tAc \
    "SELECT 1 FROM pg_database WHERE datname='usher'" | grep -q 1 ||
    as_pg "$pgbin/createdb" -h "${pg_addr%:*}" -p "${pg_addr##*:}" -U postgres usher
  # Least privilege, set up as a DBA would: usher_owner owns the schema and
  # migrates it (bin/usherctl migrate); each service connects as its own
  # role, which may only do its rows' work (internal/orders/migrations/
  # 0003_roles.sql). Tables an older data folder made as postgres move to
  # the owner. Trust auth on loopback: this cluster is for development.
  # The same roles as compose's (deploy/compose/pg-roles.sql, idempotent).
  as_pg "$pgbin/psql" -q -v ON_ERROR_STOP=1 -h "${pg_addr%:*}" -p "${pg_addr##*:}" -U postgres -d usher \
    >>"$logs/pg-roles.log" <deploy/compose/pg-roles.sql
  pg_role_url() { echo "postgres://$1@$pg_addr/usher?sslmode=disable"; }
  export USHER_DATABASE_MIGRATE_URL=${USHER_DATABASE_MIGRATE_URL:-$(pg_role_url usher_owner)}
  bin/usherctl migrate >>"$logs/migrate.log"
  db_gateway=$(pg_role_url usher_gateway) db_admitter=$(pg_role_url usher_admitter)
  db_orderworker=$(pg_role_url usher_orderworker)
  echo "postgresql:  started on $pg_addr (cluster in .usher/pg; schema owned by usher_owner, services as their own roles)"
else
  echo "postgresql:  not installed; the order path will not be ready" >&2
fi

start pgsim bin/pgsim
start admitter env USHER_DATABASE_URL="${db_admitter:-$USHER_DATABASE_URL}" bin/admitter
start orderworker env USHER_DATABASE_URL="${db_orderworker:-$USHER_DATABASE_URL}" bin/orderworker
start notifier bin/notifier
start gateway env USHER_DATABASE_URL="${db_gateway:-$USHER_DATABASE_URL}" bin/gateway
wait_for gateway "$USHER_GATEWAY_ADDR"
wait_for notifier "$USHER_NOTIFIER_ADDR"

curl -fsS -X PUT "http://$USHER_GATEWAY_ADDR/v1/admin/queues/demo" \
  -H "Authorization: Bearer $USHER_ADMIN_TOKEN" -H 'Content-Type: application/json' \
  -d '{"targetActive": 20, "maxAdmitPerTick": 14, "tickMs": 100, "tokenTtlSeconds": 300, "sku": "demo-sku", "maxQuantity": 1}' >/dev/null
curl -fsS -X PUT "http://$USHER_GATEWAY_ADDR/v1/admin/stock/demo-sku" \
  -H "Authorization: Bearer $USHER_ADMIN_TOKEN" -H 'Content-Type: application/json' \
  -d '{"available": 1000}' >/dev/null || echo "stock for demo-sku not seeded (is PostgreSQL up?)" >&2

cat <<MSG

usher is running.
  gateway      http://$USHER_GATEWAY_ADDR      (API, JWKS at /.well-known/jwks.json)
  notifier     http://$USHER_NOTIFIER_ADDR      (Server-Sent Events)
  admitter     http://$USHER_ADMITTER_ADDR      (/metrics, /readyz)
  orderworker  http://$USHER_ORDERWORKER_ADDR      (/metrics, /readyz)
  pgsim        http://$PGSIM_ADDR      (payment-gateway simulator)
  admin token  $USHER_ADMIN_TOKEN
  nats keys    $USHER_DATA_DIR/nats/<role>.nk   (bin/usherctl and examples/downstream -nkey use theirs)
  redis users  $USHER_DATA_DIR/redis/<user>.pass   (redis-cli: REDISCLI_AUTH=\$(cat $USHER_DATA_DIR/redis/usher-admin.pass) redis-cli --user usher-admin)
  logs         $logs/

Queue "demo" is open and sells demo-sku (1000 in stock). Try:
  open  http://$USHER_GATEWAY_ADDR/q/demo       the waiting-room page
  open  http://$USHER_GATEWAY_ADDR/ops          the ops dashboard (admin token above)
  curl -si -X POST http://$USHER_GATEWAY_ADDR/v1/queues/demo/tickets -H 'X-User-Id: alice'

Ctrl-C stops everything.
MSG
wait -n "${pids[@]}" || true
echo "a process exited; see $logs" >&2
