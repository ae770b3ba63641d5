# psflow - the two commands a newcomer needs are `make demo` and `make test`.
#
#   make demo        install missing dependencies, build, train the Fashion-MNIST MLP example
#   make test        build with -Werror, run every test tier, then again under ASan+UBSan,
#                    fuzz each parser briefly, and check formatting
#   make build       configure and build into build/
#   make bench       run the benchmarks in bench/ (ratios against a baseline of the same run)
#   make test-fast   unit and integration tiers only (no slow training runs, no sanitizers)
#   make test-asan   every test tier built with PSFLOW_SANITIZE=address,undefined
#   make fuzz-smoke  build the libFuzzer targets with clang and run each for FUZZ_SECONDS
#   make format      reformat the C sources with clang-format

BUILD       ?= build
ASAN_BUILD  ?= build-asan
FUZZ_BUILD  ?= build-fuzz
JOBS        ?= $(shell nproc)
FUZZ_SECONDS ?= 10
CTEST       = ctest --output-on-failure --no-tests=error -j$(JOBS)
C_SOURCES   = $(shell git ls-files '*.c' '*.h' 2>/dev/null)

.PHONY: all deps build demo test test-fast test-slow test-asan fuzz-smoke format format-check \
        bench clean

all: build

deps:
	@scripts/deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DPSFLOW_WERROR=ON >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

demo: build
	@echo "== psflow demo: training the Fashion-MNIST MLP (784-256-256-10) in one process"
	@$(BUILD)/psflow train examples/fashion-mnist-mlp.json

test: build format-check
	@echo "== tier: unit + integration + slow (release build)"
	@cd $(BUILD) && $(CTEST)
	@$(MAKE) --no-print-directory test-asan
	@$(MAKE) --no-print-directory fuzz-smoke
	@echo "== all test tiers passed"

test-fast: build
	@cd $(BUILD) && $(CTEST) -LE slow

test-slow: build
	@cd $(BUILD) && $(CTEST) -L slow

test-asan: deps
	@echo "== tier: sanitizers (PSFLOW_SANITIZE=address,undefined)"
	@cmake -S . -B $(ASAN_BUILD) -DPSFLOW_WERROR=ON -DPSFLOW_SANITIZE=address,undefined \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build $(ASAN_BUILD) -j$(JOBS)
	@cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 $(CTEST)

fuzz-smoke: deps
	@echo "== tier: fuzz smoke ($(FUZZ_SECONDS) s per target)"
	@CC=clang cmake -S . -B $(FUZZ_BUILD) -DPSFLOW_FUZZ=ON -DPSFLOW_BUILD_TESTS=OFF \
	  -DPSFLOW_SANITIZE=address,undefined -DPSFLOW_WERROR=ON >/dev/null
	@cmake --build $(FUZZ_BUILD) -j$(JOBS)
	@scripts/fuzz-smoke.sh $(FUZZ_BUILD)/tests/fuzz $(FUZZ_SECONDS)

format:
	@clang-format -i $(C_SOURCES)

format-check:
	@clang-format --dry-run --Werror $(C_SOURCES) || \
	  { echo "formatting differs from .clang-format: run 'make format'"; exit 1; }

bench: build
	@$(BUILD)/bench/train_throughput
	@$(BUILD)/bench/wire 2>/dev/null

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
