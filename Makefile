# Drover — build, test and run targets. `make help` lists them.

SHELL     := /bin/bash
GO        ?= go
BIN       := bin
PKGS      := ./...
TEST_FLAGS ?= -race -count=1 -timeout 40m
E2E_FLAGS  ?= -count=1 -timeout 20m

TEMPORAL_CLI ?= v1.5.1
# The Temporal server the CLI above embeds (its go.mod pins
# go.temporal.io/server): make e2e-sql builds it with its SQL tool.
TEMPORAL_SERVER ?= v1.29.1

.PHONY: help build release test e2e e2e-sql e2e-ceph bench-ceph e2e-upgrade e2e-sites temporal-server bench bench-sql lint generate schema docs histories fuzz mutate demo up down sim temporal clean

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## build every command into bin/
	@mkdir -p $(BIN)
	$(GO) build -ldflags "-X github.com/drover-dr/drover/internal/version.Revision=$$(git rev-parse --short=12 HEAD 2>/dev/null)" -o $(BIN)/ ./cmd/...

# A release: an archive of every command under cmd/ for linux/amd64 and
# linux/arm64, the worker's OCI image (built without a container engine),
# an SPDX SBOM of the modules in the binaries and SHA256SUMS, in DIST;
# drctl and the worker say VERSION. It checks what it built (archives,
# sums, SBOM, image; drctl version and worker --version of this
# machine's binaries) and fails on any problem. docs/guides/install.md says how
# to install and verify one. Builds are cached: a second run takes
# seconds.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo v0.0.0-unknown)
DIST    ?= dist
release: ## versioned archives of every command (linux/amd64, arm64), the worker's OCI image, SBOM and SHA256SUMS into DIST
	$(GO) run ./scripts/release --version $(VERSION) --revision "$$(git rev-parse --short=12 HEAD 2>/dev/null)" \
	  --time "$$(git log -1 --format=%cI 2>/dev/null || date -u +%Y-%m-%dT%H:%M:%SZ)" --out $(DIST)

test: lint $(BIN)/temporal ## run the tests (the README's test command): the packages, then make e2e
	$(GO) test $(TEST_FLAGS) $$($(GO) list $(PKGS) | grep -v '/e2e$$')
	$(MAKE) --no-print-directory e2e

# The end-to-end scenarios and the chaos run, on a stack of processes. It
# prints each scenario, the chaos seed and counts; the full log goes to
# .run/e2e.log, and its end is printed when something fails.
# DROVER_CHAOS_SEED replays a chaos run, DROVER_CHAOS_KILLS sizes it.
e2e: $(BIN)/temporal ## the end-to-end scenarios and the chaos run (log in .run/e2e.log)
	@mkdir -p .run
	@set -o pipefail; $(GO) test $(E2E_FLAGS) -v ./e2e 2>&1 | tee .run/e2e.log \
	  | grep --line-buffered -E '^(chaos:|=== RUN|--- |ok|FAIL|PASS)|^ +--- ' \
	  || { echo "== the end of .run/e2e.log"; tail -n 150 .run/e2e.log; exit 1; }

# The end-to-end scenarios (not the chaos run) on the production path:
# the Temporal server built from its Go module on a throwaway PostgreSQL
# cluster (Debian's postgresql package), with both schemas, the namespace
# and Drover's search attributes set up as the README's "Running it for
# real" says. It stops all it started; the log goes to .run/e2e-sql.log.
e2e-sql: $(BIN)/temporal $(BIN)/temporal-server $(BIN)/temporal-sql-tool ## the e2e scenarios on the Temporal server on PostgreSQL (log in .run/e2e-sql.log)
	@mkdir -p .run
	@set -o pipefail; DROVER_E2E_SQL=$(abspath $(BIN)) $(GO) test $(E2E_FLAGS) -v -run 'TestScenarios' ./e2e 2>&1 | tee .run/e2e-sql.log \
	  | grep --line-buffered -E '^(=== RUN|--- |ok|FAIL|PASS)|^ +--- |stack: (starting|setting|creating|initialising)' \
	  || { echo "== the end of .run/e2e-sql.log"; tail -n 150 .run/e2e-sql.log; exit 1; }

