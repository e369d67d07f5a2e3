#!/usr/bin/env bash
# Runs every test against real servers the tests start themselves (embedded
# NATS JetStream, redis-server, a throwaway PostgreSQL), with the race
# detector, then a short run of every fuzz target.
set -euo pipefail
cd "$(dirname "$0")/.."

unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change: $unformatted" >&2
  exit 1
fi
# stage prints how long the run has taken when each stage starts: make test
# must stay under 12 minutes on a fresh machine and CI under 10, and the
# log says which stage grew.
stage() { echo "test.sh: $1 at $((SECONDS / 60))m$((SECONDS % 60))s"; }
stage vet
# With -race, vet type-checks against the same race-instrumented packages
# go test -race builds next, so the dependencies compile once, not twice.
go vet -race ./... ./tools/...
# The chaos smoke test builds the services and nats-server as make chaos
# does (-trimpath) on a deadline of its own. Compiled here first, outside
# every deadline, its build only links: on a fresh machine, compiling them
# from nothing beside every package's race-instrumented tests can take
# more than its four minutes.
go build -trimpath ./gateway ./admitter ./notifier ./orderworker ./tools/pgsim ./usherctl github.com/nats-io/nats-server/v2
stage "go test -race"
go test -race -count=1 -timeout 10m ./... ./tools/...
stage fuzz

# Fuzz briefly in CI; a crasher lands in the package's testdata/fuzz and
# becomes a regular test case from then on.
# A count, not a duration: a duration-bounded run can end with a spurious
# "context deadline exceeded" failure when its deadline meets a worker
# mid-step; a count has no deadline. 2000 each keeps the whole run within
# its time (a gateway target's run is ≈ 10 s of start-up and corpus and
# ≈ 2 s a thousand).
fuzztime=${FUZZTIME:-2000x}
fuzzbin=$(mktemp -d)
trap 'rm -rf "$fuzzbin"' EXIT
fuzzcache=$(go env GOCACHE)/fuzz # where go test -fuzz keeps its corpus
go list -f '{{.Dir}}' ./... ./tools/... | while read -r dir; do
  pkg="./${dir#"$PWD"/}"
  # (|| true: a package without test files makes grep fail, which
  # pipefail and set -e would turn into the script's exit.)
  targets=$(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u || true)
  [ -n "$targets" ] || continue
  # One fuzzing binary per package, built outside the runs' time limit (it
  # instruments every dependency: minutes on a cold build cache) and run
  # once per target, as go test -fuzz runs it (from the package's folder,
  # so a crasher lands in its testdata/fuzz). go test -fuzz would link it
  # again for every target: seven seconds each here, two minutes a run.
  set -- $targets
  bin="$fuzzbin/${pkg//\//_}.test"
  go test "$pkg" -c -o "$bin" -fuzz "^$1\$"
  for target in $targets; do
    echo "fuzz $pkg $target ($fuzztime)"
    (cd "$dir" && timeout 300 "$bin" -test.run '^$' -test.fuzz "^${target}\$" -test.fuzztime "$fuzztime" \
      -test.fuzzminimizetime 10s -test.fuzzcachedir "$fuzzcache" -test.paniconexit0) \
      >/tmp/usher-fuzz.log 2>&1 || { echo "fuzz $pkg $target failed (exit $?)"; cat /tmp/usher-fuzz.log; exit 1; }
  done
done
stage done
echo "make test: all passed"
