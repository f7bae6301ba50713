# The two commands a new user needs (see README.md):
#   make run    install missing Debian packages, build in Release, run the executors demo,
#               train the debug Llama on Tiny Shakespeare (2 ranks) and print a sample
#   make test   install missing Debian packages, build in Release, run each fuzz target for
#               30 s and every test; then the concurrency tests under ThreadSanitizer and the
#               unit and multi-rank tests under AddressSanitizer + UBSan, each in its own build
# Both are idempotent and print little when there is nothing to do.

PRESET ?= release
BUILD  := build/$(PRESET)
CTEST_JOBS ?= 2

.PHONY: run test race asan fuzz test-fast test-tsan test-asan build deps bench format clean wheel

# ccache (found by CMakeLists.txt) hashes the paths under the clone relative to it, so a clean
# clone hits what an earlier clone compiled: make test's three builds then take a few minutes
# instead of most of an hour on 2 cores. The sloppiness lets it cache the tests' precompiled
# header and files a fresh clone has just written.
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := true
export CCACHE_SLOPPINESS := pch_defines,time_macros,include_file_mtime,include_file_ctime
# The tests run on the default collective algorithms, whatever table weft-bench --tune left in
# this machine's cache (the tests that read tables name theirs).
export WEFT_COLLECTIVE_TABLE := off

# The executors demo, then the debug Llama trained on Tiny Shakespeare for a few minutes by 2
# data-parallel ranks (weftrun, shm), its report (out/run/report/index.html) and a sample from
# its last checkpoint.
run: build
	@$(BUILD)/examples/sequential_vs_concurrent
	@rm -f out/run/metrics.jsonl && mkdir -p out/run
	@$(BUILD)/tools/weftrun --nproc-per-node 2 $(BUILD)/tools/weft-train --config configs/debug.toml \
	  --metrics.jsonl_path out/run/metrics.jsonl
	@$(BUILD)/tools/weft-report -o out/run/report out/run/metrics.jsonl
	@$(BUILD)/tools/weft-generate --checkpoint checkpoints/debug --prompt "ROMEO:" \
	  --max-new-tokens 300 --temperature 0.8 --top-k 40 --seed 1

test: build
	@$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=30
	@ctest --test-dir $(BUILD) -j$(CTEST_JOBS) --output-on-failure --no-tests=error
	@$(MAKE) --no-print-directory race asan

# The concurrency tests (label "race") again under ThreadSanitizer.
RACE_TARGETS := flight_recorder_test future_test thread_pool_test process_pool_test collectives_test process_group_test call_check_test shm_transport_test tcp_transport_test hierarchical_engine_test socket_test store_test tcp_store_test file_store_test kernels_threads_test data_parallel_test tensor_parallel_test context_parallel_test
race: deps build/tsan/build.ninja
	@cmake --build build/tsan --target $(RACE_TARGETS) -- --quiet
	@ctest --test-dir build/tsan -L race -j$(CTEST_JOBS) --output-on-failure --no-tests=error

build/tsan/build.ninja:
	@$(call configure,tsan)

# The unit and multi-rank tests (labels unit, multirank; not slow) again under
# AddressSanitizer + UndefinedBehaviorSanitizer: a leak, an overflow or undefined behaviour
# fails the test.
asan: deps build/asan/build.ninja
	@cmake --build build/asan -- --quiet
	@ctest --test-dir build/asan -L 'unit|multirank' -LE slow -j$(CTEST_JOBS) --output-on-failure \
	  --no-tests=error

build/asan/build.ninja:
	@$(call configure,asan)

# The libFuzzer targets (tests/fuzz), built with clang and sanitizers, each run on its seed
# corpus for FUZZ_SECONDS; a crash, leak or hang fails with the input kept in build/fuzz.
FUZZ_TARGETS := store_request_fuzz tcp_frame_fuzz tcp_handshake_fuzz flight_dump_fuzz
FUZZ_SECONDS ?= 120
fuzz: deps build/fuzz/build.ninja
	@cmake --build build/fuzz --target $(FUZZ_TARGETS) -- --quiet
	@scripts/run-fuzz $(FUZZ_SECONDS) $(FUZZ_TARGETS)

build/fuzz/build.ninja:
	@$(call configure,fuzz)

# The Python package as a wheel (docs/PYTHON.md), from this build's extensions, into
# $(BUILD)/dist; offline: Debian's setuptools and wheel build it.
wheel: build
	@WEFT_BUILD_DIR=$(BUILD) /usr/bin/python3 -m pip wheel --quiet --no-build-isolation --no-deps \
	  --no-index -w $(BUILD)/dist .
	@ls $(BUILD)/dist/weft-*.whl

# The quick set while developing: everything but the tests labelled slow.
test-fast: build
	@ctest --test-dir $(BUILD) -j$(CTEST_JOBS) --output-on-failure -LE slow

# The whole suite under one sanitizer, by hand.
test-tsan: deps build/tsan/build.ninja
	@cmake --build build/tsan -- --quiet
	@ctest --test-dir build/tsan -j$(CTEST_JOBS) --output-on-failure --no-tests=error

test-asan: deps build/asan/build.ninja
	@cmake --build build/asan -- --quiet
	@ctest --test-dir build/asan -j$(CTEST_JOBS) --output-on-failure --no-tests=error

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
