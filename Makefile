# Sluice: `make run` starts the service on the embedded SQLite default; `make test` runs every
# test (starting a throwaway PostgreSQL when TEST_DATABASE_URL is unset).
GO       ?= go
TEMPL    ?= $(GO) run github.com/a-h/templ/cmd/templ@v0.3.977
# go test -json piped through this prints what go test prints, then every skipped test with its
# reason (go test without -v hides skips); pipefail keeps go test's own failure.
REPORT   := $(GO) run ./internal/testkit/testreport
SHELL    := /bin/bash
.SHELLFLAGS := -o pipefail -c

.PHONY: bench-client bench-contended bench-ui print-go-modules run build test test-go test-ts lint-ts test-short bench fuzz generate generate-check lint fmt vendor-htmx vendor-altcha

run:
	SLUICE_DEMO=$${SLUICE_DEMO:-true} $(GO) run ./cmd/app serve

build:
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/sluice ./cmd/app

# Modules of their own, which the root's ./... does not reach: the Go client (standard library
# only), the Gin middleware and the examples. Their tests build and start a real server: on
# SQLite, and on PostgreSQL when TEST_DATABASE_URL is set.
GO_MODULES := client/go client/gin examples

test:
	$(GO) vet ./...
	$(GO) run ./internal/testkit/withpg -- $(MAKE) --no-print-directory test-go
	@$(MAKE) --no-print-directory test-ts

# The Go tests beside one PostgreSQL (make test starts it; run alone, it needs TEST_DATABASE_URL):
# the root module's, then each of GO_MODULES on SQLite and on PostgreSQL.
test-go:
	@test -n "$$TEST_DATABASE_URL" || (echo "test-go needs TEST_DATABASE_URL (make test sets it)" && exit 1)
	$(GO) test -json -count=1 -timeout 20m ./... | $(REPORT)
	@for m in $(GO_MODULES); do \
		echo "== $$m on SQLite" && (cd $$m && $(GO) vet ./... && env -u TEST_DATABASE_URL $(GO) test -json -count=1 ./...) | $(REPORT) || exit 1; \
		echo "== $$m on PostgreSQL" && (cd $$m && $(GO) test -json -count=1 ./...) | $(REPORT) || exit 1; \
	done

# The TypeScript client's tests (they build and start a real server, as client/go's do), then
# the Node/Express example's (which reuses the client's compiled test helper). A machine without
# node skips them visibly; CI (CI=true) always runs them.
test-ts:
	@if [ "$$CI" != true ] && ! command -v node >/dev/null; then \
		echo "SKIP: client/typescript and examples/node-express tests need node"; \
	else \
		(cd client/typescript && npm ci --no-audit --no-fund && GO="$(GO)" npm test) && \
		(cd examples/node-express && npm ci --no-audit --no-fund && GO="$(GO)" npm test); \
	fi

test-short:
	$(GO) run ./internal/testkit/withpg -- $(GO) test -count=1 -short ./...

# Flags go through BENCH_FLAGS, e.g. make bench BENCH_FLAGS="-fsync=false -only random-32".
bench:
	$(GO) run ./cmd/bench $(BENCH_FLAGS)
	@$(MAKE) --no-print-directory bench-client
	@$(MAKE) --no-print-directory bench-contended

# The Go client's batching off and on at 32 and 256 concurrent callers (client/go's
# BenchmarkLimitBatching: decisions/s, p50/p99 per call, HTTP requests per decision) against a
# real server on SQLite, then on the throwaway PostgreSQL of make test (fsync off).
CLIENT_BENCHTIME ?= 5s
bench-client:
	cd client/go && env -u TEST_DATABASE_URL $(GO) test -count=1 -run '^$$' -bench LimitBatching -benchtime $(CLIENT_BENCHTIME) .
	$(GO) run ./internal/testkit/withpg -- sh -c 'cd client/go && $(GO) test -count=1 -run "^$$" -bench LimitBatching -benchtime $(CLIENT_BENCHTIME) .'

# What one tenant's key, contended by two instances, costs another tenant of the same instance
# (internal/limiter's BenchmarkANeighbourOfAContendedKey: the neighbour's latencies, the contended
# key's decisions/s, give-ups), and how long holds on such a key take to reserve and settle
# (BenchmarkHoldsOnAKeyTwoInstancesHammer), three runs each on the throwaway PostgreSQL of
# make test (fsync off).
bench-contended:
	$(GO) run ./internal/testkit/withpg -- $(GO) test -count=3 -run '^$$' -bench 'NeighbourOfAContendedKey|HoldsOnAKeyTwoInstancesHammer' -benchtime 1x ./internal/limiter/

# The dashboard's server-side render of every page through the real router, on the throwaway
# PostgreSQL seeded with 100 tenants, 1,000 limits and 1,000,000 state rows (docs/performance.md).
RENDER_BENCHTIME ?= 20x
bench-ui:
	$(GO) run ./internal/testkit/withpg -- $(GO) test -count=1 -run '^$$' -bench DashboardRender -benchtime $(RENDER_BENCHTIME) -timeout 30m ./internal/ui/

# Runs every fuzz target for FUZZTIME each (make test runs their seed corpora only).
FUZZTIME ?= 30s
fuzz:
	@for f in $$(grep -rl --include='*_test.go' '^func Fuzz' internal cmd); do \
		for t in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\).*/\1/p' $$f); do \
			echo "== $$t ($$(dirname $$f))"; \
			$(GO) test ./$$(dirname $$f) -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) || exit 1; \
		done; \
	done

generate:
	$(TEMPL) generate

# Fails when the committed *_templ.go files differ from what templ generates.
generate-check: generate
	git diff --exit-code -- '*_templ.go'

fmt:
	gofmt -w .

lint:
	@test -z "$$(gofmt -l . | tee /dev/stderr)" || (echo "gofmt: files above need formatting" && exit 1)
	$(GO) vet ./...
	@for m in $(GO_MODULES); do (cd $$m && $(GO) vet ./...) || exit 1; done
	@if command -v golangci-lint >/dev/null; then \
		golangci-lint run ./... && for m in $(GO_MODULES); do (cd $$m && golangci-lint run ./...) || exit 1; done; \
	else echo "golangci-lint not installed; skipped"; fi
	@$(MAKE) --no-print-directory lint-ts

# The TypeScript client: its generated wire types (src/openapi.ts) match internal/api/openapi.json
# (regenerate them with `cd client/typescript && npm run generate`), and it type-checks. A machine
# without node skips this visibly; CI (CI=true) always runs it.
lint-ts:
	@if [ "$$CI" != true ] && ! command -v node >/dev/null; then \
		echo "SKIP: client/typescript lint needs node"; \
	else \
		cd client/typescript && npm ci --no-audit --no-fund && npm run --silent generate-check && npm run --silent typecheck; \
	fi

# Re-vendors htmx (pinned in the script) into web/static/htmx.
vendor-htmx:
	scripts/vendor-htmx.sh

# Re-vendors the ALTCHA widget (pinned in the script) into web/static/altcha.
vendor-altcha:
	scripts/vendor-altcha.sh

# The modules of their own, for .ci/run's tidy check.
print-go-modules:
	@echo $(GO_MODULES)
