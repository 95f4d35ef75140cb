# SPDX-License-Identifier: MIT
# Example servers (echo, http, rpc). Included from examples/CMakeLists.txt:
#   include(${CMAKE_CURRENT_SOURCE_DIR}/servers.cmake)
# echo.c compiles echo_server.c and echo_client.c in (#include), so they are
# not listed as its sources.
set(FERN_SERVER_EXAMPLES echo_server echo_client echo rpc)
foreach(e ${FERN_SERVER_EXAMPLES})
  add_executable(${e} ${CMAKE_CURRENT_LIST_DIR}/${e}.c)
endforeach()
add_executable(http ${CMAKE_CURRENT_LIST_DIR}/http.c ${CMAKE_CURRENT_LIST_DIR}/http_parser.c)

foreach(e ${FERN_SERVER_EXAMPLES} http)
  target_link_libraries(${e} PRIVATE fern)
  target_compile_definitions(${e} PRIVATE _GNU_SOURCE)
  target_compile_options(${e} PRIVATE -Wall -Wextra -Werror)
endforeach()
