# Gleaner's build. Everything it needs comes from the Go module graph.
SHELL := /bin/bash
GO ?= go
BIN := bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
KUBE_VERSION := v1.37.2
# Stamp the Kubernetes version too: the scheduler reports it and kubectl parses it.
LDFLAGS := -X github.com/gleaner-dev/gleaner/pkg/version.Version=$(VERSION) \
	-X github.com/gleaner-dev/gleaner/pkg/version.Commit=$(COMMIT) \
	-X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 \
	-X k8s.io/component-base/version.gitMinor=37 \
	-X k8s.io/client-go/pkg/version.gitVersion=$(KUBE_VERSION) \
	-X k8s.io/client-go/pkg/version.gitMajor=1 \
	-X k8s.io/client-go/pkg/version.gitMinor=37
# Static binaries without local paths, as the images and releases are: every
# binary and the demo driver build with one configuration, so that a first
# `make demo` compiles Kubernetes once. (Tests cannot take -trimpath: the
# apiserver's test server finds its files from its source path.)
export CGO_ENABLED := 0
BUILDFLAGS := -trimpath
# Unit tests: every package but the integration suite and the scheduler_perf benchmark.
UNIT_PKGS = $(shell $(GO) list ./... | grep -v -e /test/integration -e /test/perf)
# Integration tests start etcd, kube-apiserver and both schedulers in-process.
INTEGRATION_TIMEOUT ?= 20m

.PHONY: minors test-minors all build images push release test-images test-perf test-perf-controller bench-controller tools manifests docs bench-perf bench-informer demo demo-check test test-unit test-integration test-faults verify fmt vet tidy-check clean

all: build

build:
	$(GO) build $(BUILDFLAGS) -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/...

# Container images without a Docker engine (hack/images, go-containerregistry):
# one per command, each its static binary, the CA certificates and a non-root
# user on no base image, for every platform in PLATFORMS, written as OCI image
# layouts in IMAGES_OUT with their digests in IMAGES_OUT/images.json.
# `make push REGISTRY=registry.example.com/gleaner` pushes them.
# gleaner-scheduler-kube1.35 is gleaner-scheduler for Kubernetes 1.35 (MINORS).
IMAGES = gleaner-scheduler gleaner-controller kubectl-gleaner gleaner gleaner-train-example $(MINORS:%=gleaner-scheduler-kube%)
PLATFORMS ?= linux/amd64,linux/arm64
IMAGES_OUT ?= dist/images
images:
	$(GO) run ./hack/images build --out $(IMAGES_OUT) --version $(VERSION) --ldflags '$(LDFLAGS)' --platforms $(PLATFORMS) $(IMAGES)

push:
	$(GO) run ./hack/images push --out $(IMAGES_OUT) --registry '$(REGISTRY)'

# A release in dist/: the images for every platform, the chart packaged with
# their digests pinned, shared.yaml and install.yaml (the same for kubectl),
# the CLI for linux and darwin on amd64 and arm64, and checksums.txt.
# RELEASE_REGISTRY is where `make push` will put the images.
RELEASE_REGISTRY ?= ghcr.io/gleaner-dev
release:
	@[[ "$(VERSION)" =~ ^v[0-9]+\.[0-9]+\.[0-9]+ ]] || { echo "usage: make release VERSION=vX.Y.Z"; exit 2; }
	$(MAKE) images VERSION=$(VERSION) IMAGES_OUT=dist/images
	$(GO) run ./hack/release --version $(VERSION) --out dist --images dist/images --registry $(RELEASE_REGISTRY) --ldflags '$(LDFLAGS)'

# The images for this machine's platform, opened and checked, each binary run
# from its layer with --version (internal/ociimage TestBuiltImages), and a
# release's install.yaml pinned to their digests (TestReleaseOfBuiltImages).
test-images:
	$(MAKE) images PLATFORMS=linux/$$($(GO) env GOARCH) IMAGES_OUT=$(BIN)/images
	GLEANER_IMAGES=$(abspath $(BIN)/images) $(GO) test -count=1 -run '^(TestBuiltImages|TestReleaseOfBuiltImages)$$' ./internal/ociimage ./internal/release

# The local cluster's parts, built from the module graph as one program
# (hack/localcluster): etcd, kube-apiserver, the Deployment and ReplicaSet
# controllers and KWOK, each run as its own process. bin/tools/etcd links to it
# for scheduler_perf, which starts etcd from PATH.
TOOLS := $(BIN)/tools
tools:
	@mkdir -p $(TOOLS)
	$(GO) build $(BUILDFLAGS) -ldflags '$(LDFLAGS)' -o $(TOOLS)/localcluster ./hack/localcluster
	ln -sf localcluster $(TOOLS)/etcd

