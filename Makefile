# sluice: the rate limit service and the OData API in one binary.
GO      ?= go
BIN     := bin/sluice
RUNDIR  := var/run

.PHONY: build run test test-deps test-npm h2spec helm test-stress bench bench-full bench-readme lint clean image image-bin

# A static binary (CGO_ENABLED=0: nothing needs cgo, and it runs on scratch).
# VERSION is what `sluice version` prints beside the toolchain's build
# information (which lacks the commit in a git worktree).
VERSION ?= $(shell git describe --always --dirty 2>/dev/null)
build:
	CGO_ENABLED=0 $(GO) build -ldflags "-X main.version=$(VERSION) $(LDFLAGS)" $(BUILDFLAGS) -o $(BIN) ./cmd/sluice

# ---- container image (Dockerfile; docs/deploy.md) ------------------------------
# image-bin: the linux binary and CA roots the Dockerfile copies in (also what
# `docker compose ... up --build` needs). image: builds IMAGE offline with
# buildah or podman and writes bin/image/sluice-image.tar for `docker load`.
IMAGE ?= localhost/sluice:latest
CA_CERTS ?= /etc/ssl/certs/ca-certificates.crt

image-bin:
	@mkdir -p bin/image
	$(MAKE) --no-print-directory build BIN=bin/image/sluice LDFLAGS="-s -w" GOOS=linux
	cp $(CA_CERTS) bin/image/ca-certificates.crt

image: image-bin
	IMAGE=$(IMAGE) scripts/image.sh

# The rate limit service on :8081 (gRPC), :8080 (/json, /healthcheck) and
# :6070 (debug) with the in-memory backend and the example rules, plus the
# OData API on :8000 over an embedded SQLite filled with a demo dataset.
run: build
	@mkdir -p $(RUNDIR)
	BACKEND_TYPE=memory USE_STATSD=false LOG_LEVEL=$${LOG_LEVEL:-info} \
	RUNTIME_ROOT=$(CURDIR)/examples/runtime RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
	$(BIN) serve -db sqlite:$(RUNDIR)/odata.sqlite

test-deps:
	@scripts/test-deps.sh

# The generic OData clients from npm that odata/npmclient_test.go drives
# (ts-odatajs, @odata/client, o.js),
# and gRPC's JavaScript client (@grpc/grpc-js) that transport/grpcjs_test.go
# drives, each pinned by its package-lock.json; installed once. Without npm
# the tests skip loudly (and fail under SLUICE_REQUIRE_SERVERS=1).
NPM_CLIENT := odata/testdata/npmclient
GRPCJS_CLIENT := transport/testdata/grpcjs
test-npm:
	@if ! command -v npm >/dev/null 2>&1; then \
	  echo "test-npm: npm is not installed: the generic OData client and grpc-js tests cannot run" >&2; \
	else \
	  if [ ! -f $(NPM_CLIENT)/node_modules/ts-odatajs/package.json ] || \
	     [ ! -f $(NPM_CLIENT)/node_modules/@odata/client/package.json ] || \
	     [ ! -f $(NPM_CLIENT)/node_modules/odata/package.json ]; then \
	    (cd $(NPM_CLIENT) && npm ci --no-audit --no-fund) || exit 1; \
	  fi; \
	  if [ ! -f $(GRPCJS_CLIENT)/node_modules/@grpc/grpc-js/package.json ]; then \
	    (cd $(GRPCJS_CLIENT) && npm ci --no-audit --no-fund) || exit 1; \
	  fi; \
	fi

# h2spec (HTTP/2 conformance) that transport/h2grpc/h2spec_test.go runs is
# installed like staticcheck: once, when missing; scripts/h2spec/go.mod pins
# it with its dependencies.
H2SPEC ?= $(shell command -v h2spec 2>/dev/null || echo $(shell $(GO) env GOPATH)/bin/h2spec)

$(shell $(GO) env GOPATH)/bin/h2spec:
	cd scripts/h2spec && GOFLAGS= GOBIN= $(GO) install tool

h2spec: $(H2SPEC)

# helm, for the chart in deploy/helm/sluice: `make test` lints it and decodes
# `helm template`'s output strictly (deploy/kubernetes/helm_test.go).
# Installed once, when missing; scripts/helm/go.mod pins it.
HELM ?= $(shell command -v helm 2>/dev/null || echo $(shell $(GO) env GOPATH)/bin/helm)

$(shell $(GO) env GOPATH)/bin/helm:
	cd scripts/helm && GOFLAGS= GOBIN= $(GO) install tool

helm: $(HELM)

# Every test, with the race detector, against real servers (a missing server
# fails instead of skipping). RACEFLAGS leaves modernc.org's pure-Go SQLite
# (C translated to Go) out of the race detector's instrumentation: it runs
# five times slower instrumented, which made ./odata take most of `make
# test`, and finds little there (the translated C keeps most of its memory
# in its own mmap'd allocator, which the detector does not watch). sluice's
# own code, and every other dependency, is still instrumented.
RACEFLAGS ?= -race -gcflags=modernc.org/...=-race=false
export RACEFLAGS
test: test-deps test-npm h2spec helm
	SLUICE_REQUIRE_SERVERS=1 $(GO) test $(RACEFLAGS) -timeout 30m ./...
	$(HELM) lint --strict deploy/helm/sluice --set image.repository=registry.example.com/sluice
	cd deploy/kubernetes && HELM=$(HELM) SLUICE_REQUIRE_SERVERS=1 $(GO) test -race ./...

