# Sanitizer, fuzzing and strict-warning builds. Every option is off by default; CI turns
# them on in build directories of their own (.ci/run). Debian's clang-14 (with
# libclang-rt-14-dev) or gcc both work for the sanitizers; libFuzzer needs clang.
#
#   -DQUILL_SANITIZE=address,undefined  ASan + UBSan over everything Quill compiles. Any
#                                        finding aborts (-fno-sanitize-recover=all).
#   -DQUILL_SANITIZE=thread             TSan. Debian's Abseil is not instrumented, so test
#                                        binaries also link the absl::Mutex annotations in
#                                        cmake/tsan/ (see its README); OpenMP regions run in
#                                        uninstrumented libgomp: run them with one thread.
#   -DQUILL_FUZZ=ON                     (clang) the libFuzzer targets in fuzz/ are added,
#                                        and the libraries they link are built with
#                                        -fsanitize=fuzzer-no-link (fuzz/CMakeLists.txt).
#   -DQUILL_WERROR=ON                   warnings are errors (with clang, -Wthread-safety is
#                                        always on: the annotations are checked).
#
# Third-party libraries (Abseil, gRPC, protobuf, oneDNN, spdlog) come from Debian and are
# not instrumented: ASan still sees every heap allocation (malloc is intercepted), but not
# their own out-of-bounds accesses; UBSan checks only Quill's code.

set(QUILL_SANITIZE "" CACHE STRING
    "Sanitizers for the whole build: empty, 'address,undefined', 'address', 'undefined' or 'thread'")
option(QUILL_FUZZ "Build the libFuzzer targets in fuzz/ (clang only)" OFF)
option(QUILL_WERROR "Treat compiler warnings as errors" OFF)

if(QUILL_SANITIZE)
  if(QUILL_SANITIZE MATCHES "thread" AND QUILL_SANITIZE MATCHES "address")
    message(FATAL_ERROR "QUILL_SANITIZE: thread and address cannot be combined")
  endif()
  # -O1 (after the build type's -O3, so it wins): these builds exist to find bugs, and it
  # roughly halves their compile time while keeping stack traces close to the source.
  add_compile_options(-O1 -fsanitize=${QUILL_SANITIZE} -fno-omit-frame-pointer
                      -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${QUILL_SANITIZE})
  if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    # Line tables only: symbolized reports at a fraction of -g's build time.
    add_compile_options(-gline-tables-only)
  else()
    add_compile_options(-g1)
  endif()
  message(STATUS "Quill: sanitizers ${QUILL_SANITIZE}")
endif()

if(QUILL_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "QUILL_FUZZ needs clang (e.g. -DCMAKE_CXX_COMPILER=clang++-14)")
  endif()
  message(STATUS "Quill: libFuzzer targets (fuzz/)")
endif()

if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  # Sources carry GCC-only pragmas (e.g. -Wmaybe-uninitialized); clang may ignore them.
  # With sanitizers, clang cannot vectorize some `omp simd` loops; that is not a defect.
  # Unused private fields (a GCC build cannot see them) stay warnings, not errors.
  list(APPEND QUILL_WARNINGS -Wthread-safety -Wno-unknown-warning-option -Wno-pass-failed
       -Wno-error=unused-private-field)
endif()
if(QUILL_WERROR)
  list(APPEND QUILL_WARNINGS -Werror)
endif()

# TSan: annotations that make Debian's absl::Mutex and absl::Notification visible to TSan
# (tests/tsan/README.md). Linked into every test binary and tool of the build; the wrapped
# symbols are the QUILL_WRAP lines of the source file.
if(QUILL_SANITIZE MATCHES "thread")
  set(_quill_tsan_shim ${CMAKE_SOURCE_DIR}/tests/tsan/absl_tsan_annotations.cc)
  add_library(quill_tsan_absl OBJECT ${_quill_tsan_shim})
  target_link_libraries(quill_tsan_absl PUBLIC absl::synchronization absl::time)
  file(STRINGS ${_quill_tsan_shim} _quill_wraps REGEX "^QUILL_WRAP\\(")
  foreach(_line ${_quill_wraps})
    string(REGEX REPLACE "^QUILL_WRAP\\([a-z]+, ([A-Za-z0-9_]+),.*" "\\1" _sym "${_line}")
    target_link_options(quill_tsan_absl INTERFACE "LINKER:--wrap=${_sym}")
  endforeach()
endif()
