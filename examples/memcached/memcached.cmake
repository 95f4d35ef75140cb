# fern-memcached and its end-to-end tests. Included from examples/servers.cmake.
set(FERN_MC_DIR ${CMAKE_CURRENT_LIST_DIR})
add_executable(fern-memcached
  ${FERN_MC_DIR}/main.c ${FERN_MC_DIR}/cmdline.c ${FERN_MC_DIR}/store.c
  ${FERN_MC_DIR}/conn.c ${FERN_MC_DIR}/ascii.c ${FERN_MC_DIR}/ascii_parse.c
  ${FERN_MC_DIR}/binary.c ${FERN_MC_DIR}/binary_parse.c ${FERN_MC_DIR}/stats.c)
target_link_libraries(fern-memcached PRIVATE fern)
target_compile_definitions(fern-memcached PRIVATE _GNU_SOURCE)
target_compile_options(fern-memcached PRIVATE -Wall -Wextra -Werror)
