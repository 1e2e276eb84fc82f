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
