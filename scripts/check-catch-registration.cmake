# Checks that ctest runs every TEST_CASE of one Catch2 executable, each under its own name.
# catch_discover_tests registers one ctest test per line of `--list-test-names-only`, but it
# keeps the names in a CMake list: a ';' in a name splits it into two tests whose specs match
# nothing, and Catch2 v2 exits 0 on "No test cases matched", so both passed while the test
# case never ran. This fails, naming the test case, when
#  - a name holds a character that registration or Catch's test spec would change (';', '\',
#    '"', '*', a leading '~' or '#', leading or trailing blanks);
#  - a test case has no ctest test of its exact name;
#  - a ctest test that runs the executable selects anything but exactly its own test case.
# tests/CMakeLists.txt adds it as a test next to each executable; by hand:
#   cmake -DEXE=build/tests/core_tests -DTESTFILE=build/tests/CTestTestfile.cmake -P scripts/check-catch-registration.cmake
cmake_minimum_required(VERSION 3.25)
if(NOT EXE OR NOT TESTFILE)
  message(FATAL_ERROR "usage: cmake -DEXE=<catch executable> -DTESTFILE=<CTestTestfile.cmake of its folder> -P ${CMAKE_CURRENT_LIST_FILE}")
endif()
get_filename_component(EXE "${EXE}" REALPATH)
get_filename_component(exe_name "${EXE}" NAME)
set(failures 0)

# Square brackets group list elements in CMake (a ';' between them does not separate): names
# travel through lists with them swapped for markers, and are shown with them restored.
function(encode out text)
  string(REPLACE "[" "<lsb>" text "${text}")
  string(REPLACE "]" "<rsb>" text "${text}")
  set(${out} "${text}" PARENT_SCOPE)
endfunction()
function(decode out text)
  string(REPLACE "<lsb>" "[" text "${text}")
  string(REPLACE "<rsb>" "]" text "${text}")
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

# The test cases, as Catch lists them (its exit code is their number, at most 255).
execute_process(COMMAND "${EXE}" --list-test-names-only OUTPUT_VARIABLE listing RESULT_VARIABLE listed)
if(NOT listed GREATER 0)
  message(FATAL_ERROR "${exe_name} --list-test-names-only listed no test cases (exit ${listed})")
endif()
# A ';' first: the listing cannot become a list while one is in it.
string(REGEX MATCHALL "[^\n]*;[^\n]*" split_names "${listing}")
if(split_names)
  string(REPLACE ";" "<semicolon>" shown "${split_names}")
  message(SEND_ERROR "${exe_name}: a test case name holds ';', which splits it into two ctest tests that run nothing; "
                     "rename it:\n  ${shown}")
  math(EXPR failures "${failures} + 1")
  string(REPLACE ";" "<semicolon>" listing "${listing}")
endif()
encode(listing "${listing}")
string(REGEX REPLACE "\n$" "" listing "${listing}")
string(REPLACE "\n" ";" names "${listing}")
list(LENGTH names name_count)
if(name_count LESS 255 AND NOT name_count EQUAL listed)
  message(SEND_ERROR "${exe_name}: ${name_count} names listed but Catch counted ${listed} test cases (a name with a line break?)")
  math(EXPR failures "${failures} + 1")
endif()
foreach(name IN LISTS names)
  decode(shown "${name}")
  if(shown MATCHES "[*\"\\]" OR shown MATCHES "^[~# \t]" OR shown MATCHES "[ \t]$")
    message(SEND_ERROR "${exe_name}: test case '${shown}' has a character Catch's test spec reads specially "
                       "(\\, \", *, a leading ~ or #, leading or trailing blanks): ctest cannot select it by its name")
    math(EXPR failures "${failures} + 1")
  endif()
endforeach()

# The tests ctest would run: read the folder's CTestTestfile.cmake (and what it includes) with
# the commands it calls replaced by recorders. A ctest test's arguments never hold ';'.
set(registered_names "")
set(registered_count 0)
function(add_test name command)
  get_filename_component(command "${command}" REALPATH)
  if(NOT command STREQUAL EXE)
    return()
  endif()
  set(args "")
  math(EXPR last "${ARGC} - 1")
  if(last GREATER_EQUAL 2)
    foreach(n RANGE 2 ${last})
      list(APPEND args "${ARGV${n}}")
    endforeach()
  endif()
  set(i ${registered_count})
  set(registered_name_${i} "${name}" PARENT_SCOPE)
  set(registered_args_${i} "${args}" PARENT_SCOPE)
  encode(name "${name}")
  list(APPEND registered_names "${name}")
  set(registered_names "${registered_names}" PARENT_SCOPE)
  math(EXPR i "${i} + 1")
  set(registered_count ${i} PARENT_SCOPE)
endfunction()
function(set_tests_properties)
endfunction()
function(subdirs)
endfunction()
include("${TESTFILE}")
if(registered_count EQUAL 0)
  message(SEND_ERROR "${exe_name}: ${TESTFILE} registers no ctest test that runs it")
  math(EXPR failures "${failures} + 1")
endif()

foreach(name IN LISTS names)
  if(NOT name IN_LIST registered_names)
    decode(shown "${name}")
    message(SEND_ERROR "${exe_name}: test case '${shown}' has no ctest test of its name: it never runs")
    math(EXPR failures "${failures} + 1")
  endif()
endforeach()

# Each ctest test, asked what its command line selects: exactly its own test case.
if(registered_count GREATER 0)
  math(EXPR last "${registered_count} - 1")
  foreach(i RANGE 0 ${last})
    set(name "${registered_name_${i}}")
    execute_process(COMMAND "${EXE}" ${registered_args_${i}} --list-test-names-only
                    OUTPUT_VARIABLE selected RESULT_VARIABLE selected_count)
    string(REGEX REPLACE "\n$" "" selected "${selected}")
    if(NOT selected_count EQUAL 1 OR NOT selected STREQUAL name)
      string(REPLACE "\n" "', '" selected "${selected}")
      message(SEND_ERROR "${exe_name}: ctest test '${name}' selects ${selected_count} test cases ('${selected}'), not exactly its own")
      math(EXPR failures "${failures} + 1")
    endif()
  endforeach()
endif()

if(failures GREATER 0)
  message(FATAL_ERROR "${exe_name}: ${failures} registration problem(s), above")
endif()
message(STATUS "${exe_name}: ${name_count} test cases, ${registered_count} ctest tests, each selecting exactly its own test case")
