# SPDX-License-Identifier: MIT
# Moves every code section (.text and .text.*) of the objects in a static
# archive to one named fern_nopreempt, in place:
#   cmake -DOBJCOPY=objcopy -DREADELF=readelf -DARCHIVE=libfern.a -P nopreempt.cmake
# A program linked with the archive then has that code in a section of its
# own, which preemption leaves alone (src/preempt.c, docs/preemption.md).
# Run after each build of libfern.a and libfern-hook.a (CMakeLists.txt); the
# same script works for any other static library a program wants excluded.
cmake_minimum_required(VERSION 3.20)
foreach(v OBJCOPY READELF ARCHIVE)
  if(NOT ${v})
    message(FATAL_ERROR "nopreempt.cmake: -D${v}=... is required")
  endif()
endforeach()
execute_process(COMMAND ${READELF} -SW ${ARCHIVE} OUTPUT_VARIABLE sections
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "nopreempt.cmake: ${READELF} -SW ${ARCHIVE} failed")
endif()
# ("[ 1] .text  PROGBITS ...": matched without the brackets, which a CMake
# list would take as quoting)
string(REGEX MATCHALL " \\.text[^ \n]* +PROGBITS" found "${sections}")
set(args)
set(seen)
foreach(m ${found})
  string(REGEX REPLACE "^ ([^ ]+) .*" "\\1" name "${m}")
  if(NOT name IN_LIST seen)
    list(APPEND seen ${name})
    list(APPEND args --rename-section ${name}=fern_nopreempt)
  endif()
endforeach()
if(args)
  execute_process(COMMAND ${OBJCOPY} ${args} ${ARCHIVE} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "nopreempt.cmake: ${OBJCOPY} failed on ${ARCHIVE}")
  endif()
endif()
