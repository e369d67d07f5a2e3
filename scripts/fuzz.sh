#!/usr/bin/env bash
# Fuzzes every fuzz target briefly: `make fuzz` (FUZZTIME, default 20000x
# each). `make test` runs it with FUZZ_SCOPE=parsers: only the targets
# whose tests start no server — the parsers of what arrives from outside
# (bodies, headers, tickets, tokens, events, proofs, the page's forms).
# The others drive the whole gateway or notifier through real NATS and
# Redis; fuzzing them instruments nats-server (embedded by testenv) and
# every dependency of the app, minutes of compiling on a cold build cache
# (six of a fresh `make test`'s twenty), while their seed corpora and every
# crasher kept in testdata/fuzz run in `go test` all the same.
#
# A crasher lands in the package's testdata/fuzz and becomes a regular
# test case from then on. A count, not a duration: a duration-bounded run
# can end with a spurious "context deadline exceeded" failure when its
# deadline meets a worker mid-step; a count has no deadline.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-20000x}
scope=${FUZZ_SCOPE:-all}
fuzzbin=$(mktemp -d)
trap 'rm -rf "$fuzzbin"' EXIT
fuzzcache=$(go env GOCACHE)/fuzz # where go test -fuzz keeps its corpus
go list -f '{{.Dir}}' ./... ./tools/... | while read -r dir; do
  pkg="./${dir#"$PWD"/}"
  # (|| true: a package without test files makes grep fail, which
  # pipefail and set -e would turn into the script's exit.)
  targets=$(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u || true)
  [ -n "$targets" ] || continue
  if [ "$scope" = parsers ] && go list -deps -test "$pkg" | grep -q '^github.com/nats-io/nats-server/'; then
    echo "fuzz $pkg: its targets run real servers (make fuzz fuzzes them; go test ran their corpus)"
    continue
  fi
  # One fuzzing binary per package, built outside the runs' time limit (it
  # instruments every dependency) and run once per target, as go test
  # -fuzz runs it (from the package's folder, so a crasher lands in its
  # testdata/fuzz). go test -fuzz would link it again for every target.
  set -- $targets
  bin="$fuzzbin/${pkg//\//_}.test"
  # (-trimpath, -vet=off, -ldflags=-w: see scripts/test.sh.)
  go test "$pkg" -trimpath -vet=off -ldflags=-w -c -o "$bin" -fuzz "^$1\$"
  for target in $targets; do
    echo "fuzz $pkg $target ($fuzztime)"
    (cd "$dir" && timeout 600 "$bin" -test.run '^$' -test.fuzz "^${target}\$" -test.fuzztime "$fuzztime" \
      -test.fuzzminimizetime 10s -test.fuzzcachedir "$fuzzcache" -test.paniconexit0) \
      >"$fuzzbin/fuzz.log" 2>&1 || { echo "fuzz $pkg $target failed (exit $?)"; cat "$fuzzbin/fuzz.log"; exit 1; }
  done
done
