# SPDX-License-Identifier: MIT
# Moves every code section (.text and .text.*) of the objects in a static
# archive to one named fern_nopreempt, in place:
#   cmake -DOBJCOPY=objcopy -DREADELF=readelf -DARCHIVE=libfern.a -P nopreempt.cmake
# A program linked with the archive then has that code in a section of its
# own, which preemption leaves alone (src/preempt.c, docs/preemption.md).
# Run after each build of libfern.a and libfern-hook.a (CMakeLists.txt); the
# same script works for any other static library a program wants excluded.
#
# With -DLIBGCC=<the compiler's libgcc.a> -DNM=nm -DAR=ar, the compiler's
# helpers that the archive calls (aarch64's outline atomics such as
# __aarch64_swp4_acq, which take fern's spin locks; __divti3) are copied
# into it first, renamed fern_gcc_<name> in the copies and in the callers.
# Otherwise the program's link takes them from libgcc.a into its ordinary
# code, where a tick inside one, half-way through fern's lock, would
# preempt fern. The program's own calls keep libgcc's originals.
cmake_minimum_required(VERSION 3.20)
foreach(v OBJCOPY READELF ARCHIVE)
  if(NOT ${v})
    message(FATAL_ERROR "nopreempt.cmake: -D${v}=... is required")
  endif()
endforeach()
if(LIBGCC)
  foreach(v NM AR)
    if(NOT ${v})
      message(FATAL_ERROR "nopreempt.cmake: -D${v}=... is required with -DLIBGCC")
    endif()
  endforeach()
  execute_process(COMMAND ${NM} -u ${ARCHIVE} OUTPUT_VARIABLE undef RESULT_VARIABLE rc1)
  execute_process(COMMAND ${NM} --defined-only ${ARCHIVE} OUTPUT_VARIABLE def RESULT_VARIABLE rc2)
  execute_process(COMMAND ${NM} -A --defined-only ${LIBGCC} OUTPUT_VARIABLE gcc
    RESULT_VARIABLE rc3 ERROR_QUIET)
  if(NOT rc1 EQUAL 0 OR NOT rc2 EQUAL 0 OR NOT rc3 EQUAL 0)
    message(FATAL_ERROR "nopreempt.cmake: ${NM} failed on ${ARCHIVE} or ${LIBGCC}")
  endif()
  string(REGEX MATCHALL "U [A-Za-z0-9_.]+" undef "${undef}")
  string(REGEX MATCHALL " [TtWw] [A-Za-z0-9_.]+" def "${def}")
  string(REPLACE ";" "\n" def_lines "${def}")
  set(members)
  set(renames)
  foreach(u ${undef})
    string(SUBSTRING "${u}" 2 -1 sym)
    if(sym IN_LIST renames OR "${def_lines}" MATCHES " [TtWw] ${sym}(\\n|$)")
      continue()
    endif()
    # "libgcc.a:member.o:0000000000000000 T sym"
    string(REGEX MATCH "[^\n:]+:([^\n:]+):[0-9a-f]+ T ${sym}\n" m "${gcc}")
    if(m)
      list(APPEND members ${CMAKE_MATCH_1})
      list(APPEND renames ${sym})
    endif()
  endforeach()
  if(members)
    list(REMOVE_DUPLICATES members)
    set(dir ${ARCHIVE}.libgcc)
    file(REMOVE_RECURSE ${dir})
    file(MAKE_DIRECTORY ${dir})
    execute_process(COMMAND ${AR} x ${LIBGCC} ${members} WORKING_DIRECTORY ${dir}
      RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "nopreempt.cmake: ${AR} x ${LIBGCC} failed")
    endif()
    set(redef)
    foreach(sym ${renames})
      list(APPEND redef --redefine-sym ${sym}=fern_gcc_${sym})
    endforeach()
    set(copies)
    foreach(m ${members})
      execute_process(COMMAND ${OBJCOPY} ${redef} ${dir}/${m} ${dir}/fern_gcc_${m}
        RESULT_VARIABLE rc)
      if(NOT rc EQUAL 0)
        message(FATAL_ERROR "nopreempt.cmake: ${OBJCOPY} failed on ${m} of ${LIBGCC}")
      endif()
      list(APPEND copies fern_gcc_${m})
    endforeach()
    execute_process(COMMAND ${OBJCOPY} ${redef} ${ARCHIVE} RESULT_VARIABLE rc1)
    execute_process(COMMAND ${AR} rs ${ARCHIVE} ${copies} WORKING_DIRECTORY ${dir}
      RESULT_VARIABLE rc2)
    file(REMOVE_RECURSE ${dir})
    if(NOT rc1 EQUAL 0 OR NOT rc2 EQUAL 0)
      message(FATAL_ERROR "nopreempt.cmake: adding libgcc's helpers to ${ARCHIVE} failed")
    endif()
  endif()
endif()
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
