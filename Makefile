# nodewise: `make help` lists the targets. Every install step the tests need
# lives here (or in hack/), so a fresh machine needs only `make demo` and `make test`.
SHELL := /bin/bash
.DEFAULT_GOAL := help

GO        ?= go
BIN       := $(CURDIR)/bin
PKGS      := ./...
# Test packages run two at a time: each may start its own cluster on 2 cores.
TEST_FLAGS ?= -count=1 -p 2 -timeout 40m
# go test starts packages in the order it is given them (and builds their
# test binaries in that order): the longest go first, so the short ones fill
# the other slot beside them. In alphabetical order test/e2e, the longest
# (26 min serially), started only after the ~40 packages before it, and the
# first phase took 41 min. test/e2e runs its tests side by side (t.Parallel,
# -parallel defaults to GOMAXPROCS), but for the few that time a lease or a
# window: see test/e2e/helpers_test.go.
SLOW_PKGS := ./test/e2e ./test/sidecar ./health ./cmd/nodewise ./test/chart
# The live data plane's tests judge latency and wait on many processes: they
# run after the others, with the machine to themselves (beside test/e2e they
# failed on load: srtt noise, sample apps not Ready in 3 min). Inside it, the
# tests that load cannot fail run two at a time (sim/demo/main_test.go).
LIVE_PKGS := ./sim/demo
# make test runs with NODEWISE_TEST_STRICT set: a test whose machine lacks root,
# BTF or a package fails there instead of skipping (test/testkit.Unavailable).
STRICT := NODEWISE_TEST_STRICT=1
# Debian packages: iproute2/nftables build the network namespaces of the demo's
# live data plane and of the test rigs; clang/llvm/bpftool regenerate the eBPF
# objects (make generate, which make test runs), so the demo does without them.
RUN_PACKAGES   := iproute2 nftables procps
BUILD_PACKAGES := clang llvm bpftool libbpf-dev chromium

# Paths that `make generate` writes; check-generate fails when they differ from the commit.
GENERATED := bpf api deploy/crds

# Upstream binaries the tests run (tools/controller-gen runs through `go tool`);
# the demo needs only the simulated cluster's.
# registry is the OCI registry the image tests push nodewise's images and chart
# to; kubelet runs sim/cluster's real node (a module of its own, so adding it
# left the control plane's cache key alone; it reuses that build's packages);
# alertmanager holds the silences of the orchestrator's tests (a module of its
# own at Prometheus' dependency versions, so it reuses that build's packages).
TOOLS      := etcd kubernetes prometheus alertmanager istioctl registry kubelet
DEMO_TOOLS := etcd kubernetes

# The version: one source, the chart's appVersion. Every binary carries it
# (nodewise version, nodewise_build_info), the images are tagged with it, and
# `make release VERSION=vX.Y.Z` stamps the packaged chart with it. Between
# releases a build says the coming release's version; its image's digest, not
# the tag, tells builds apart, and a release pins the digests.
CHART   := deploy/charts/nodewise
VERSION ?= $(shell sed -n 's/^appVersion: *//p' $(CHART)/Chart.yaml)
LDFLAGS := -s -w -X github.com/nodewise/nodewise/buildinfo.version=$(VERSION)

export PATH := $(BIN):$(PATH)
export NODEWISE_BIN_DIR := $(BIN)

##@ Everyday

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z0-9_-]+:.*##/ {printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2} /^##@/ {printf "\n%s\n", substr($$0, 5)}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build the static binaries nodewise (also bin/kubectl-nodewise, the kubectl plugin, and bin/kubectl_complete-nodewise, its completion), orchestrator, nodeagent and probe into bin/.
	@: set-up: build
	@mkdir -p $(BIN)/.cold; echo $$(date +%s) >$(BIN)/.cold/build-start
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='$(LDFLAGS)' -o $(BIN)/ ./cmd/nodewise ./cmd/orchestrator ./cmd/nodeagent ./cmd/probe
	@echo $$(( $$(date +%s) - $$(cat $(BIN)/.cold/build-start) )) >$(BIN)/.cold/nodewise
	ln -sfn nodewise $(BIN)/kubectl-nodewise
	ln -sfn nodewise $(BIN)/kubectl_complete-nodewise

.PHONY: test
test: check-setup deps tools lint check-tidy check-generate chart-check images ## Run every test (installs packages and builds the pinned cluster tools first).
	$(STRICT) $(GO) test $(TEST_FLAGS) $(SLOW_PKGS) $$($(GO) list $(PKGS) | grep -v '/sim/demo$$')
	$(STRICT) $(GO) test $(TEST_FLAGS) $(LIVE_PKGS)

