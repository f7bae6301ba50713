# The two commands a new user needs (see README.md):
#   make run    install missing Debian packages, build in Release, run the executors demo,
#               train the debug Llama on Tiny Shakespeare (2 ranks) and print a sample
#   make test   install missing Debian packages, build in Release, run each fuzz target for
#               30 s and every test
# Both are idempotent and print little when there is nothing to do.

PRESET ?= release
BUILD  := build/$(PRESET)
CTEST_JOBS ?= 2

.PHONY: run test race fuzz test-fast test-tsan test-asan build deps bench format clean

# The executors demo, then the debug Llama trained on Tiny Shakespeare for a few minutes by 2
# data-parallel ranks (weftrun, shm) and a sample from its last checkpoint.
run: build
	@$(BUILD)/examples/sequential_vs_concurrent
	@$(BUILD)/tools/weftrun --nproc-per-node 2 $(BUILD)/tools/weft-train --config configs/debug.toml
	@$(BUILD)/tools/weft-generate --checkpoint checkpoints/debug --prompt "ROMEO:" \
	  --max-new-tokens 300 --temperature 0.8 --top-k 40 --seed 1

test: build
	@$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=30
	@ctest --test-dir $(BUILD) -j$(CTEST_JOBS) --output-on-failure --no-tests=error

# The concurrency tests (label "race") again under ThreadSanitizer. Not part of make test:
# its build and run take about 6.5 minutes on 2 cores; run it before committing concurrent
# code.
RACE_TARGETS := future_test thread_pool_test process_pool_test collectives_test process_group_test call_check_test tcp_transport_test hierarchical_engine_test socket_test store_test tcp_store_test file_store_test kernels_threads_test data_parallel_test tensor_parallel_test context_parallel_test
race: deps build/tsan/build.ninja
	@cmake --build build/tsan --target $(RACE_TARGETS) -- --quiet
	@ctest --test-dir build/tsan -L race -j$(CTEST_JOBS) --output-on-failure --no-tests=error

build/tsan/build.ninja:
	@$(call configure,tsan)

# The libFuzzer targets (tests/fuzz), built with clang and sanitizers, each run on its seed
# corpus for FUZZ_SECONDS; a crash, leak or hang fails with the input kept in build/fuzz.
FUZZ_TARGETS := store_request_fuzz tcp_frame_fuzz tcp_handshake_fuzz
FUZZ_SECONDS ?= 120
fuzz: deps build/fuzz/build.ninja
	@cmake --build build/fuzz --target $(FUZZ_TARGETS) -- --quiet
	@scripts/run-fuzz $(FUZZ_SECONDS) $(FUZZ_TARGETS)

build/fuzz/build.ninja:
	@$(call configure,fuzz)

# The quick set while developing: everything but the tests labelled slow.
test-fast: build
	@ctest --test-dir $(BUILD) -j$(CTEST_JOBS) --output-on-failure -LE slow

test-tsan:
	@$(MAKE) --no-print-directory test PRESET=tsan

test-asan:
	@$(MAKE) --no-print-directory test PRESET=asan

build: deps $(BUILD)/build.ninja
	@cmake --build $(BUILD) -- --quiet

# Keyed on build.ninja, which CMake writes only when a configure succeeds: a failed one (a
# package missing) leaves a CMakeCache.txt behind, and the next make configures again.
$(BUILD)/build.ninja:
	@$(call configure,$(PRESET))

configure = cmake --preset $(1) >/dev/null || { echo "make: configuring build/$(1) failed" \
  "(above: what CMake could not find). scripts/install-deps installs every package weft" \
  "needs; if one is missing from its list, add it there. Then run make again." >&2; exit 1; }

deps:
	@scripts/install-deps

bench: build
	@$(BUILD)/bench/bench_executor

format:
	@clang-format -i $$(git ls-files '*.h' '*.cc')

clean:
	@rm -rf build
