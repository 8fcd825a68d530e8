# SPDX-License-Identifier: MIT
# The HIP examples, compiled by hipcc (examples/CMakeLists.txt includes this
# where SVMBATCH_HIP_PROGRAMS is on).  CMake 3.25's HIP language wants
# ROCm's own layout, which Debian's packages do not have: hipcc compiles
# the object, CMake links it.
if(NOT SVMBATCH_WITH_HIP)
  message(FATAL_ERROR "SVMBATCH_HIP_PROGRAMS needs SVMBATCH_WITH_HIP (the example uses HipBackend)")
endif()
if(NOT HIPCC_EXECUTABLE OR NOT AMDHIP64_LIBRARY)
  message(FATAL_ERROR "SVMBATCH_HIP_PROGRAMS needs hipcc and libamdhip64 (Debian: hipcc, libamdhip64-dev)")
endif()

# CDNA2 (MI200), CDNA3 (MI300), RDNA3.  A toolchain that cannot target one
# (Debian 12's clang 15 knows no gfx942; its rocm-device-libs 5.2.3 have no
# gfx1100 library) builds for the others, and says so.
set(SVMBATCH_HIP_ARCHITECTURES "gfx90a;gfx942;gfx1100" CACHE STRING
    "GPUs the HIP example is compiled for (hipcc --offload-arch)")
set(_probe ${CMAKE_CURRENT_BINARY_DIR}/hip_arch_probe.hip)
# Debian's hipcc leaves a directory in TMPDIR for every file it compiles:
# keep them in the build tree, not in /tmp.
set(_hipcc_tmp ${CMAKE_CURRENT_BINARY_DIR}/hipcc-tmp)
file(MAKE_DIRECTORY ${_hipcc_tmp})
set(_hipcc ${CMAKE_COMMAND} -E env TMPDIR=${_hipcc_tmp} ${HIPCC_EXECUTABLE})
file(WRITE ${_probe} "#include <hip/hip_runtime.h>\n__global__ void k(int *p) { *p = 1; }\n")
set(SVMBATCH_HIP_BUILT_ARCHITECTURES)
set(_dropped)
foreach(arch ${SVMBATCH_HIP_ARCHITECTURES})
  execute_process(COMMAND ${_hipcc} --offload-arch=${arch} -c ${_probe}
                          -o ${CMAKE_CURRENT_BINARY_DIR}/hip_arch_probe.o
                  RESULT_VARIABLE _rc OUTPUT_QUIET ERROR_VARIABLE _err)
  if(_rc EQUAL 0)
    list(APPEND SVMBATCH_HIP_BUILT_ARCHITECTURES ${arch})
  else()
    string(REGEX MATCH "error: [^\n]*" _why "${_err}")
    string(REPLACE ";" "," _why "${_why}") # one list element
    list(APPEND _dropped "${arch} (${_why})")
  endif()
endforeach()
if(NOT SVMBATCH_HIP_BUILT_ARCHITECTURES)
  message(FATAL_ERROR "hipcc (${HIPCC_EXECUTABLE}) targets none of ${SVMBATCH_HIP_ARCHITECTURES}: ${_dropped}")
endif()
message(STATUS "HIP example for ${SVMBATCH_HIP_BUILT_ARCHITECTURES}")
foreach(d ${_dropped})
  message(STATUS "HIP example: hipcc cannot target ${d}")
endforeach()
# What the build compiled for, for tools/check.sh.
string(REPLACE ";" " " _built "${SVMBATCH_HIP_BUILT_ARCHITECTURES}")
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/hip_architectures.txt "${_built}\n")

set(_arch_flags)
foreach(arch ${SVMBATCH_HIP_BUILT_ARCHITECTURES})
  list(APPEND _arch_flags --offload-arch=${arch})
endforeach()
file(GLOB_RECURSE _headers ${CMAKE_CURRENT_SOURCE_DIR}/../libsvmbatch/include/*.hpp
     ${CMAKE_CURRENT_SOURCE_DIR}/../libsvmbatch/include/*.h
     ${CMAKE_CURRENT_SOURCE_DIR}/../libsvmbatch/include/*.cuh)
list(APPEND _headers ${SVMBATCH_GENERATED_INCLUDE}/svmbatch/all.hpp)
# hipcc compiles each program's object, CMake links it with the library
# and libamdhip64.
function(svmbatch_hip_program name)
  set(_obj ${CMAKE_CURRENT_BINARY_DIR}/${name}.o)
  add_custom_command(OUTPUT ${_obj}
    COMMAND ${_hipcc} ${_arch_flags} -std=c++20 -O2 -Wall -Wextra -Werror
            -I${CMAKE_CURRENT_SOURCE_DIR}/../libsvmbatch/include -I${SVMBATCH_GENERATED_INCLUDE}
            -I${SVMBATCH_UAPI_DIR} -c ${CMAKE_CURRENT_SOURCE_DIR}/${name}.hip -o ${_obj}
    DEPENDS ${name}.hip ${_headers} ${SVMBATCH_GENERATED_INCLUDE}/svmbatch/config.h
    COMMENT "hipcc ${name}.hip (${_built})"
    VERBATIM)
  add_executable(${name} ${_obj})
  set_source_files_properties(${_obj} PROPERTIES EXTERNAL_OBJECT TRUE GENERATED TRUE)
  set_target_properties(${name} PROPERTIES LINKER_LANGUAGE CXX)
  target_link_libraries(${name} PRIVATE svmbatch_static ${AMDHIP64_LIBRARY})
endfunction()

# The scatter-read loop of a HIP program.
svmbatch_hip_program(hip_scatter_read)
# GPU-driven I/O from a HIP kernel: <svmbatch/gpu_io/device.cuh> under hipcc.
svmbatch_hip_program(hip_gpu_io)
