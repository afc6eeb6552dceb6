# Gates that keep the tree as the house rules say (docs/architecture.md), each failing with a line that
# names the file:
# - .ci/gates/file_size.sh: no source file of services/, libs/, tools/ or proto-msgs/ over 600 lines;
# - .ci/gates/layering.sh: libraries never include a service's header nor link a service;
# - .ci/gates/format.sh: the C++ is as clang-format lays it out (`make format-check`; skipped without it);
# registered as ctest tests labelled "gate", so `make test` and CI run them; and
# - the header self-compile check (nvbench's HeaderTesting): every public header of a library
#   (libs/*/include, proto-msgs/include) compiles on its own, twice in one translation unit, with the
#   library's own dependencies only. Part of the build: a header that does not stand alone fails it, the
#   compiler naming the header.

find_program(KILN_BASH bash REQUIRED)
foreach(gate file_size layering format)
  add_test(NAME gate_${gate} COMMAND ${KILN_BASH} ${PROJECT_SOURCE_DIR}/.ci/gates/${gate}.sh)
  set_tests_properties(gate_${gate} PROPERTIES LABELS "gate;unit" TIMEOUT 300 SKIP_RETURN_CODE 77)
endforeach()

# kiln_header_check(<library target> <include dir> [EXCLUDE_MATCHING <regex>]): an object library
# kiln_headers_<target> of one generated translation unit per header under <include dir>.
function(kiln_header_check target include_dir)
  cmake_parse_arguments(ARG "" "EXCLUDE_MATCHING" "" ${ARGN})
  file(GLOB_RECURSE headers CONFIGURE_DEPENDS RELATIVE ${include_dir} ${include_dir}/*.h)
  set(sources)
  foreach(header ${headers})
    if(ARG_EXCLUDE_MATCHING)
      file(READ ${include_dir}/${header} text)
      if(text MATCHES "${ARG_EXCLUDE_MATCHING}")
        continue()
      endif()
    endif()
    string(MAKE_C_IDENTIFIER ${header} name)
    set(source ${CMAKE_BINARY_DIR}/header_check/${target}/${name}.cc)
    file(CONFIGURE OUTPUT ${source} CONTENT "// Generated: ${header} compiles on its own (cmake/KilnGates.cmake).
#include \"${header}\"
#include \"${header}\"
")
    list(APPEND sources ${source})
  endforeach()
  if(sources)
    add_library(kiln_headers_${target} OBJECT ${sources})
    target_link_libraries(kiln_headers_${target} PRIVATE ${target} kiln_warnings)
  endif()
endfunction()

file(GLOB kiln_lib_dirs LIST_DIRECTORIES true ${PROJECT_SOURCE_DIR}/libs/*)
foreach(lib_dir ${kiln_lib_dirs})
  get_filename_component(lib ${lib_dir} NAME)
  if(NOT IS_DIRECTORY ${lib_dir}/include OR NOT TARGET kiln_${lib})
    continue()
  endif()
  if(lib STREQUAL "cuda")
    # The CUDA runtime's headers come with kiln::cuda_eval, built only with the toolkit.
    if(TARGET kiln_cuda_eval)
      kiln_header_check(kiln_cuda_eval ${lib_dir}/include)
    else()
      kiln_header_check(kiln_cuda ${lib_dir}/include EXCLUDE_MATCHING "#include <cuda")
    endif()
  else()
    kiln_header_check(kiln_${lib} ${lib_dir}/include)
  endif()
endforeach()
kiln_header_check(kiln_proto ${PROJECT_SOURCE_DIR}/proto-msgs/include)
