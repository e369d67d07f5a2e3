#!/usr/bin/env bash
# Installs what usher's tests and `make run` need that Go modules cannot
# bring: redis-server and redis-benchmark, chromium for the waiting-room
# page's browser test, node for the JavaScript client's tests (Node.js 20
# or later: Debian 13's nodejs), nginx and caddy for the proxy gate's
# end-to-end tests, and PostgreSQL when the machine lacks it (Debian
# packages). NATS comes from the Go module github.com/nats-io/nats-server/v2.
# Arguments name more commands to install when missing, each a Debian
# package of the same name (scripts/bench.sh: wrk).
set -euo pipefail

need=()
for cmd in "$@"; do command -v "$cmd" >/dev/null 2>&1 || need+=("$cmd"); done
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v redis-benchmark >/dev/null 2>&1 || need+=(redis-tools)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need+=(nginx)
command -v caddy >/dev/null 2>&1 || need+=(caddy)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
[ ${#need[@]} -eq 0 ] && exit 0

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "deps: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >/dev/null
$sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
