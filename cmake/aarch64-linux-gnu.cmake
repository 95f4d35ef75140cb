# SPDX-License-Identifier: MIT
# Cross build for 64-bit Arm Linux with Debian's cross toolchain
# (gcc-aarch64-linux-gnu, g++-aarch64-linux-gnu). Test programs run under
# qemu-user with the target's libraries from /usr/aarch64-linux-gnu.
#
#   cmake -S . -B build/aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
#
# FERN_CROSS_PREFIX overrides the tool prefix (default aarch64-linux-gnu-),
# FERN_CROSS_SYSROOT the target's library root (default /usr/aarch64-linux-gnu),
# FERN_CROSS_PKG_CONFIG_LIBDIR the target's pkg-config directories (default
# below).
#
# Only the target's libraries are found: find_library, find_path and
# find_package search the target root, and pkg-config (pkg_check_modules)
# reads only the target's .pc files. A library installed for the host alone
# (libhiredis-dev without libhiredis-dev:arm64) is then "not found", and
# what needs it (examples/redis_hook) is skipped with a message, instead of
# linking the host's -lhiredis, which the cross linker cannot use.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

if(NOT FERN_CROSS_PREFIX)
  set(FERN_CROSS_PREFIX aarch64-linux-gnu-)
endif()
if(NOT FERN_CROSS_SYSROOT)
  set(FERN_CROSS_SYSROOT /usr/aarch64-linux-gnu)
endif()
set(CMAKE_C_COMPILER ${FERN_CROSS_PREFIX}gcc)
set(CMAKE_CXX_COMPILER ${FERN_CROSS_PREFIX}g++)
set(CMAKE_ASM_COMPILER ${FERN_CROSS_PREFIX}gcc)

# Libraries and headers come from the target root; programs (the build's own
# tools) from the host.
set(CMAKE_FIND_ROOT_PATH ${FERN_CROSS_SYSROOT})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# pkg-config: PKG_CONFIG_LIBDIR replaces the default search path (the
# host's /usr/lib/x86_64-linux-gnu/pkgconfig, ...) with the target's: the
# cross root's own, and Debian's multiarch directory, where an arm64 -dev
# package (dpkg --add-architecture arm64) puts its .pc file. The host's
# PKG_CONFIG_PATH would be searched first, so it is cleared for the build.
string(REGEX REPLACE "-$" "" _fern_triplet "${FERN_CROSS_PREFIX}")
if(NOT FERN_CROSS_PKG_CONFIG_LIBDIR)
  set(FERN_CROSS_PKG_CONFIG_LIBDIR
    "${FERN_CROSS_SYSROOT}/lib/pkgconfig:${FERN_CROSS_SYSROOT}/share/pkgconfig:/usr/lib/${_fern_triplet}/pkgconfig:/usr/share/pkgconfig")
endif()
set(ENV{PKG_CONFIG_LIBDIR} "${FERN_CROSS_PKG_CONFIG_LIBDIR}")
set(ENV{PKG_CONFIG_PATH} "")

# Defaults for fern's own options in a cross build (each can be given on the
# command line instead): GoogleTest built from Debian's source package, as
# no target GoogleTest is installed; no hiredis/libpq client tests
# (tests/CMakeLists.txt) and no benchmarks (bench/, which need both
# libraries, and are measured on the machine they run on), as a host rarely
# has those libraries for the target. The examples are built.
if(NOT DEFINED FERN_GTEST_SOURCE AND EXISTS /usr/src/googletest/CMakeLists.txt)
  set(FERN_GTEST_SOURCE /usr/src/googletest CACHE PATH "GoogleTest source tree")
endif()
set(FERN_HOOK_CLIENT_TESTS OFF CACHE BOOL "fern-hook tests with hiredis/libpq and real servers")
set(FERN_BUILD_BENCH OFF CACHE BOOL "Build bench/ programs")

# ctest (and gtest_discover_tests) run target programs through qemu-user.
find_program(FERN_QEMU_AARCH64 qemu-aarch64)
if(FERN_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${FERN_QEMU_AARCH64} -L ${FERN_CROSS_SYSROOT})
endif()