.PHONY: lint
lint: tool-staticcheck ## go vet, a gofmt check, and staticcheck's doc-comment rules (an exported identifier's comment starts with its name).
	$(GO) vet $(PKGS)
	$(BIN)/staticcheck -tests=false -checks ST1020,ST1021,ST1022 $(PKGS)
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '_bpfe[lb].go$$')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

.PHONY: demo
# The upstream tools build before nodewise: both build with CGO_ENABLED=0 and
# the same k8s.io modules, so nodewise's build reuses the k8s.io packages the
# Kubernetes build compiled and costs only its own (the cold-build line).
demo: deps-run cold-start demo-tools build ## Run the demo on the built-in simulated cluster (installs what it needs first); a cold run ends with `cold build: nodewise Xs, upstream Ys`.
	$(BIN)/nodewise demo
	@hack/cold-build.sh $(DEMO_TOOLS)

# cold-start marks the start of a run for hack/cold-build.sh: only the tools
# built after it count.
cold-start:
	@mkdir -p $(BIN)/.cold; echo $$(date +%s) >$(BIN)/.cold/start

.PHONY: bench
bench: deps build tools ## Run the benchmarks and print their figures.
	$(GO) test -run '^$$' -bench . -benchtime 1x -count 1 -timeout 60m $(PKGS)

.PHONY: bench-baseline
bench-baseline: deps demo-tools ## Roll 6 simulated nodes one at a time (baseline 20s, soak 20s) judged through agents that keep a history; prints one `baseline-bench ...` line: wall beside N*(B+S) and N*S plus the swaps.
	$(GO) test -run '^$$' -bench BenchmarkBaselineFromHistory -benchtime 1x -count 1 -timeout 30m ./test/e2e

NODES ?= 1000
APPS ?= 10
.PHONY: bench-ebpf
bench-ebpf: deps ## The agent's eBPF programs beside a program that only counts, on one hook under 20,000 and 50,000 new connections/s from 110 pod namespaces (root): one `ebpf median_ns=… floor_ns=… ratio=… rate=…` line a rate, from the kernel's run-time statistics.
	$(GO) test -run '^$$' -bench BenchmarkProgramRunTime -benchtime 1x -count 1 -timeout 30m ./bpf/bench

.PHONY: bench-ebpf-ab
bench-ebpf-ab: deps ## Variants of the eBPF programs side by side with the production build and a copy of it (the control), on the same events of bench-ebpf's churn (root): BUILDS="a.o b.o" (compiled by hack/ebpf-variant.sh), ROUNDS (4); one `ebpf-ab round=…` line a round and each build's mean ratio to the floor.
	NODEWISE_EBPF_BUILDS="$(BUILDS)" NODEWISE_EBPF_ROUNDS=$(or $(ROUNDS),4) $(GO) test -run '^$$' -bench BenchmarkBuildsSideBySide -benchtime 1x -count 1 -timeout 30m ./bpf/bench

.PHONY: bench-reconcile
bench-reconcile: ## The reconcile pass one node's change starts, at 1,000 and 5,000 nodes (in-process caches): the event's pass beside the full pass it replaced; one `reconcile nodes=… change=… mode=… cpu_us_per_change=… …` line each, and the 5,000/1,000 ratios.
	$(GO) test -run '^$$' -bench BenchmarkReconcilePerNodeChange -benchtime 1x -count 1 -timeout 30m ./orchestrator

.PHONY: bench-status
bench-status: ## The status writer's fit of a NodeRollout two thirds through at 12,000 and 50,000 nodes: the time of a write's fit, the object as written and with the API server's record of its fields (under 1 MiB), the entries listed and omitted.
	$(GO) test -run '^$$' -bench BenchmarkStatusSize -benchtime 5x -count 1 -timeout 30m ./orchestrator/write

.PHONY: bench-freshness
bench-freshness: ## One freshness report of 50,000 sidecar pods in 2,000 namespaces beside the inventory it builds on: one `freshness pods=… namespaces=… inventory_ms=… inventory_mib=… freshness_ms=… freshness_mib=…` line (time and memory allocated per build).
	$(GO) test -run '^$$' -bench BenchmarkFreshness50kPods -benchtime 3x -count 1 -timeout 30m ./istio/freshness

.PHONY: bench-dashboard
bench-dashboard: deps ## The rollout page of a 1,000- and a 5,000-node status-only rollout in headless Chromium, 5 loads each: one `dashboard nodes=… load_ms=… page_bytes=… update_bytes=…` line a size, the browser's own load timing (Navigation Timing, median) and the bytes one node's change of state sends to the open tab.
	$(GO) test -run '^$$' -bench BenchmarkRolloutPage -benchtime 5x -count 1 -timeout 30m ./dashboard

