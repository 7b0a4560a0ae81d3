# nodewise: `make help` lists the targets. Every install step the tests need
# lives here (or in hack/), so a fresh machine needs only `make demo` and `make test`.
SHELL := /bin/bash
.DEFAULT_GOAL := help

GO        ?= go
BIN       := $(CURDIR)/bin
PKGS      := ./...
# Test packages run two at a time: each may start its own cluster on 2 cores.
TEST_FLAGS ?= -count=1 -p 2 -timeout 40m
# Debian packages the build and tests use (clang/llvm/bpftool regenerate the
# eBPF objects; iproute2/nftables build the network-namespace test rigs).
APT_PACKAGES := clang llvm bpftool libbpf-dev iproute2 nftables procps

# Paths that `make generate` writes; check-generate fails when they differ from the commit.
GENERATED := bpf api deploy/crds

# Upstream binaries the tests run (tools/controller-gen runs through `go tool`).
TOOLS := etcd kubernetes prometheus istioctl

export PATH := $(BIN):$(PATH)
export NODEWISE_BIN_DIR := $(BIN)

##@ Everyday

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z0-9_-]+:.*##/ {printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2} /^##@/ {printf "\n%s\n", substr($$0, 5)}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build the static binaries nodewise, orchestrator and nodeagent into bin/.
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o $(BIN)/ ./cmd/nodewise ./cmd/orchestrator ./cmd/nodeagent

.PHONY: test
test: deps tools lint check-generate chart-check ## Run every test (installs packages and builds the pinned cluster tools first).
	$(GO) test $(TEST_FLAGS) $(PKGS)

.PHONY: lint
lint: ## go vet plus a gofmt check.
	$(GO) vet $(PKGS)
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '_bpfe[lb].go$$')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

.PHONY: demo
demo: build tools ## Run the demo on the built-in simulated cluster.
	$(BIN)/nodewise demo

.PHONY: bench
bench: build tools ## Run the benchmarks and print their figures.
	$(GO) test -run '^$$' -bench . -benchtime 1x -count 1 -timeout 60m $(PKGS)

.PHONY: bench-disruption
bench-disruption: deps tools ## Compare Istio's RollingUpdate with nodewise drain never/always/auto on the live data plane (root): resets, failed requests, wall time.
	$(GO) test -run '^$$' -bench BenchmarkDisruption -benchtime 1x -count 1 -timeout 60m ./test/demo

##@ Generated code

.PHONY: generate
generate: deps ## Regenerate eBPF objects (bpf2go), deepcopy and CRDs.
	$(GO) generate $(PKGS)

.PHONY: check-generate
check-generate: generate ## Fail when regeneration changes a committed generated file.
	@git diff --exit-code --stat -- $(GENERATED) || { echo "generated files are stale: run 'make generate' and commit"; exit 1; }

##@ Set-up (run by test and demo)

.PHONY: deps
deps: ## Install the Debian packages the build and tests need (once).
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then echo "installing Debian packages:" $$missing; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; fi

.PHONY: tools
tools: ## Build the pinned upstream tools (etcd, Kubernetes, Prometheus, istioctl) into bin/, cached by version.
	@for t in $(TOOLS); do hack/build-tool.sh $$t; done

.PHONY: clean
clean: ## Remove built binaries (the cached tools too).
	rm -rf $(BIN)

##@ Chart

CHART := deploy/charts/nodewise
# Helm built from its Go module (tools/helm) has no default Kubernetes version.
HELM_KUBE_VERSION := 1.37.0

.PHONY: chart-check
chart-check: ## Lint and render the Helm chart (every optional part on and off); test/chart compares it with deploy/.
	@hack/build-tool.sh helm
	$(BIN)/helm lint --strict $(CHART) --kube-version $(HELM_KUBE_VERSION)
	$(BIN)/helm lint --strict $(CHART) --kube-version $(HELM_KUBE_VERSION) --set judge.enabled=false,monitoring.serviceMonitor.enabled=true,monitoring.podMonitor.enabled=true,monitoring.prometheusRule.enabled=true
	$(BIN)/helm template nodewise $(CHART) -n nodewise-system --kube-version $(HELM_KUBE_VERSION) --include-crds >/dev/null

.PHONY: chart-sync
chart-sync: ## Copy the generated CRDs and the dashboards into the chart (Helm reads only files inside it).
	cp deploy/crds/nodewise.io_*.yaml $(CHART)/crds/
	cp deploy/nodeagent/nodewise-node-health.json deploy/orchestrator/nodewise-rollouts.json $(CHART)/dashboards/
