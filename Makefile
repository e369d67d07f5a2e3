# usher: `make run` starts the whole system locally, `make test` runs every test.
SERVICES := gateway admitter notifier orderworker
GO ?= go

.PHONY: run test fuzz deps build bench chaos soak clean

run: deps build
	@scripts/run.sh

test: deps
	@scripts/test.sh

# Every fuzz target, 20000 executions each (FUZZTIME=…); make test fuzzes
# the parsers only.
fuzz: deps
	@scripts/fuzz.sh

deps:
	@scripts/deps.sh

build:
	@mkdir -p bin
	@$(GO) build -o bin/ $(addprefix ./,$(SERVICES)) ./usherctl ./tools/pgsim ./tools/loadtest ./tools/loadtest/naivejoin
	@$(GO) build -o bin/nats-server github.com/nats-io/nats-server/v2

bench: deps build
	@scripts/bench.sh

# Every fault scenario on a 3-node JetStream cluster and a Redis Cluster
# (about 17 minutes); writes RELIABILITY.md. One scenario:
#   go run ./tools/chaos -scenario kill-admitter -seed 7   (go run ./tools/chaos -list)
chaos: deps
	@$(GO) run ./tools/chaos -all -reliability RELIABILITY.md

# The suite's load with churn and no fault for SOAK (default 1h): every
# process's memory, goroutines and open files, Redis's and the streams'
# size, each one's slope with its 95 % interval, into RELIABILITY.md.
SOAK ?= 1h
soak: deps
	@$(GO) run ./tools/chaos -scenario soak -soak $(SOAK) -soak-report RELIABILITY.md

clean:
	rm -rf bin .usher
