# Run after a test executable links (kiln_test): fails the build when a test case's name cannot travel
# through ctest. catch_discover_tests makes one ctest entry per name, and ctest lists are separated by `;`,
# so a name with `;` becomes two entries that match no test case. A name with a backslash, a leading `~` or
# a leading `-` means something else on Catch2's command line (an exclusion, an option). The executable is
# removed so that the next build checks again. Usage: cmake -DTEST_EXECUTABLE=<path> -P KilnCheckTestNames.cmake
execute_process(COMMAND "${TEST_EXECUTABLE}" --list-test-names-only
  OUTPUT_VARIABLE out RESULT_VARIABLE rc)
if(rc LESS 0 OR NOT rc MATCHES "^[0-9]+$")
  file(REMOVE "${TEST_EXECUTABLE}")
  message(FATAL_ERROR "${TEST_EXECUTABLE} --list-test-names-only failed: ${rc}")
endif()
# One name a line; `;` is replaced first so that the split into lines keeps it visible.
string(REPLACE ";" "<SEMICOLON>" out "${out}")
string(REPLACE "\n" ";" lines "${out}")
set(bad "")
foreach(line IN LISTS lines)
  if(line MATCHES "<SEMICOLON>" OR line MATCHES "\\\\" OR line MATCHES "^[~-]")
    string(REPLACE "<SEMICOLON>" ";" line "${line}")
    string(APPEND bad "\n  ${line}")
  endif()
endforeach()
if(bad)
  file(REMOVE "${TEST_EXECUTABLE}")
  message(FATAL_ERROR "test case names ctest cannot run (no `;`, `\\`, or leading `~` or `-` in a test name):${bad}")
endif()