.PHONY: bench-scale
bench-scale: deps demo-tools ## Roll a simulated cluster of NODES (1000) nodes, APPS (10) app pods each, with a leader kill midway; prints wall/floor/native, API requests per node, RSS, handover, status size, and one `scale ...` line.
	NODEWISE_BENCH_SCALE=$(NODES) NODEWISE_BENCH_APPS=$(APPS) $(GO) test -run '^$$' -bench BenchmarkNodeRolloutScale -benchtime 1x -count 1 -timeout 180m ./test/e2e

.PHONY: bench-disruption
bench-disruption: deps-run demo-tools ## Compare Istio's RollingUpdate with nodewise replace (drain never/always/auto) and surge (never/auto) on the live data plane (root): resets, failed requests, wall time.
	$(GO) test -run '^$$' -bench BenchmarkDisruption -benchtime 1x -count 1 -timeout 60m ./sim/demo

.PHONY: bench-harm
bench-harm: deps-run demo-tools ## The faulty -rst ztunnel build on the live data plane (root) with the default soak, judged fixed then sequential: one `harm method=… resets_before_halt=… seconds_to_halt=…` line each; then both methods' false-fail rates and detection times over the seeded simulations.
	$(GO) test -run '^$$' -bench BenchmarkHarmBeforeHalt -benchtime 1x -count 1 -timeout 30m ./sim/demo
	$(GO) test -run '^$$' -bench BenchmarkSimSequential -benchtime 1x -count 1 -timeout 30m ./health

.PHONY: bench-surge
bench-surge: deps-run demo-tools ## A healthy build rolled on the live data plane (root) while every client sends x3 during the canary's soak: the control group on, then off, side by side.
	$(GO) test -run '^$$' -bench BenchmarkClusterWideSurge -benchtime 1x -count 1 -timeout 30m ./sim/demo

##@ Images and releases

# Image names follow the chart (ghcr.io/nodewise/NAME); the tag is VERSION
# (the chart's appVersion, the tag `helm install` pulls), which the binaries
# inside carry too.
IMAGE_REPO ?= ghcr.io/nodewise
IMAGE_TAG  ?= $(VERSION)
IMAGES     := orchestrator nodeagent probe
# buildah (Debian) or docker (docker buildx): the same Dockerfile stages.
IMAGE_BUILDER ?= buildah
# buildah builds the images; containerd, runc and the CNI plugins run them
# (the image tests, the real kubelet node of sim/cluster).
IMAGE_PACKAGES := buildah containerd runc containernetworking-plugins ca-certificates iptables

.PHONY: images
images: build deps-images ## Build the orchestrator, nodeagent and probe images FROM scratch around the static binaries: OCI archives bin/images/NAME.tar tagged $(IMAGE_REPO)/NAME:$(IMAGE_TAG) (and, for the test node: pause, its sandbox; ztunnel, the ZDS stand-in; istio-cni, once make tool-istioctl has built it, and its builds 1.28.1-1.28.3 for the istio-cni rollout test).
	@: set-up: images
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o $(BIN)/ ./hack/pause ./sim/zds/ztunnel
	@hack/images.sh $(VERSION) $(IMAGE_TAG) $(IMAGE_REPO) $(IMAGE_BUILDER) $(IMAGES) pause ztunnel
	@if [ -x $(BIN)/install-cni ] && [ -x $(BIN)/istio-cni ]; then hack/istio-cni-image.sh $(IMAGE_BUILDER); else echo "no bin/install-cni: make tool-istioctl, then make images, packs istio-cni"; fi

.PHONY: image-context
image-context: build ## Write only the images' build context (bin/images/context), for docker buildx by hand (see the Dockerfile).
	@IMAGE_CONTEXT_ONLY=1 hack/images.sh $(VERSION) $(IMAGE_TAG) $(IMAGE_REPO) $(IMAGE_BUILDER) $(IMAGES)

.PHONY: krew
krew: ## Package kubectl-nodewise for krew: dist/kubectl-nodewise_OS_ARCH.tar.gz and dist/nodewise.yaml with their sha256.
	@hack/krew.sh $(VERSION)

# Where `make release` writes, and the OCI registry (host:port) it pushes the
# chart to, as oci://$(RELEASE_REGISTRY)/charts/nodewise; empty: no push.
RELEASE_DIR      ?= $(BIN)/release
RELEASE_REGISTRY ?=

.PHONY: release
release: release-version tool-helm images ## make release VERSION=vX.Y.Z: images tagged VERSION, the chart package (version and appVersion VERSION, images pinned by digest), the krew archives and manifest, and SHA256SUMS, in bin/release; pushes the chart to RELEASE_REGISTRY when set.
	@hack/release.sh $(VERSION) $(RELEASE_DIR) $(RELEASE_REGISTRY)

