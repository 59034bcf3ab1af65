# Sluice build, test and benchmark targets. `make help` lists them.
SHELL := /bin/bash
GO ?= go
BIN := bin/sluice
PKGS := ./...
FUZZTIME ?= 3s

.PHONY: help build test test-short check lint fmt bench proto demo deps models fuzz clean image image-python

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

deps: ## install what the tests and the demo need (idempotent)
	@scripts/setup.sh

build: ## build bin/sluice
	$(GO) build -ldflags "-X github.com/sluice-ml/sluice/internal/cli.Commit=$$(git rev-parse HEAD 2>/dev/null)$$(git diff --quiet HEAD 2>/dev/null || echo -dirty)" -o $(BIN) ./cmd/sluice

test: deps ## vet, lint, unit + integration tests with -race, then each fuzz target briefly
	$(GO) vet $(PKGS)
	"$$(scripts/install-golangci-lint.sh)" run
	# go vet above ran every analyzer go test would run again per package (-vet=off).
	$(GO) test -vet=off -race -shuffle=on -count=1 -timeout 20m $(PKGS)
	# Allocation guards build only without -race (the race detector drops pooled objects).
	$(GO) test -vet=off -count=1 -run 'Allocations' ./internal/batch/ ./internal/httpapi/ ./internal/feature/serving/ ./internal/feature/servingapi/ ./internal/shm/
	@scripts/fuzz.sh $(FUZZTIME)

test-short: ## the unit tier, no race detector: the integration, docs, deploy, browser and drill tiers are left out (docs/architecture.md, Test tiers)
	$(GO) test -short -count=1 $(PKGS)

lint: ## golangci-lint (pinned; scripts/install-golangci-lint.sh builds it once) with .golangci.yml
	"$$(scripts/install-golangci-lint.sh)" run

fuzz: ## run every fuzz target for FUZZTIME each
	@scripts/fuzz.sh $(FUZZTIME)

check: ## format check, then make test (vet, lint, tests)
	@test -z "$$(gofmt -l $$(git ls-files '*.go' | grep -v '^internal/pb/'))" || { gofmt -l $$(git ls-files '*.go' | grep -v '^internal/pb/'); exit 1; }
	$(MAKE) test

proto: ## regenerate internal/pb from proto/ with the pinned generators in go.mod
	protoc -I proto \
	  --plugin=protoc-gen-go=$$($(GO) tool -n protoc-gen-go) \
	  --plugin=protoc-gen-go-grpc=$$($(GO) tool -n protoc-gen-go-grpc) \
	  --go_out=. --go_opt=module=github.com/sluice-ml/sluice \
	  --go-grpc_out=. --go-grpc_opt=module=github.com/sluice-ml/sluice \
	  proto/*.proto

models: ## regenerate examples/models with Debian's torch (slow; results are committed)
	/usr/bin/python3 scripts/make_models.py
	/usr/bin/python3 scripts/make_ensemble_example.py

bench: deps build ## run the benchmark harness; results land in bench/results/
	@bench/run.sh

demo: deps build ## run the whole chain (gateway, features, models) on the embedded default and show a few calls
	@scripts/demo.sh

image: ## build the container image (localhost/sluice:default) with mmdebstrap and buildah; a no-op when its inputs are unchanged
	@scripts/image.sh --variant default

image-python: ## build the Python variant (localhost/sluice:python: python3-numpy, python3-torch)
	@scripts/image.sh --variant python

clean:
	rm -rf bin
