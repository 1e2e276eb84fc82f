# Build flags. The whole tree targets x86-64-v3 (AVX2/FMA); kernels that need AVX-512
# are compiled per function with target attributes and chosen by a runtime CPU check,
# so the binaries still run on a CPU without AVX-512.
set(QUILL_ARCH_FLAGS "-march=x86-64-v3" CACHE STRING "Baseline ISA flags")
set(QUILL_WARNINGS -Wall -Wextra -Wno-unused-parameter -Wno-sign-compare)

# quill_cc_library(NAME x SRCS ... HDRS ... DEPS ...) -> target quill_x, alias quill::x
function(quill_cc_library)
  cmake_parse_arguments(Q "" "NAME" "SRCS;HDRS;DEPS" ${ARGN})
  set(target quill_${Q_NAME})
  if(Q_SRCS)
    add_library(${target} STATIC ${Q_SRCS} ${Q_HDRS})
    target_include_directories(${target} PUBLIC ${CMAKE_SOURCE_DIR})
    target_link_libraries(${target} PUBLIC ${Q_DEPS})
    target_compile_options(${target} PRIVATE ${QUILL_WARNINGS} ${QUILL_ARCH_FLAGS})
  else()
    add_library(${target} INTERFACE)
    target_include_directories(${target} INTERFACE ${CMAKE_SOURCE_DIR})
    target_link_libraries(${target} INTERFACE ${Q_DEPS})
  endif()
  add_library(quill::${Q_NAME} ALIAS ${target})
endfunction()

# quill_cc_test(NAME x SRCS ... DEPS ... [LABELS ...] [OPTIMIZE]) -> GoogleTest binary
# registered with CTest. OPTIMIZE: test code that sweeps large tensors itself (see below).
# Tests find ../shared through the QUILL_SHARED_DIR environment variable (skip if absent).
# Only one variable is set: gtest_discover_tests splits a list-valued ENVIRONMENT into
# separate arguments, so a second one would be lost. Tests that run built binaries find
# them through paths compiled into tests/testing (overridable with QUILL_BINARY_DIR).
function(quill_cc_test)
  cmake_parse_arguments(Q "OPTIMIZE" "NAME;TIMEOUT" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${Q_NAME} ${Q_SRCS})
  target_link_libraries(${Q_NAME} PRIVATE ${Q_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  target_include_directories(${Q_NAME} PRIVATE ${CMAKE_SOURCE_DIR})
  target_compile_options(${Q_NAME} PRIVATE ${QUILL_WARNINGS} ${QUILL_ARCH_FLAGS})
  # Test code itself needs no optimizer (the libraries it tests keep theirs): half of a
  # cold build's compile time is test files, and -O0 cuts a test file's compile time by a
  # tenth to a third against -O1 (GCC 12), which cut it by a fifth to a half against -O3.
  # This keeps CI within its time budget. The kernel and model tests (OPTIMIZE) keep -O1
  # outside the sanitizers: their own loops over tensors ran up to 5x slower at -O0.
  if(Q_OPTIMIZE AND NOT QUILL_SANITIZE)
    target_compile_options(${Q_NAME} PRIVATE -O1)
  else()
    target_compile_options(${Q_NAME} PRIVATE -O0)
  endif()
  if(TARGET quill_tsan_absl)
    target_link_libraries(${Q_NAME} PRIVATE quill_tsan_absl)
  endif()
  if(NOT Q_LABELS)
    set(Q_LABELS unit)
  endif()
  if(NOT Q_TIMEOUT)
    set(Q_TIMEOUT 600)
  endif()
  gtest_discover_tests(${Q_NAME}
    DISCOVERY_TIMEOUT 60
    PROPERTIES LABELS "${Q_LABELS}" TIMEOUT ${Q_TIMEOUT}
               ENVIRONMENT "QUILL_SHARED_DIR=${QUILL_SHARED_DIR}")
endfunction()

# quill_cc_binary(NAME x SRCS ... DEPS ...)
function(quill_cc_binary)
  cmake_parse_arguments(Q "" "NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${Q_NAME} ${Q_SRCS})
  target_link_libraries(${Q_NAME} PRIVATE ${Q_DEPS})
  target_include_directories(${Q_NAME} PRIVATE ${CMAKE_SOURCE_DIR})
  target_compile_options(${Q_NAME} PRIVATE ${QUILL_WARNINGS} ${QUILL_ARCH_FLAGS})
  if(TARGET quill_tsan_absl)
    target_link_libraries(${Q_NAME} PRIVATE quill_tsan_absl)
  endif()
endfunction()

# A benchmark: a quill_cc_binary that no test runs. Speed is what it measures, which a
# sanitized build does not have, so there it is left out of `all` (still built by name):
# the CI's ASan stage then links seven executables fewer.
function(quill_cc_bench)
  quill_cc_binary(${ARGN})
  cmake_parse_arguments(Q "" "NAME" "SRCS;DEPS" ${ARGN})
  if(QUILL_SANITIZE)
    set_target_properties(${Q_NAME} PROPERTIES EXCLUDE_FROM_ALL TRUE)
  endif()
endfunction()
