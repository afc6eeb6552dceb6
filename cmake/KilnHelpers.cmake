# One way to declare things. Every Kiln library is kiln_<name> with the alias kiln::<name>, public
# headers under include/kiln/<name>/, private code under src/.

add_library(kiln_warnings INTERFACE)
target_compile_options(kiln_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow=local -Wnon-virtual-dtor -Wno-missing-field-initializers)
if(KILN_WERROR)
  target_compile_options(kiln_warnings INTERFACE -Werror)
  # GCC 12's inliner reports std::string's own memcpy at -O3 (Release) as overlapping (GCC bug 105651): a
  # warning still, never an error, so every build type builds with warnings as errors.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    target_compile_options(kiln_warnings INTERFACE -Wno-error=restrict)
  endif()
endif()

# kiln_library(<name> SOURCES ... [DEPS ...] [PRIVATE_DEPS ...])
function(kiln_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(kiln_${name} STATIC ${ARG_SOURCES})
  add_library(kiln::${name} ALIAS kiln_${name})
  target_include_directories(kiln_${name} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/include)
  target_link_libraries(kiln_${name} PUBLIC ${ARG_DEPS} PRIVATE kiln_warnings ${ARG_PRIVATE_DEPS})
endfunction()

# kiln_executable(<target> OUTPUT <file name> SOURCES ... DEPS ...)
function(kiln_executable target)
  cmake_parse_arguments(ARG "" "OUTPUT" "SOURCES;DEPS" ${ARGN})
  add_executable(${target} ${ARG_SOURCES})
  target_link_libraries(${target} PRIVATE kiln_warnings ${ARG_DEPS})
  if(ARG_OUTPUT)
    set_target_properties(${target} PROPERTIES OUTPUT_NAME ${ARG_OUTPUT})
  endif()
endfunction()

# kiln_service(<name> HANDLER_SOURCES ... DEPS ...): a handler library kiln::svc_<name> that tests link
# directly, and a thin executable kiln-<name> built from main.cc.
function(kiln_service name)
  cmake_parse_arguments(ARG "" "" "HANDLER_SOURCES;DEPS" ${ARGN})
  string(REPLACE "_" "-" exe ${name})
  kiln_library(svc_${name} SOURCES ${ARG_HANDLER_SOURCES} DEPS ${ARG_DEPS})
  kiln_executable(kiln_${name}_main OUTPUT kiln-${exe} SOURCES main.cc DEPS kiln::svc_${name} kiln::service)
endfunction()

# kiln_test(<name> SOURCES ... DEPS ... [LABELS ...])
function(kiln_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE kiln_warnings kiln_catch_main ${ARG_DEPS})
  target_include_directories(${name} PRIVATE "${PROJECT_SOURCE_DIR}/tests/common")  # helpers tests share
  target_compile_definitions(${name} PRIVATE
    KILN_SOURCE_DIR="${PROJECT_SOURCE_DIR}" KILN_BINARY_DIR="${CMAKE_BINARY_DIR}")
  set(serial FALSE)
  if("integration" IN_LIST ARG_LABELS)
    set(serial TRUE)  # real processes timing kernels: they must not share the cores with each other
  endif()
  # A name ctest would split or Catch2 would read as something else fails the build.
  add_custom_command(TARGET ${name} POST_BUILD
    COMMAND ${CMAKE_COMMAND} -DTEST_EXECUTABLE=$<TARGET_FILE:${name}>
            -P ${PROJECT_SOURCE_DIR}/cmake/KilnCheckTestNames.cmake
    VERBATIM)
  # An entry that runs no test case fails (-w NoTests); a test that cannot run here exits with 77
  # (tests/common/kiln/testing/skip.h) and is reported skipped. catch_discover_tests flattens list-valued
  # PROPERTIES (a second label would be read as a property name), so labels and environment are set by a
  # script ctest reads after the discovered tests. Each entry writes Catch2's XML report under
  # <build>/catch-xml (tests/catch_main.cc), which tests/tools/ctest_summary.py checks against ctest's count.
  catch_discover_tests(${name} TEST_LIST ${name}_TESTS EXTRA_ARGS -w NoTests
    PROPERTIES RUN_SERIAL ${serial} SKIP_RETURN_CODE 77)
  # A test case tagged [serial] (a timing bound that sharing the cores would break) runs alone.
  set(props "${CMAKE_CURRENT_BINARY_DIR}/${name}_properties.cmake")
  file(GENERATE OUTPUT "${props}" CONTENT "if(${name}_TESTS)
  set_tests_properties(\${${name}_TESTS} PROPERTIES LABELS \"${ARG_LABELS}\"
    ENVIRONMENT \"KILN_BIN_DIR=${CMAKE_BINARY_DIR}/bin;KILN_SOURCE_DIR=${PROJECT_SOURCE_DIR};KILN_CATCH_XML_DIR=${CMAKE_BINARY_DIR}/catch-xml\")
  execute_process(COMMAND \"$<TARGET_FILE:${name}>\" \"[serial]\" --list-test-names-only
    OUTPUT_VARIABLE serial_tests OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(serial_tests)
    string(REPLACE \"\\n\" \";\" serial_tests \"\${serial_tests}\")
    set_tests_properties(\${serial_tests} PROPERTIES RUN_SERIAL TRUE)
  endif()
endif()
")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${props}")
endfunction()

# kiln_find_cuda_toolkit([QUIET|REQUIRED]): find_package(CUDAToolkit). Debian's CMake 3.25 marks
# CUDA::nvToolsExt deprecated without checking that it exists when the project requires CMake >= 3.25, and
# CUDA 13 ships no nvToolsExt, so the module fails; it is asked as a project requiring 3.24 would ask it.
macro(kiln_find_cuda_toolkit)
  set(_kiln_cmake_minimum "${CMAKE_MINIMUM_REQUIRED_VERSION}")
  set(CMAKE_MINIMUM_REQUIRED_VERSION 3.24)
  find_package(CUDAToolkit ${ARGN})
  set(CMAKE_MINIMUM_REQUIRED_VERSION "${_kiln_cmake_minimum}")
endmacro()
