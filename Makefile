# SPDX-License-Identifier: MIT
# fern: thin wrapper over CMake. `make test` builds and runs every test in a
# Release build, an ASan+UBSan build and a TSan build, then the install,
# servers and fuzz checks, and ends with one line `N passed, N failed`.
JOBS ?= $(shell nproc)
GEN := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")
CMAKE_COMMON := $(GEN) -DFERN_BUILD_BENCH=ON -DFERN_BUILD_EXAMPLES=ON

.PHONY: all build build-asan build-tsan test test-release test-asan test-tsan test-install test-servers test-fuzz test-aarch64 demo bench bench-hooks bench-idle format lint clean

all: build

build:
	cmake -S . -B build/release $(CMAKE_COMMON) -DCMAKE_BUILD_TYPE=Release
	cmake --build build/release -j $(JOBS)

build-asan:
	cmake -S . -B build/asan $(CMAKE_COMMON) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFERN_SANITIZE=address -DFERN_BUILD_BENCH=OFF
	cmake --build build/asan -j $(JOBS)

build-tsan:
	cmake -S . -B build/tsan $(CMAKE_COMMON) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFERN_SANITIZE=thread -DFERN_BUILD_BENCH=OFF
	cmake --build build/tsan -j $(JOBS)

test-release: build
	cd build/release && ctest --output-on-failure -j 2

test-asan: build-asan
	cd build/asan && ctest --output-on-failure -j 2

test-tsan: build-tsan
	cd build/tsan && ctest --output-on-failure -j 2

# The steps of `make test`, in order: step NAME runs `make test-NAME`, its
# output goes to build/test-logs/NAME.log, and tests/run_steps.sh counts its
# ctest tests (or its own `N passed, N failed` line, or the step as one test).
# To add a step, define a test-NAME target and append NAME here.
TEST_STEPS = release asan tsan install servers fuzz aarch64

test:
	@MAKE="$(MAKE)" sh tests/run_steps.sh build/test-logs $(TEST_STEPS)

# Install into a scratch prefix and build a program against it, both with
# pkg-config and with find_package(fern).
test-install: build
	sh tests/install/check.sh build/release

# The HTTP example end to end: pipelining, malformed and oversized requests,
# idle clients, vanished clients, 2,000 connections, fd leaks, SIGTERM.
test-servers: build
	sh tests/servers/check.sh build/release

# libFuzzer on the HTTP and memcached parsers, FUZZ_TIME seconds each (needs clang).
FUZZ_TIME ?= 60
test-fuzz:
	sh tests/fuzz/run.sh $(FUZZ_TIME)

# aarch64 under qemu-user: cross build with Debian's aarch64 gcc (BTI and
# PAC on: qemu's default CPU enforces both), GoogleTest built from source for
# the target, the whole ctest suite under qemu (plus the stack suites again
# with 64 KiB pages), then a program built against the installed library
# with pkg-config. The examples are built too (those whose libraries the
# target lacks are skipped with a message: cmake/aarch64-linux-gnu.cmake);
# their server tests run natively only (examples/CMakeLists.txt). Release only: no sanitizers under emulation. Step
# `aarch64` of `make test`: the stress and scaled loops run at a tenth of
# their size under qemu (tests/CMakeLists.txt), so the step takes ~5 min.
A64_FLAGS := -mbranch-protection=standard
test-aarch64:
	cmake -S . -B build/aarch64 $(GEN) -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
	  -DCMAKE_BUILD_TYPE=Release -DFERN_BUILD_BENCH=OFF -DFERN_BUILD_EXAMPLES=ON \
	  -DFERN_GTEST_SOURCE=/usr/src/googletest -DFERN_HOOK_CLIENT_TESTS=OFF -DFERN_HOOK_SQLITE_TEST=OFF \
	  -DCMAKE_C_FLAGS="$(A64_FLAGS)" -DCMAKE_CXX_FLAGS="$(A64_FLAGS)" -DCMAKE_ASM_FLAGS="$(A64_FLAGS)"
	cmake --build build/aarch64 -j $(JOBS)
	sh tests/cross/bti.sh build/aarch64
	cd build/aarch64 && ctest --output-on-failure -j 2
	sh tests/cross/check.sh build/aarch64

# Only the tour (and libfern): it runs no other program, so the rest of the
# tree (tests, benchmarks, servers) need not be built to watch it.
demo:
	cmake -S . -B build/release $(CMAKE_COMMON) -DCMAKE_BUILD_TYPE=Release
	cmake --build build/release -j $(JOBS) --target tour
	./build/release/examples/tour

# The drivers draw plots when matplotlib imports; Debian's python3 has it
# (python3-matplotlib), a pyenv or venv python3 first on PATH may not.
BENCH_PYTHON ?= $(shell for p in python3 /usr/bin/python3; do $$p -c 'import matplotlib' 2>/dev/null && { echo $$p; exit; }; done; echo python3)

bench: build
	$(BENCH_PYTHON) bench/tools/run.py
	$(BENCH_PYTHON) bench/servers/servers.py
	$(BENCH_PYTHON) bench/tools/readme_table.py

# fern-hook's benchmarks (docs/hooks.md): starts its own redis-server and
# PostgreSQL, writes bench/results/hooks.{json,md}.
bench-hooks: build
	python3 bench/hooks/hooks.py --build-dir build/release

# The idle-connections scenario (bench/README.md, "Idle connections"): 18,000
# connections per peer, 3 rounds, bench/results/idle.{json,md}; 6-9 minutes.
bench-idle: build
	python3 bench/idle/idle.py --build-dir build/release

format:
	clang-format -i include/fern/*.h include/fern/*.hpp include/fern/cxx/*.hpp $$(find src -name "*.[ch]") tests/*.h tests/*/test_*.cc tests/*/test_*/*.cc tests/*/test_*/*.h tests/stress/*.cc apps/memcached/tests/test_*.cc examples/*.c examples/*.h bench/fern/*.c bench/pthread/*.c bench/hooks/*.c

lint:
	cmake -S . -B build/lint $(GEN) -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DFERN_BUILD_BENCH=OFF
	clang-tidy -p build/lint --quiet $$(find src -name "*.c")

clean:
	rm -rf build
