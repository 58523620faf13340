# Installs the Python package python/shardcheck (the capture side) under the install prefix,
# by copying it: no PyPI, pip or build backend needed. Its folder is the one the machine's
# python3 already searches under that prefix (Debian: <prefix>/lib/python3.X/dist-packages),
# else <prefix>/lib/python3.X/site-packages with a note to add it to PYTHONPATH. Without
# python3 it says so and installs nothing else. Run by `cmake --install` (install(CODE)):
#   include(cmake/install_python.cmake) with SHARDCHECK_PYTHON_SRC set, CMAKE_INSTALL_PREFIX given.
find_program(SHARDCHECK_PYTHON3 NAMES python3)
if(NOT SHARDCHECK_PYTHON3)
  message(STATUS "shardcheck: no python3 found: the Python capture package was not installed")
  return()
endif()
set(prefix "$ENV{DESTDIR}${CMAKE_INSTALL_PREFIX}")
# The first entry of sys.path under the prefix that is a package folder, else the posix_prefix
# scheme's purelib for the prefix; "|on" or "|off" says whether python3 searches it.
execute_process(
  COMMAND "${SHARDCHECK_PYTHON3}" -c [=[
import os, sys, sysconfig
prefix = os.path.realpath(sys.argv[1])
for p in sys.path:
    r = os.path.realpath(p) if p else ""
    if r.startswith(prefix + os.sep) and os.path.basename(r) in ("site-packages", "dist-packages"):
        print(r + "|on"); break
else:
    print(sysconfig.get_path("purelib", "posix_prefix", {"base": prefix, "platbase": prefix}) + "|off")
]=] "${CMAKE_INSTALL_PREFIX}"
  OUTPUT_VARIABLE found RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 0 OR NOT found MATCHES "\\|")
  message(WARNING "shardcheck: python3 could not name a package folder: the Python package was not installed")
  return()
endif()
string(REPLACE "|" ";" parts "${found}")
list(GET parts 0 site)
list(GET parts 1 searched)
if(NOT "$ENV{DESTDIR}" STREQUAL "")
  set(site "$ENV{DESTDIR}${site}")
endif()
file(INSTALL "${SHARDCHECK_PYTHON_SRC}/shardcheck" DESTINATION "${site}"
     PATTERN "__pycache__" EXCLUDE PATTERN "*.pyc" EXCLUDE)
if(searched STREQUAL "off")
  message(STATUS "shardcheck: python3 does not search ${site}; to use `python3 -m shardcheck.capture`, "
                 "add it: export PYTHONPATH=${site}")
endif()
