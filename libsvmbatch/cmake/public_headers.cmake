# SPDX-License-Identifier: MIT
# The public headers, in three places by what they depend on:
#   include/  the library's own, each beside the layer that implements it;
#   compat/   the first names of renamed headers, each forwarding to its new
#             name (they stand above what they forward to);
#   torch/    <svmbatch/torch.hpp>, header-only, for programs that have
#             libtorch (the library itself never needs it).
# <svmbatch/all.hpp>, the umbrella, is generated here from this build's list,
# so that a new header cannot be left out and the umbrella needs no #if:
# the backends the build lacks are neither included nor installed.

# Headers of the backends this build lacks (install.cmake leaves them out).
set(SVMBATCH_ABSENT_HEADERS)
foreach(b CUDA HIP HSA AMDGPU DRM ZE)
  string(TOLOWER ${b} _name)
  if(NOT SVMBATCH_WITH_${b})
    list(APPEND SVMBATCH_ABSENT_HEADERS svmbatch/gpu/${_name}_backend.hpp)
  endif()
endforeach()
if(NOT SVMBATCH_WITH_CUDA)
  list(APPEND SVMBATCH_ABSENT_HEADERS svmbatch/gpu/cuda_copy_engine.hpp
    svmbatch/gpu/cuda_stream_copier.hpp)
endif()
if(NOT SVMBATCH_WITH_RDMA)
  list(APPEND SVMBATCH_ABSENT_HEADERS svmbatch/rdma.hpp)
endif()

# The umbrella: every C++ header under include/ but the detail ones.
file(GLOB _svmbatch_cxx_headers CONFIGURE_DEPENDS
  RELATIVE ${CMAKE_CURRENT_SOURCE_DIR}/include
  ${CMAKE_CURRENT_SOURCE_DIR}/include/svmbatch/*.hpp
  ${CMAKE_CURRENT_SOURCE_DIR}/include/svmbatch/gpu/*.hpp
  ${CMAKE_CURRENT_SOURCE_DIR}/include/svmbatch/gpu_io/*.hpp)
list(REMOVE_ITEM _svmbatch_cxx_headers ${SVMBATCH_ABSENT_HEADERS})
list(SORT _svmbatch_cxx_headers)
set(SVMBATCH_UMBRELLA_INCLUDES)
foreach(h ${_svmbatch_cxx_headers})
  string(APPEND SVMBATCH_UMBRELLA_INCLUDES "#include <${h}>\n")
endforeach()
configure_file(cmake/all.hpp.in ${SVMBATCH_GENERATED_INCLUDE}/svmbatch/all.hpp @ONLY)

# Where the headers are found in the build tree; installed, they are all
# under ${CMAKE_INSTALL_INCLUDEDIR}/svmbatch.
set(SVMBATCH_PUBLIC_INCLUDE_DIRS
  ${CMAKE_CURRENT_SOURCE_DIR}/include
  ${SVMBATCH_GENERATED_INCLUDE}
  ${CMAKE_CURRENT_SOURCE_DIR}/compat
  ${CMAKE_CURRENT_SOURCE_DIR}/torch
  ${SVMBATCH_UAPI_DIR})
