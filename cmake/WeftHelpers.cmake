# Build helpers shared by every weft target: one library per layer (weft_cc_library),
# one GoogleTest executable per test file (weft_cc_test).

# Options structs are meant to be filled with designated initializers ({.chunksize = 8}),
# which g++ 12 flags under -Wmissing-field-initializers even when members have defaults.
set(WEFT_WARNINGS -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
    -Wno-missing-field-initializers)
if(WEFT_WERROR)
  list(APPEND WEFT_WARNINGS -Werror)
endif()

if(WEFT_SANITIZE)
  string(REPLACE ";" "," _weft_san "${WEFT_SANITIZE}")
  add_compile_options(-fsanitize=${_weft_san} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${_weft_san})
  # g++ 12 at -O1 with the sanitizers warns of "maybe uninitialized" members inside
  # <regex>'s and <functional>'s own code: noise in make test's output, nothing of weft's.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    add_compile_options(-Wno-maybe-uninitialized)
  endif()
endif()

# weft_cc_library(NAME SRCS ... DEPS ...): a static library weft_<NAME>, exported as
# weft::<NAME>, with headers included from the repository root as "weft/<NAME>/...".
function(weft_cc_library name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  set(target weft_${name})
  add_library(${target} ${ARG_SRCS})
  add_library(weft::${name} ALIAS ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name} POSITION_INDEPENDENT_CODE ON)
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_compile_features(${target} PUBLIC cxx_std_20)
  target_compile_options(${target} PRIVATE ${WEFT_WARNINGS})
  target_link_libraries(${target} PUBLIC ${ARG_DEPS})
  set_property(GLOBAL APPEND PROPERTY WEFT_LIBRARIES ${target})
endfunction()

# weft_cc_test(NAME SRCS ... DEPS ... LABELS ... [TIMEOUT s] [COST s] [PREFIX p] [SERIAL]): a
# GoogleTest binary whose tests ctest discovers one by one, each carrying LABELS (unit,
# multirank, multiproc, slow). COST, the seconds its longest test takes, makes ctest -j start
# the binary's tests first: a clean clone has no timings from an earlier run, and a long test
# started last would leave the other core idle while it finishes. PREFIX names the tests of a
# second build of the same source apart ("debug_model."). SERIAL runs each of its tests with no
# other test beside it (what they measure is the machine's load).
function(weft_cc_test name)
  cmake_parse_arguments(ARG "SERIAL" "TIMEOUT;COST;PREFIX" "SRCS;DEPS;LABELS" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 60)
  endif()
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  add_executable(${name} ${ARG_SRCS})
  target_compile_options(${name} PRIVATE ${WEFT_WARNINGS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  target_precompile_headers(${name} REUSE_FROM weft_test_pch)  # tests/CMakeLists.txt
  set(env "")
  if(WEFT_SANITIZE MATCHES "thread")
    set(env "TSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tests/tsan.supp halt_on_error=1")
  endif()
  gtest_discover_tests(${name}
    DISCOVERY_TIMEOUT 30
    TEST_PREFIX "${ARG_PREFIX}"
    TEST_LIST ${name}_TESTS
    PROPERTIES TIMEOUT ${ARG_TIMEOUT} ENVIRONMENT "${env}")
  # Labels are set from a ctest include file that runs after discovery: a label list
  # ("unit;race") does not survive gtest_discover_tests' PROPERTIES forwarding.
  set(labels_file ${CMAKE_CURRENT_BINARY_DIR}/${name}_labels.cmake)
  file(WRITE ${labels_file}
    "if(${name}_TESTS)\n"
    "  set_tests_properties(\${${name}_TESTS} PROPERTIES LABELS \"${ARG_LABELS}\")\n")
  if(ARG_COST)
    file(APPEND ${labels_file}
      "  set_tests_properties(\${${name}_TESTS} PROPERTIES COST ${ARG_COST})\n")
  endif()
  if(ARG_SERIAL)
    file(APPEND ${labels_file}
      "  set_tests_properties(\${${name}_TESTS} PROPERTIES RUN_SERIAL TRUE)\n")
  endif()
  file(APPEND ${labels_file}
    "endif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${labels_file})
endfunction()
