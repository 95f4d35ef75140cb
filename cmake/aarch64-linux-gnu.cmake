# SPDX-License-Identifier: MIT
# Cross build for 64-bit Arm Linux with Debian's cross toolchain
# (gcc-aarch64-linux-gnu, g++-aarch64-linux-gnu). Test programs run under
# qemu-user with the target's libraries from /usr/aarch64-linux-gnu.
#
#   cmake -S . -B build/aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
#
# FERN_CROSS_PREFIX overrides the tool prefix (default aarch64-linux-gnu-),
# FERN_CROSS_SYSROOT the target's library root (default /usr/aarch64-linux-gnu).
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

# ctest (and gtest_discover_tests) run target programs through qemu-user.
find_program(FERN_QEMU_AARCH64 qemu-aarch64)
if(FERN_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${FERN_QEMU_AARCH64} -L ${FERN_CROSS_SYSROOT})
endif()
