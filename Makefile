# sluice: the rate limit service and the OData API in one binary.
GO      ?= go
BIN     := bin/sluice
RUNDIR  := var/run

.PHONY: build run test test-deps bench bench-full lint clean

build:
	$(GO) build -o $(BIN) ./cmd/sluice

# The rate limit service on :8081 (gRPC), :8080 (/json, /healthcheck) and
# :6070 (debug) with the in-memory backend and the example rules, plus the
# OData API on :8000 over an embedded SQLite filled with a demo dataset.
run: build
	@mkdir -p $(RUNDIR)
	BACKEND_TYPE=memory USE_STATSD=false LOG_LEVEL=$${LOG_LEVEL:-info} \
	RUNTIME_ROOT=$(CURDIR)/examples/runtime RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
	SLUICE_DATA_DIR=$(CURDIR)/$(RUNDIR) \
	$(BIN) serve

test-deps:
	@scripts/test-deps.sh

# Every test, with the race detector, against real servers (a missing server
# fails instead of skipping).
test: test-deps
	SLUICE_REQUIRE_SERVERS=1 $(GO) test -race -timeout 30m ./...

bench: build
	$(GO) run ./bench -quick

bench-full: build
	$(GO) run ./bench

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

clean:
	rm -rf bin var