# release-version refuses a VERSION that is not vX.Y.Z before anything builds.
.PHONY: release-version
release-version:
	@[[ "$(VERSION)" =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$$ ]] || { echo "make release: VERSION=$(VERSION) is not vX.Y.Z (make release VERSION=v0.2.0)" >&2; exit 2; }

##@ Generated code

.PHONY: generate
generate: deps ## Regenerate eBPF objects (bpf2go), deepcopy and CRDs.
	$(GO) generate $(PKGS)

.PHONY: check-tidy
check-tidy: ## Fail when `go mod tidy` would change go.mod or go.sum (a requirement missing, unused or marked indirect wrongly).
	$(GO) mod tidy && git diff --exit-code go.mod go.sum || { echo "go.mod/go.sum are not tidy: run 'go mod tidy' and commit"; exit 1; }

.PHONY: check-generate
check-generate: generate ## Fail when regeneration changes a committed generated file.
	@git diff --exit-code --stat -- $(GENERATED) || { echo "generated files are stale: run 'make generate' and commit"; exit 1; }

##@ Set-up (run by test and demo)

# apt-install installs the Debian packages of $(1) that are missing. A package
# removed but not purged is still known to dpkg (dpkg -s succeeds): only the
# status "install ok installed" counts.
define apt-install
	@missing=$$(for p in $(1); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q '^install ok installed$$' || echo $$p; done); \
	if [ -n "$$missing" ]; then echo "installing Debian packages:" $$missing; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; fi
endef

.PHONY: deps
deps: deps-run ## Install the Debian packages the build and tests need (once).
	@: set-up: deps
	$(call apt-install,$(BUILD_PACKAGES))

.PHONY: deps-run
deps-run: ## Install the Debian packages the demo's live data plane needs (iproute2, nftables).
	@: set-up: deps-run
	$(call apt-install,$(RUN_PACKAGES))

.PHONY: deps-images
deps-images: ## Install the Debian packages that build and run the images (buildah, containerd, runc, CNI plugins).
	@: set-up: deps-images
	$(if $(filter buildah,$(IMAGE_BUILDER)),$(call apt-install,$(IMAGE_PACKAGES)),$(call apt-install,$(filter-out buildah,$(IMAGE_PACKAGES))))

.PHONY: tools
tools: $(addprefix tool-,$(TOOLS)) ## Build the pinned upstream tools (etcd, Kubernetes, Prometheus, Alertmanager, istioctl, the OCI registry, the kubelet) into bin/, cached by version.

.PHONY: demo-tools
demo-tools: $(addprefix tool-,$(DEMO_TOOLS)) ## Build only the tools the demo runs (etcd, Kubernetes).

.PHONY: tool-%
tool-%:
	@: set-up: tool:$*
	@hack/build-tool.sh $*

.PHONY: check-setup
check-setup: ## Fail when a make target the README names lacks the set-up it needs (from make -n).
	@hack/check-setup.sh

.PHONY: clean
clean: ## Remove built binaries (the cached tools too).
	rm -rf $(BIN)

##@ Chart

# Helm built from its Go module (tools/helm) has no default Kubernetes version.
HELM_KUBE_VERSION := 1.37.0

.PHONY: chart-check
chart-check: tool-helm ## Lint and render the Helm chart (every optional part on and off); test/chart compares it with deploy/.
	$(BIN)/helm lint --strict $(CHART) --kube-version $(HELM_KUBE_VERSION)
	$(BIN)/helm lint --strict $(CHART) --kube-version $(HELM_KUBE_VERSION) --set judge.enabled=false,monitoring.serviceMonitor.enabled=true,monitoring.podMonitor.enabled=true,monitoring.prometheusRule.enabled=true
	$(BIN)/helm lint --strict $(CHART) --kube-version $(HELM_KUBE_VERSION) --set createIstioNamespace=true,priorityClassQuota.enabled=true,crds.enabled=false
	$(BIN)/helm template nodewise $(CHART) -n nodewise-system --kube-version $(HELM_KUBE_VERSION) >/dev/null
	$(MAKE) --no-print-directory chart-package

.PHONY: chart-package
chart-package: tool-helm ## Package the chart into bin/charts/nodewise-<version>.tgz: what users install and upgrade from (the CRDs are in it).
	$(BIN)/helm package $(CHART) --destination $(BIN)/charts

.PHONY: chart-sync
chart-sync: ## Copy the generated CRDs (files/crds/, rendered by templates/crds.yaml) and the dashboards into the chart (Helm reads only files inside it).
	cp deploy/crds/nodewise.io_*.yaml $(CHART)/files/crds/
	cp deploy/nodeagent/nodewise-node-health.json deploy/orchestrator/nodewise-rollouts.json $(CHART)/dashboards/
