# The two commands a new user needs (see README.md):
#   make run    install missing Debian packages, build in Release, run the demo
#   make test   install missing Debian packages, build in Release, run every test
# Both are idempotent and print little when there is nothing to do.

PRESET ?= release
BUILD  := build/$(PRESET)
CTEST_JOBS ?= 2

.PHONY: run test test-fast test-tsan test-asan build deps bench format clean

run: build
	@$(BUILD)/examples/sequential_vs_concurrent

test: build
	@ctest --test-dir $(BUILD) -j$(CTEST_JOBS) --output-on-failure --no-tests=error

# The quick set while developing: everything but the tests labelled slow.
test-fast: build
	@ctest --test-dir $(BUILD) -j$(CTEST_JOBS) --output-on-failure -LE slow

test-tsan:
	@$(MAKE) --no-print-directory test PRESET=tsan

test-asan:
	@$(MAKE) --no-print-directory test PRESET=asan

build: deps $(BUILD)/CMakeCache.txt
	@cmake --build $(BUILD) -- --quiet

$(BUILD)/CMakeCache.txt:
	@cmake --preset $(PRESET) >/dev/null

deps:
	@scripts/install-deps

bench: build
	@$(BUILD)/bench/bench_executor

format:
	@clang-format -i $$(git ls-files '*.h' '*.cc')

clean:
	@rm -rf build