# Older Kubernetes minors (hack/minors, docs/install.md "Kubernetes versions"):
# a module per minor builds gleaner-scheduler from the same plugin code against
# that minor's k8s.io/kubernetes, with the build tag kube<minor>, since
# upstream allows no kube-scheduler newer than its API server; the oldest's
# module builds its kube-apiserver too. `make minors` writes bin/minors/<minor>/.
# test-minors runs the install and lend-and-reclaim tests on the oldest
# minor's API server and scheduler (the rest of `make test` runs the newest's).
MINORS := 1.35 1.36
MINOR_OLDEST := 1.35
minors:
	$(GO) run ./hack/minors --out $(BIN)/minors --ldflags '$(LDFLAGS)' $(MINORS)

test-minors: minors
	GLEANER_MINOR_BIN=$(abspath $(BIN))/minors/$(MINOR_OLDEST) INTEGRATION_LOG=$(BIN)/minors.log \
		hack/test-integration.sh -run '^(TestInstall|TestHarvestLendsIdleGPUsAndGivesThemBack)$$'

# manifests/: the Helm chart charts/gleaner rendered with its default values,
# as a kustomize tree (edit the chart; `make test-unit` fails when they differ).
# dist/shared.yaml (the PodGroup CRD and PriorityClasses, kept by an uninstall)
# and dist/install.yaml (Gleaner itself), each one YAML file for kubectl apply -f.
manifests:
	UPDATE_MANIFESTS=1 $(GO) test -count=1 -run '^TestManifestsAreTheChartRendered$$' ./internal/chart
	@mkdir -p dist
	$(GO) run ./hack/render manifests/shared > dist/shared.yaml
	$(GO) run ./hack/render manifests > dist/install.yaml
	@echo "wrote manifests/, dist/shared.yaml and dist/install.yaml"

# docs/reference/: every controller flag and plugin arg, written from the code.
# `make test-unit` fails when they are stale.
docs:
	UPDATE_REFERENCE=1 $(GO) test -count=1 -run '^TestReference$$' ./cmd/gleaner-controller ./pkg/scheduler

# Kubernetes' own scheduler benchmark (scheduler_perf) with Gleaner's plugins:
# every workload of test/perf/config through the shipped gleaner-scheduler
# profile and through the default plugins. Prints one line per workload; the
# data items and the log land in bench/perf/. hack/bench-perf.sh runs each
# workload in a fresh process beside the ones it is compared with, PERF_COUNT
# rounds, every other round in reverse, and reports medians (two cores shared
# with etcd and the apiserver move one run's figures by 10-30%). PERF_LABELS
# picks workloads by label ("performance"; "short" for a quick check);
# PERF_BENCH by name (e.g. 'BenchmarkPerfScheduling/Reclaim_').
PERF_LABELS ?= performance
PERF_COUNT ?= 1
PERF_BENCH ?= BenchmarkPerfScheduling
PERF_OUT ?= bench/perf
bench-perf: tools
	$(GO) test -c -o $(BIN)/perf.test ./test/perf
	GO=$(GO) PERF_LABELS=$(PERF_LABELS) PERF_COUNT=$(PERF_COUNT) PERF_BENCH='$(PERF_BENCH)' PERF_OUT=$(PERF_OUT) hack/bench-perf.sh

# The benchmark's set-up, checked in make test: every workload at 10 nodes
# (about two minutes: a process per workload), through the shipped profile, into bin/perf-short.
test-perf:
	$(MAKE) bench-perf PERF_LABELS=short PERF_OUT=$(BIN)/perf-short

# gleaner-controller at fleet scale (hack/bench-controller): the real binary
# against etcd and kube-apiserver from `make tools`, Node and Pod objects
# only (no kubelet), 1,000 inference services behind one `gleaner vllm-sim`.
# Per size in CONTROLLER_SIZES (NODES:BEST_EFFORT_PODS, each a fresh cluster):
# a harvest window opening on every node, steady state, a restart, a
# fleet-wide load step, and what the API server alone makes of evictions
# (the controller stopped); round wall and CPU time, API writes per round by kind,
# the API server's requests by verb, the controller's RSS and Go heap, and
# eviction times. About 10 minutes a size at 1,000 to 5,000 nodes on 2 cores;
# results in bin/bench-controller-runs/results.md. See bench/README.md.
CONTROLLER_SIZES ?= 1000:20000,5000:20000,10000:50000
CONTROLLER_FLAGS ?=
bench-controller: build tools
	$(GO) build $(BUILDFLAGS) -o $(BIN)/ ./hack/bench-controller
	$(BIN)/bench-controller --sizes $(CONTROLLER_SIZES) --out $(BIN)/bench-controller-runs $(CONTROLLER_FLAGS)

