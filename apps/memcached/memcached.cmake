# SPDX-License-Identifier: MIT
# fern-memcached and its end-to-end tests. Included from apps/memcached/CMakeLists.txt.
set(FERN_MC_DIR ${CMAKE_CURRENT_LIST_DIR})
add_executable(fern-memcached
  ${FERN_MC_DIR}/main.c ${FERN_MC_DIR}/cmdline.c ${FERN_MC_DIR}/store.c
  ${FERN_MC_DIR}/conn.c ${FERN_MC_DIR}/ascii.c ${FERN_MC_DIR}/ascii_parse.c
  ${FERN_MC_DIR}/binary.c ${FERN_MC_DIR}/binary_parse.c ${FERN_MC_DIR}/stats.c)
target_link_libraries(fern-memcached PRIVATE fern)
target_compile_definitions(fern-memcached PRIVATE _GNU_SOURCE)
target_compile_options(fern-memcached PRIVATE -Wall -Wextra -Werror)

# Installed with the library (`cmake --install`): the server to bin/, found
# relative to itself as PREFIX/bin/../LIBDIR/libfern.so (so an install into
# any prefix runs without LD_LIBRARY_PATH), and its page to man1.
set_target_properties(fern-memcached PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
install(TARGETS fern-memcached RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
configure_file(${FERN_MC_DIR}/fern-memcached.1.in ${CMAKE_BINARY_DIR}/man/man1/fern-memcached.1 @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/man/man1/fern-memcached.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)

# End-to-end tests. Each runs against fern-memcached and, as the proof that
# the checks are right, against memcached itself (Debian `memcached`;
# memccapable is Debian `libmemcached-tools`; .ci/run installs both). A
# missing program fails the test: none of them skips.
if(BUILD_TESTING)
  set(FERN_MC_CHECK ${FERN_MC_DIR}/tests/memcached_check.py)
  find_program(FERN_MEMCACHED_REFERENCE memcached)
  if(NOT FERN_MEMCACHED_REFERENCE)
    set(FERN_MEMCACHED_REFERENCE memcached)
  endif()
  add_test(NAME memcached_memccapable
    COMMAND python3 ${FERN_MC_CHECK} fern $<TARGET_FILE:fern-memcached> --memccapable)
  add_test(NAME memcached_memccapable_reference
    COMMAND python3 ${FERN_MC_CHECK} memcached ${FERN_MEMCACHED_REFERENCE} --memccapable)
  # TSan stops a process at 8,128 threads and counts green threads: the
  # simultaneous-connections check runs 10,000 everywhere else, 4,000 there.
  set(FERN_MC_CONNS 10000)
  if(FERN_SANITIZE STREQUAL "thread")
    set(FERN_MC_CONNS 4000)
  endif()
  add_test(NAME memcached_check
    COMMAND python3 ${FERN_MC_CHECK} fern $<TARGET_FILE:fern-memcached> --connections ${FERN_MC_CONNS})
  add_test(NAME memcached_check_reference
    COMMAND python3 ${FERN_MC_CHECK} memcached ${FERN_MEMCACHED_REFERENCE})
  # The same bytes to both servers, the answers compared with each other and
  # with memcached 1.6.18's (tests/memcached_diff.py).
  add_test(NAME memcached_differential
    COMMAND python3 ${FERN_MC_DIR}/tests/memcached_diff.py
      $<TARGET_FILE:fern-memcached> ${FERN_MEMCACHED_REFERENCE})
  set_tests_properties(memcached_memccapable memcached_memccapable_reference memcached_check
    memcached_check_reference memcached_differential PROPERTIES LABELS servers TIMEOUT 300
    ENVIRONMENT "TSAN_OPTIONS=halt_on_error=1 second_deadlock_stack=1;ASAN_OPTIONS=detect_leaks=1:abort_on_error=0;UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
endif()