# The whole DR cycle on two real Ceph clusters (Debian's packages, installed
# when missing) through the real ceph-csi, from CEPH_CSI (a binary) or
# CEPH_CSI_SRC (a source tree it builds); without either it says it skipped.
# Every daemon it starts is stopped at the end; the log is .run/e2e-ceph.log.
e2e-ceph: $(BIN)/temporal ## the DR cycle on real Ceph and ceph-csi (CEPH_CSI or CEPH_CSI_SRC; log in .run/e2e-ceph.log)
	@bash scripts/ceph/e2e.sh

# An upgrade and a rollback while a failover waits at an approval gate:
# the worker and drctl of E2E_UPGRADE_FROM, built from that commit's
# files (kept in .run/upgrade/), run a protected plan; this checkout's
# worker starts beside them and is made current; the failover ends on the
# build it started on, Protect and the record move, and each build's
# worker stops once nothing runs on it. Then a rollback: new actions go
# back to the old build, the runs that took the new path wait on the new
# one until it is current again (roll forward), and the old build's
# worker stops once nothing runs on it. The commit is
# the merge that brought Worker Versioning, the earliest build that can
# take part; move it to the last release once there are releases. It
# needs the clone's history (not a shallow clone). Log: .run/e2e-upgrade.log.
E2E_UPGRADE_FROM ?= f920b4a06ddd3ebe0f0c7b07a9b7e7ae733e01da
e2e-upgrade: $(BIN)/temporal ## upgrade from E2E_UPGRADE_FROM's build to this one and back, a failover at its gate (log in .run/e2e-upgrade.log)
	@E2E_UPGRADE_FROM=$(E2E_UPGRADE_FROM) GO=$(GO) CI=$${CI:-true} bash scripts/e2e-upgrade.sh

# Drover surviving the disaster it manages: two sites as network
# namespaces joined by a WAN of 20 ms each way, each with its own PostgreSQL,
# Temporal cluster (joined for multi-cluster replication, the namespace
# global), storage and worker; east cut off while it writes, the
# namespace taken over at west, the failover, the heal, reprotect and
# failback. Needs root and ip netns (it says it skipped otherwise); it
# deletes its namespaces and stops all it started. Log: .run/e2e-sites.log.
e2e-sites: $(BIN)/temporal $(BIN)/temporal-server $(BIN)/temporal-sql-tool ## two sites as networks, a Temporal cluster in each, east partitioned (root; log in .run/e2e-sites.log)
	@mkdir -p .run
	@set -o pipefail; DROVER_E2E_SITES=$(abspath $(BIN)) $(GO) test $(E2E_FLAGS) -v -run '^TestSites(AsNetworks|WithTemporalOutside)$$' ./e2e 2>&1 | tee .run/e2e-sites.log \
	  | grep --line-buffered -E '^(=== RUN|--- |ok|FAIL|PASS)|^ +--- | sites: |SKIP' \
	  || { echo "== the end of .run/e2e-sites.log"; tail -n 150 .run/e2e-sites.log; exit 1; }

# A failover of 10 and 50 volumes on real Ceph through the real ceph-csi
# against the same calls made directly on the same clusters (e2e
# TestRealCephBench; DROVER_CEPH_BENCH_SIZES sizes it). Brings the
# clusters up and down as make e2e-ceph does; the table goes to
# .run/bench-ceph.md, the log to .run/bench-ceph.log.
bench-ceph: $(BIN)/temporal ## failover on real Ceph and ceph-csi against direct calls (CEPH_CSI or CEPH_CSI_SRC; table in .run/bench-ceph.md)
	@DROVER_CEPH_BENCH=1 DROVER_CEPH_RUN='^TestRealCephBench$$' DROVER_CEPH_LOG=bench-ceph DROVER_CEPH_TIMEOUT=45m bash scripts/ceph/e2e.sh

temporal: $(BIN)/temporal ## build the Temporal dev server the tests run against

temporal-server: $(BIN)/temporal-server $(BIN)/temporal-sql-tool ## build the Temporal server and its SQL tool into bin/