# The suite, each test twice (-count=2), while busy loops (10 per CPU, each
# ended after STRESS_MAX_SECONDS at the latest) oversubscribe the machine ten
# times over, as a loaded shared CI machine does: a test that depends on a
# lucky schedule fails here. The test binaries are built before the load
# starts. Not part of `make test`: it takes several times as long.
# STRESS_PKGS narrows it (default ./...).
test-stress: test-deps test-npm h2spec
	GO=$(GO) scripts/test-stress.sh

bench: build
	$(GO) run ./bench -quick

bench-full: build
	$(GO) run ./bench

# Put bench/results/latest.md (from make bench or bench-full) into docs/benchmarks.md.
bench-readme:
	$(GO) run ./bench -readme docs/benchmarks.md

# staticcheck is installed like the test servers: once, pinned, when missing.
STATICCHECK_VERSION ?= v0.8.2
STATICCHECK         ?= $(shell command -v staticcheck 2>/dev/null || echo $(shell $(GO) env GOPATH)/bin/staticcheck)

$(shell $(GO) env GOPATH)/bin/staticcheck:
	GOFLAGS= $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

lint: $(STATICCHECK)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...

clean:
	rm -rf bin var

# ---- load, fault and soak scenarios (loadtest/README.md) -------------------
# Not part of `make test`: they take minutes. Each builds bin/sluice first and
# starts its own servers on loopback ports. (No K6_* make variables: make
# exports command-line variables, and k6 reads K6_DURATION & co. from the
# environment, which would replace the scripts' scenarios.)
LOADTEST_BIN     := bin/loadtest
GOPATH_BIN       := $(shell $(GO) env GOPATH)/bin
GHZ_VERSION      ?= v0.120.0
K6_VERSION       ?= v1.8.1
GHZ              ?= $(shell command -v ghz 2>/dev/null || echo $(GOPATH_BIN)/ghz)
K6               ?= $(shell command -v k6 2>/dev/null || echo $(GOPATH_BIN)/k6)
LOADTEST_BACKEND ?= memory
GHZ_DURATION     ?= 20s
LOADTEST_K6_DURATION ?= 30s
SOAK_DURATION    ?= 10m
FAULTS           ?= redis-kill reload-storm sigterm slow-odata-reader odata-costly-filter odata-rls-down stats-cardinality

.PHONY: loadtest-bin ghz k6 faults soak loadtest

loadtest-bin: build
	@mkdir -p $(LOADTEST_BIN)
	$(GO) build -o $(LOADTEST_BIN)/ ./loadtest/...

$(GOPATH_BIN)/ghz:
	GOFLAGS= $(GO) install github.com/bojand/ghz/cmd/ghz@$(GHZ_VERSION)

# k6 is a large build (minutes on two cores); it happens once.
$(GOPATH_BIN)/k6:
	GOFLAGS= $(GO) install go.k6.io/k6@$(K6_VERSION)

# ghz with each config (1,000 keys, hot key, 3 descriptors) against a fresh
# sluice; LOADTEST_BACKEND=redis puts a Redis under it.
ghz: loadtest-bin $(GHZ)
	$(LOADTEST_BIN)/protoset -out loadtest/ghz
	@for c in keys-1000 hot-key descriptors-3; do \
	  echo "== ghz $$c ($(LOADTEST_BACKEND), $(GHZ_DURATION))"; \
	  $(LOADTEST_BIN)/with-sluice -backend $(LOADTEST_BACKEND) -- \
	    $(GHZ) --config loadtest/ghz/$$c.json -z $(GHZ_DURATION) {grpc} || exit 1; \
	done

# k6: /json and gRPC against a fresh sluice; the OData script against a
# fresh `sluice odata` (2 requests/s per key), or against
# ODATA_URL with ODATA_KEYS when both are given.
k6: loadtest-bin $(K6)
	$(LOADTEST_BIN)/with-sluice -backend $(LOADTEST_BACKEND) -- \
	  $(K6) run -q -e DURATION=$(LOADTEST_K6_DURATION) loadtest/k6/json.js
	$(LOADTEST_BIN)/with-sluice -backend $(LOADTEST_BACKEND) -- \
	  $(K6) run -q -e DURATION=$(LOADTEST_K6_DURATION) loadtest/k6/grpc.js
	@if [ -n "$(ODATA_URL)" ] && [ -n "$(ODATA_KEYS)" ]; then \
	  $(K6) run -q -e DURATION=$(LOADTEST_K6_DURATION) -e ODATA_URL=$(ODATA_URL) -e ODATA_KEYS=$(ODATA_KEYS) loadtest/k6/odata.js; \
	else \
	  $(LOADTEST_BIN)/with-odata -- $(K6) run -q -e DURATION=$(LOADTEST_K6_DURATION) loadtest/k6/odata.js; \
	fi

# Every fault scenario, each a pass/fail program; all run, then the make
# fails if any failed.
faults: loadtest-bin
	@failed=""; for f in $(FAULTS); do \
	  echo "== $$f"; $(LOADTEST_BIN)/$$f || failed="$$failed $$f"; \
	done; \
	if [ -n "$$failed" ]; then echo "faults FAILED:$$failed"; exit 1; fi; echo "faults: all passed"

soak: loadtest-bin
	$(LOADTEST_BIN)/soak -duration $(SOAK_DURATION)

# Every scenario once, bounded: short ghz and k6 runs, all faults, a 2-minute soak.
loadtest:
	$(MAKE) ghz GHZ_DURATION=10s
	$(MAKE) k6 LOADTEST_K6_DURATION=15s
	$(MAKE) faults
	$(MAKE) soak SOAK_DURATION=2m
