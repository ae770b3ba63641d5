# psflow - the two commands a newcomer needs are `make demo` and `make test`.
#
#   make demo        install missing dependencies, build, start a local cluster (psflow up),
#                    train the Fashion-MNIST MLP example through the job API, print the
#                    final accuracy and the dashboard URL, stop the cluster
#   make test        build with -Werror, check formatting and the layout, lint the OpenAPI
#                    file, run every test once or twice: in the release build all but those
#                    labelled sanitizer-only, under ASan+UBSan all but those labelled
#                    release-only or accuracy (docs/testing.md, "Which build runs a test");
#                    fuzz each parser briefly, and run the container tier (reported as
#                    skipped when dockerd cannot start)
#   make test-full   the same with every test in both builds (accuracy in release only)
#   make build       configure and build into build/ (with the CUDA backend when a CUDA
#                    toolkit is found: cmake option PSFLOW_CUDA=AUTO, the default)
#   make bench       run the benchmarks in bench/ (ratios against a baseline of the same run)
#   make test-fast   unit and integration tiers only (no slow training runs, no sanitizers)
#   make test-asan   make test's sanitizer tier (PSFLOW_SANITIZE=address,undefined);
#                    test-asan-full: every test but the accuracy ones
#   make fuzz-smoke  build the libFuzzer targets with clang and run each for FUZZ_SECONDS
#   make test-docker build the image on a local Debian base, docker-compose up, train, scale
#   make lint-openapi lint api/openapi.yaml with the pinned @redocly/cli
#   make format      reformat the C sources with clang-format
#   make check-layout check the layering of common/, the roles' includes, no GLOB, unique
#                    C file and header names, no circle between a folder's files, no
#                    function over 120 lines, ARCHITECTURE.md naming every folder and file
#                    (scripts/check-layout.sh; also a unit test)

BUILD       ?= build
ASAN_BUILD  ?= build-asan
FUZZ_BUILD  ?= build-fuzz
JOBS        ?= $(shell nproc)
FUZZ_SECONDS ?= 10
CTEST       = ctest --output-on-failure --no-tests=error -j$(JOBS)
# Labels a tier leaves out: a test labelled sanitizer-only checks nothing that an optimized
# build changes, so make test runs it under the sanitizers only; one labelled release-only
# takes minutes under them, so make test runs it in the release build only (test-full and
# test-asan-full run both).
RELEASE_SKIP ?= sanitizer-only
ASAN_SKIP    ?= accuracy|release-only
C_SOURCES   = $(shell git ls-files '*.c' '*.h' '*.cu' 2>/dev/null)
# The build's own progress only: CMake's generated makefiles are sub-makes of this one and
# would otherwise print "Entering directory" around every target.
CMAKE_BUILD = MAKEFLAGS=--no-print-directory cmake --build

.PHONY: all deps build demo test test-full test-fast test-slow test-asan test-asan-full test-docker fuzz-smoke format \
        format-check check-layout lint-openapi bench clean

all: build

deps:
	@scripts/deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DPSFLOW_WERROR=ON >/dev/null
	@$(CMAKE_BUILD) $(BUILD) -j$(JOBS)

demo: build
	@scripts/demo.sh $(BUILD)

test: build format-check check-layout lint-openapi
	@echo "== tier: unit + integration + slow + browser (release build$(if $(RELEASE_SKIP),; not: $(RELEASE_SKIP)))"
	@cd $(BUILD) && $(CTEST) $(if $(RELEASE_SKIP),-LE "$(RELEASE_SKIP)")
	@$(MAKE) --no-print-directory test-asan
	@$(MAKE) --no-print-directory fuzz-smoke
	@$(MAKE) --no-print-directory test-docker
	@echo "== all test tiers passed"

test-full:
	@$(MAKE) --no-print-directory test RELEASE_SKIP= ASAN_SKIP=accuracy

test-asan-full:
	@$(MAKE) --no-print-directory test-asan ASAN_SKIP=accuracy

test-fast: build
	@cd $(BUILD) && $(CTEST) -LE "slow|browser"

test-slow: build
	@cd $(BUILD) && $(CTEST) -L slow

test-asan: deps
	@echo "== tier: sanitizers (PSFLOW_SANITIZE=address,undefined; not: $(ASAN_SKIP))"
	@cmake -S . -B $(ASAN_BUILD) -DPSFLOW_WERROR=ON -DPSFLOW_SANITIZE=address,undefined \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@$(CMAKE_BUILD) $(ASAN_BUILD) -j$(JOBS)
	@cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 $(CTEST) -LE "$(ASAN_SKIP)"

fuzz-smoke: deps
	@echo "== tier: fuzz smoke ($(FUZZ_SECONDS) s per target)"
	@CC=clang cmake -S . -B $(FUZZ_BUILD) -DPSFLOW_FUZZ=ON -DPSFLOW_BUILD_TESTS=OFF \
	  -DPSFLOW_SANITIZE=address,undefined -DPSFLOW_WERROR=ON -DPSFLOW_CUDA=OFF >/dev/null
	@$(CMAKE_BUILD) $(FUZZ_BUILD) -j$(JOBS)
	@scripts/fuzz-smoke.sh $(FUZZ_BUILD)/tests/fuzz $(FUZZ_SECONDS)

test-docker: deps
	@echo "== tier: containers (Dockerfile, docker-compose.yml on a private dockerd)"
	@rc=0; scripts/test-docker.sh || rc=$$?; \
	  if [ $$rc = 77 ]; then echo "== tier: containers SKIPPED (reason above)"; \
	  elif [ $$rc != 0 ]; then exit $$rc; fi

check-layout:
	@scripts/check-layout.sh

lint-openapi: deps
	@scripts/lint-openapi.sh

format:
	@clang-format -i $(C_SOURCES)

format-check:
	@clang-format --dry-run --Werror $(C_SOURCES) || \
	  { echo "formatting differs from .clang-format: run 'make format'"; exit 1; }

bench: build
	@$(BUILD)/bench/train_throughput
	@$(BUILD)/bench/wire_throughput 2>/dev/null
	@$(BUILD)/bench/sparse 2>/dev/null
	@bench/coordinator.sh $(BUILD)
	@bench/train_distributed.sh $(BUILD)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