# The Temporal server and its SQL tool, built from the server's Go module
# at the pinned version. Several minutes the first time.
$(BIN)/temporal-server:
	@mkdir -p $(BIN)/.server
	@echo "building the Temporal server $(TEMPORAL_SERVER) into $(BIN)/ (first time only)"
	GOBIN=$(abspath $(BIN))/.server $(GO) install go.temporal.io/server/cmd/server@$(TEMPORAL_SERVER)
	mv $(BIN)/.server/server $@

$(BIN)/temporal-sql-tool:
	@mkdir -p $(BIN)/.server
	GOBIN=$(abspath $(BIN))/.server $(GO) install go.temporal.io/server/cmd/tools/sql@$(TEMPORAL_SERVER)
	mv $(BIN)/.server/sql $@

# The Temporal CLI, built from its Go module at a pinned version; it holds
# the dev server (`temporal server start-dev`). A few minutes the first time.
$(BIN)/temporal:
	@mkdir -p $(BIN)
	@echo "building the Temporal CLI $(TEMPORAL_CLI) into $(BIN)/ (first time only)"
	GOBIN=$(abspath $(BIN)) $(GO) install github.com/temporalio/cli/cmd/temporal@$(TEMPORAL_CLI)

BENCH_FLAGS ?=
bench: build $(BIN)/temporal ## failover time by plan size and latency, written to BENCHMARKS.md (about 10 minutes)
	$(BIN)/drover-bench --out BENCHMARKS.md $(BENCH_FLAGS)

# The site rows alone: a site failover of 10, 100 and 300 plans of 10
# groups, 50 ms a call, 3 tiers, 10 and 50 plans at once, on the dev
# server and on the Temporal server on PostgreSQL (set up as make e2e-sql
# sets it up), each against a plain program making the same calls, into
# BENCHMARKS.md's site section (the per-plan section stays as it is). A
# quick run: make bench-sql SITE_FLAGS='--site-plans 10 --plans-at-once 10 --stores dev,sql'.
SITE_FLAGS ?= --site-plans 10,100,300 --plans-at-once 10,50 --stores dev,sql
bench-sql: build $(BIN)/temporal $(BIN)/temporal-server $(BIN)/temporal-sql-tool ## site failovers of 10-300 plans on the dev server and on PostgreSQL, written to BENCHMARKS.md (SITE_FLAGS)
	$(BIN)/drover-bench --out BENCHMARKS.md --site-only $(SITE_FLAGS)

# The linters, built from their Go modules at pinned versions into bin/.
STATICCHECK   ?= v0.8.2
WORKFLOWCHECK ?= v0.6.0

lint: $(BIN)/staticcheck $(BIN)/workflowcheck ## gofmt, go vet, staticcheck and workflowcheck must be clean
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './bin/*')); \
	  if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(BIN)/staticcheck $(PKGS)
	$(BIN)/workflowcheck ./workflows/...

# staticcheck: the standard checks. workflowcheck: Temporal's determinism
# check of every workflow function and all it calls; a loop whose order
# cannot show is marked //workflowcheck:ignore with the reason beside it.
$(BIN)/staticcheck:
	@mkdir -p $(BIN)
	GOBIN=$(abspath $(BIN)) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK)

$(BIN)/workflowcheck:
	@mkdir -p $(BIN)
	GOBIN=$(abspath $(BIN)) $(GO) install go.temporal.io/sdk/contrib/tools/workflowcheck@$(WORKFLOWCHECK)

