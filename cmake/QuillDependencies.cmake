# Every dependency comes from a Debian 12 package (scripts/setup.sh installs them).
find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED)
find_package(absl CONFIG REQUIRED)
# Debian's dnnl-config.cmake insists on OpenCL development files (the library is built
# with the OpenCL GPU runtime), which Quill never uses; import the CPU library directly.
find_path(DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.hpp REQUIRED)
find_library(DNNL_LIBRARY NAMES dnnl REQUIRED)
add_library(DNNL::dnnl UNKNOWN IMPORTED)
set_target_properties(DNNL::dnnl PROPERTIES
  IMPORTED_LOCATION "${DNNL_LIBRARY}"
  INTERFACE_INCLUDE_DIRECTORIES "${DNNL_INCLUDE_DIR}")
find_package(spdlog CONFIG REQUIRED)
find_package(GTest CONFIG REQUIRED)
find_package(nlohmann_json CONFIG REQUIRED)
# PCRE2 (libpcre2-dev) runs the tokenizers' pre-tokenizer split patterns; Debian ships
# only a pkg-config file for it.
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
# Boost.Beast/Asio (header-only, libboost1.81-dev) for the HTTP API and `quill bench --api
# http`. Nothing to link: Boost.System is header-only since 1.69.
find_package(Boost 1.81 CONFIG REQUIRED COMPONENTS headers)
# gRPC/protobuf are found here (not in proto/) so their imported targets are visible to
# server/, client/ and tests/. Only quill_proto and what depends on it link them.
find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)
find_program(GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)
