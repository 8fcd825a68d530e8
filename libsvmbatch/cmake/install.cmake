# SPDX-License-Identifier: MIT
# make install / cmake --install (DESTDIR-aware): the shared and static
# library, the headers (with the uapi header as <linux/svmbatch.h>), a CMake
# package (find_package(svmbatch)) and svmbatch.pc; then ldconfig.  The
# build directory is a CMake package too: find_package(svmbatch) with
# svmbatch_DIR set to it uses the library just built, nothing installed.
include(CMakePackageConfigHelpers)

install(TARGETS svmbatch svmbatch_static EXPORT svmbatchTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
# The headers (cmake/public_headers.cmake): those of the backends this
# build has, the first names, the libtorch header, the generated ones.
set(_svmbatch_absent)
foreach(h ${SVMBATCH_ABSENT_HEADERS})
  get_filename_component(_name ${h} NAME)
  list(APPEND _svmbatch_absent PATTERN ${_name} EXCLUDE)
endforeach()
install(DIRECTORY include/svmbatch compat/svmbatch torch/svmbatch
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h" PATTERN "*.hpp" PATTERN "*.cuh" ${_svmbatch_absent})
install(FILES ${SVMBATCH_GENERATED_INCLUDE}/svmbatch/config.h
  ${SVMBATCH_GENERATED_INCLUDE}/svmbatch/all.hpp
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/svmbatch)
install(FILES ${SVMBATCH_UAPI_DIR}/linux/svmbatch.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/linux)

set(SVMBATCH_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/svmbatch)
install(EXPORT svmbatchTargets NAMESPACE svmbatch::
  DESTINATION ${SVMBATCH_CMAKE_DIR})
export(EXPORT svmbatchTargets NAMESPACE svmbatch::
  FILE ${CMAKE_CURRENT_BINARY_DIR}/svmbatchTargets.cmake)
configure_package_config_file(cmake/svmbatchConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/svmbatchConfig.cmake
  INSTALL_DESTINATION ${SVMBATCH_CMAKE_DIR})
write_basic_package_version_file(
  ${CMAKE_CURRENT_BINARY_DIR}/svmbatchConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/svmbatchConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/svmbatchConfigVersion.cmake
  DESTINATION ${SVMBATCH_CMAKE_DIR})

# Paths under ${prefix} where possible, so that pkg-config --define-prefix
# can relocate an installed tree (a DESTDIR, a bundle).
foreach(dir LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${dir}}")
    set(SVMBATCH_PC_${dir} "${CMAKE_INSTALL_${dir}}")
  else()
    set(SVMBATCH_PC_${dir} "\${prefix}/${CMAKE_INSTALL_${dir}}")
  endif()
endforeach()
configure_file(cmake/svmbatch.pc.in ${CMAKE_CURRENT_BINARY_DIR}/svmbatch.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/svmbatch.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# A new library in a directory the loader knows from its cache
# (/usr/local/lib) is not found until ldconfig runs, so an install to the
# real prefix, as root, runs it.  One into a DESTDIR (a package, for which
# dpkg runs it; a test) never does, nor one by a user, who cannot write the
# cache.
install(CODE [[
  execute_process(COMMAND id -u OUTPUT_VARIABLE _svmbatch_uid
    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if("$ENV{DESTDIR}" STREQUAL "" AND _svmbatch_uid STREQUAL "0")
    find_program(_svmbatch_ldconfig ldconfig PATHS /sbin /usr/sbin)
    if(_svmbatch_ldconfig)
      message(STATUS "Running: ${_svmbatch_ldconfig}")
      execute_process(COMMAND ${_svmbatch_ldconfig} RESULT_VARIABLE _svmbatch_rc)
      if(NOT _svmbatch_rc EQUAL 0)
        message(WARNING "ldconfig failed (${_svmbatch_rc}): run it before using libsvmbatch")
      endif()
    endif()
  endif()
]])