# The workflow histories TestReplay replays (workflows/testdata/*.json),
# recorded from the current code by the dev-server tests that run each
# workflow type and shape (small plans and batches, children, a site
# action, a failover that waits for a site's worker cut off, a test
# recovery and its cleanup, the record, Verify, a protection that keeps
# points in time, a failover run without its record and its hand-over).
# Run it after changing what a workflow does on purpose, and commit the
# files.
# Protect and the record auto-upgrade to a new worker build mid-run: their
# histories as last committed go to workflows/testdata/upgrade/, named by
# that commit, and replay there until no run of theirs from that build
# remains (workflows.Register says how to tell); then delete them, with
# any patch only they needed.
HISTORY_TESTS := ^(TestActionsOnDevServer|TestPointsOnDevServer|TestSiteFailoverLeavesOutUntrustedPlans|TestTestRecoveryOnDevServer|TestSiteWorkerCutOffMidAction|TestReprotectMakesTheRestoredVolumesTheProtectedOnes|TestFailbackPausesProtectionsPoints|TestFailoverGoesOnWithoutARecordByOverride)$$
histories: $(BIN)/temporal ## record the workflow histories the replay test replays (workflows/testdata)
	@mkdir -p workflows/testdata/upgrade
	@for f in workflows/testdata/protect*.json workflows/testdata/record*.json; do \
	  rev=$$(git log -1 --format=%h -- "$$f" 2>/dev/null); [ -n "$$rev" ] || continue; \
	  u=workflows/testdata/upgrade/$$(basename $$f .json)@$$rev.json; \
	  if [ ! -e "$$u" ]; then git show "HEAD:$$f" > "$$u" && echo "kept $$f of $$rev as $$u"; fi; done
	rm -f workflows/testdata/*.json
	DROVER_RECORD_HISTORIES=1 $(GO) test -count=1 -timeout 10m -run '$(HISTORY_TESTS)' ./workflows
	$(GO) test -count=1 -run '^TestReplay$$' ./workflows

generate: ## regenerate the CSI-Addons Go stubs (needs protoc 3.21.12)
	./scripts/gen-proto.sh

schema: ## regenerate plans/plan.schema.json from the plan types
	$(GO) run ./cmd/drctl plan schema > plans/plan.schema.json

# The references generated from the code: every drctl command and flag
# (docs/reference/drctl.md) and the plan format from plans/plan.schema.json
# (docs/reference/plan-format.md). Run it, after make schema when the
# plan types changed, and commit the files: a test fails when they differ.
docs: ## regenerate the references in docs/reference from drctl's commands and the plan schema
	$(GO) run ./cmd/drctl gen-docs --out docs/reference --schema plans/plan.schema.json

# Each new input the fuzzer finds is minimised for at most FUZZMINIMIZE:
# Go's default, a minute, left a 30 s run minimising its first find with
# nothing else run (10 inputs in all on a clean cache, against some
# 70,000 with 2 s).
FUZZTIME ?= 30s
FUZZMINIMIZE ?= 2s
fuzz: ## fuzz the plan loader for FUZZTIME (default 30s)
	$(GO) test -run '^$$' -fuzz=FuzzParse -fuzztime=$(FUZZTIME) -fuzzminimizetime=$(FUZZMINIMIZE) ./plans

# Mutation testing of the safety-critical code (workflows/, the retry
# classification and the resync and sync waits of activities/, the
# simulator's checker, fence and data path, plan validation) with
# gremlins, built at a pinned version into bin/. Slow and CPU-heavy, so
# not part of make test; MUTATE_WORKERS, MUTATE_TIMEOUT and MUTATE_ONLY
# tune it (see scripts/mutate.sh). Results: TESTING.md.
GREMLINS ?= v0.6.0
mutate: $(BIN)/gremlins $(BIN)/temporal ## mutation testing of the safety-critical code, kill rate per package (slow)
	GREMLINS=$(BIN)/gremlins ./scripts/mutate.sh

$(BIN)/gremlins:
	@mkdir -p $(BIN)
	GOBIN=$(abspath $(BIN)) $(GO) install github.com/go-gremlins/gremlins/cmd/gremlins@$(GREMLINS)

demo: build $(BIN)/temporal ## the demo: failover, reprotect and failback on the local embedded stack
	$(BIN)/drover-stack demo

up: build $(BIN)/temporal ## start the local stack in the background (Temporal UI on 127.0.0.1:8233)
	$(BIN)/drover-stack up

down: ## stop the stack that make up started
	@if [ -x $(BIN)/drover-stack ]; then $(BIN)/drover-stack down; else echo "nothing to stop"; fi

sim: build ## run two simulated storage sites in the foreground (Ctrl-C stops them)
	./scripts/sim-pair.sh

clean: ## remove build outputs
	rm -rf $(BIN)