# The controller benchmark's set-up, checked in make test: 200 nodes, steady
# state only (about a minute).
test-perf-controller: build tools
	$(GO) build $(BUILDFLAGS) -o $(BIN)/ ./hack/bench-controller
	$(BIN)/bench-controller --sizes 200:1000 --services 200 --scenarios steady --steady 20s --out $(BIN)/bench-controller-short

# The vLLM metrics informer beside Debian's Prometheus 2.42 (installed with
# apt-get when missing: hack/ensure-prometheus.sh), each a process of its own,
# scraping the same INFORMER_ENDPOINTS endpoints of one `gleaner vllm-sim`
# (loopback addresses 127.77.x.y) every 5 s at the same time: CPU per scrape
# from /proc, resident memory, and checks that both completed their scrapes.
# INFORMER_ROUNDS rounds of fresh processes, each 30 s of warm-up and a
# 2-minute window (about 8 minutes for 3); medians in a table. Results and
# logs land in bin/bench-informer-runs/. See bench/README.md.
INFORMER_ENDPOINTS ?= 2000
INFORMER_ROUNDS ?= 3
INFORMER_FLAGS ?=
bench-informer:
	$(GO) build $(BUILDFLAGS) -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/gleaner ./hack/bench-informer
	$(BIN)/bench-informer --gleaner $(BIN)/gleaner --prometheus $$(hack/ensure-prometheus.sh) \
		--endpoints $(INFORMER_ENDPOINTS) --rounds $(INFORMER_ROUNDS) --out $(BIN)/bench-informer-runs $(INFORMER_FLAGS)

# A local cluster (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# KWOK GPU nodes, gleaner-scheduler, gleaner-controller, gleaner vllm-sim, each a
# process) through a day of inference traffic compressed into DEMO_MINUTES.
# Logs land in bin/demo/<timestamp>/. See docs/demo.md.
# DEMO_NOTICES=off runs the same day without reclaim notices, to measure what
# they save.
DEMO_MINUTES ?= 3
DEMO_NOTICES ?= on
demo: build tools
	$(GO) run $(BUILDFLAGS) ./hack/demo --minutes=$(DEMO_MINUTES) --notices=$(DEMO_NOTICES)

# The demo with a 2-minute day and its self-checks (it exits non-zero when
# Gleaner did not lend, reclaim in time or autoscale): about 3 minutes with warm
# build caches, so `make test` runs it.
demo-check: build tools
	$(GO) run $(BUILDFLAGS) ./hack/demo --minutes=2

test: test-unit test-integration test-minors test-faults demo-check test-images test-perf test-perf-controller

# examples/python's trainer is tested with Debian's python3-torch, installed
# with apt-get when missing (hack/ensure-torch.sh says so).
test-unit:
	PYTHON=$$(hack/ensure-torch.sh) GLEANER_REQUIRE_TORCH=1 $(GO) test -count=1 $(UNIT_PKGS)

# TestConsole drives the web console in headless Chromium: Debian's package,
# installed with apt-get when missing (hack/ensure-chromium.sh says so);
# TestPythonTrainerKeepsTheContract runs examples/python with PyTorch (hack/ensure-torch.sh).
test-integration:
	CHROMIUM=$$(hack/ensure-chromium.sh) GLEANER_REQUIRE_BROWSER=1 PYTHON=$$(hack/ensure-torch.sh) GLEANER_REQUIRE_TORCH=1 INTEGRATION_TIMEOUT=$(INTEGRATION_TIMEOUT) hack/test-integration.sh -skip '^TestFaults$$'

# The fault scenarios (test/integration/faults_test.go): the whole system
# through a hostile tenant's and a bad day's faults, checking its invariants.
# One line per scenario, and what a failing one said; the full log is
# bin/faults.log. See docs/reliability.md.
test-faults:
	@INTEGRATION_TIMEOUT=$(INTEGRATION_TIMEOUT) INTEGRATION_LOG=bin/faults.log hack/test-integration.sh -run '^TestFaults$$' >/dev/null; rc=$$?; \
		grep -E 'faults_test\.go:[0-9]+: |^\s*--- (PASS|FAIL)|^panic:' bin/faults.log | sed -E 's/^\s*faults_test.go:[0-9]+: (fault: )/\1/'; exit $$rc

verify: fmt vet tidy-check

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

tidy-check:
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum are not tidy: run 'go mod tidy'"; exit 1; }
	@for m in $(MINORS); do (cd hack/minors/$$m && $(GO) mod tidy -diff) || { echo "hack/minors/$$m: go.mod/go.sum are not tidy: run 'go mod tidy' there"; exit 1; }; done

clean:
	rm -rf $(BIN) dist
