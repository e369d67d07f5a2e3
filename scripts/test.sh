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
# The Helm chart's and the Envoy snippet's tests (tools/deploycheck) run
# helm, k8scheck and envoycheck, built from their own module by
# deploy/helm/tools/build.sh: a large build the first time (Kubernetes'
# client libraries, Envoy's API), skipped while current. It starts now,
# beside vet and the tests; those tests wait for it (through the build's
# lock) only when they run.
helmlog=$(mktemp)
fuzzlog=$(mktemp)
trap 'rm -f "$helmlog" "$fuzzlog"' EXIT
(deploy/helm/tools/build.sh >"$helmlog" 2>&1) &
helmtools=$!
# With -race, vet type-checks against the same race-instrumented packages
# go test -race builds next, so the dependencies compile once, not twice.
# With -trimpath (here, in go test and in the fuzzing's builds) a compiled
# package does not depend on where the checkout is: a fresh clone on a
# machine that built the same sources before (CI's) finds them all in the
# build cache, where without it every one of usher's packages compiled
# again, race-instrumented, for vet and for its test (about two and a
# half minutes of the run).
go vet -race -trimpath ./... ./tools/...
# The chaos smoke test builds the services and nats-server as make chaos
# does (-trimpath) on a deadline of its own. Compiled here first, outside
# every deadline, its build only links: on a fresh machine, compiling them
# from nothing beside every package's race-instrumented tests can take
# more than its four minutes.
go build -trimpath ./gateway ./admitter ./notifier ./orderworker ./tools/pgsim ./usherctl github.com/nats-io/nats-server/v2
stage "go test -race, and the parsers' fuzzing beside it"
# Fuzz the parsers briefly (scripts/fuzz.sh says which and why; `make
# fuzz` fuzzes every target, longer), beside the tests: the slowest test
# packages wait on timers and servers far more than they compute, and the
# fuzzing fills those cores. Its output follows the tests'.
(FUZZ_SCOPE=parsers FUZZTIME=${FUZZTIME:-2000x} scripts/fuzz.sh >"$fuzzlog" 2>&1) &
fuzz=$!
# Four packages at a time on two cores, for the same reason. The
# end-to-end suite runs last, once the compiling is over: started first it
# took 467 s instead of 268 under the others' compiling, and the run as a
# whole was no shorter.
# -vet=off: go vet ran every analyzer above, and go test's own vet (a
# subset, under flags of its own) shares none of its cache entries, so on
# a fresh machine it computed its facts over every dependency again (193 s
# of go test's actions in a traced fresh run, 110 more in the fuzzing's
# builds). -ldflags=-w: no DWARF in the test binaries, whose links are a
# sixth of go test's actions (e2e's links in about a fifth less time);
# panics and race reports name functions from the symbol table all the
# same.
tests=0
go test -race -trimpath -vet=off -ldflags=-w -count=1 -p 4 -timeout 10m ./... ./tools/... || tests=$?
fuzzed=0
wait "$fuzz" || fuzzed=$?
# Its failure, if any, is the chart tests' too; its log says why.
wait "$helmtools" || { echo "deploy/helm/tools/build.sh failed:" >&2; cat "$helmlog" >&2; }
stage "fuzz (ran beside the tests)"
cat "$fuzzlog"
if [ "$tests" -ne 0 ] || [ "$fuzzed" -ne 0 ]; then
  echo "make test: failed (go test exit $tests, fuzz exit $fuzzed)" >&2
  exit 1
fi
stage done
echo "make test: all passed"
