# `cmake --install` + `find_package(mlaconf)`: the libraries, their headers, the CLI and a CMake package
# with namespaced targets (mlaconf::core, mlaconf::dequant, mlaconf::reference, mlaconf::fixtures,
# mlaconf::backend (the Backend interface of tools/backend), mlaconf::optimized when built, mlaconf::mlaconf = the CLI). Headers go to <prefix>/include/mlaconf and
# keep their project paths (#include "fixtures/compare.h").
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(MLACONF_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/mlaconf)
set(MLACONF_INSTALL_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR}/mlaconf)

set(_mlaconf_export)
foreach(pair core:mlaconf_core dequant:mlaconf_dequant reference:mlaconf_reference fixtures:mlaconf_fixtures backend:mlaconf_backend
             optimized:mlaconf_optimized)
  string(REPLACE ":" ";" pair ${pair})
  list(GET pair 0 short)
  list(GET pair 1 tgt)
  if(NOT TARGET ${tgt})
    continue()
  endif()
  get_target_property(_type ${tgt} TYPE)
  set(_scope INTERFACE)
  # The source-tree include path (set where each library is defined) holds for the build tree only;
  # installed, the same #include lines resolve under include/mlaconf.
  get_target_property(_inc ${tgt} INTERFACE_INCLUDE_DIRECTORIES)
  set(_new)
  foreach(d ${_inc})
    if(d STREQUAL PROJECT_SOURCE_DIR)
      list(APPEND _new "$<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>" "$<INSTALL_INTERFACE:${MLACONF_INSTALL_INCLUDEDIR}>")
    elseif(d)
      list(APPEND _new "${d}")
    endif()
  endforeach()
  set_target_properties(${tgt} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_new}" EXPORT_NAME ${short})
  list(APPEND _mlaconf_export ${tgt})
endforeach()

install(TARGETS ${_mlaconf_export} mlaconf EXPORT mlaconfTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
set(_hdr_dirs core fixtures reference)
if(TARGET mlaconf_optimized)
  list(APPEND _hdr_dirs optimized)
endif()
foreach(d ${_hdr_dirs})
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${d} DESTINATION ${MLACONF_INSTALL_INCLUDEDIR}
    FILES_MATCHING PATTERN "*.h" PATTERN "*.cuh" PATTERN "data" EXCLUDE PATTERN "tools" EXCLUDE)
endforeach()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/tools/backend DESTINATION ${MLACONF_INSTALL_INCLUDEDIR}/tools FILES_MATCHING PATTERN "*.h")
install(EXPORT mlaconfTargets NAMESPACE mlaconf:: DESTINATION ${MLACONF_INSTALL_CMAKEDIR})

set(MLACONF_CONFIG_WITH_CUDA OFF)
if(TARGET mlaconf_optimized)
  set(MLACONF_CONFIG_WITH_CUDA ON)
endif()
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/mlaconfConfig.cmake.in ${PROJECT_BINARY_DIR}/mlaconfConfig.cmake
  INSTALL_DESTINATION ${MLACONF_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/mlaconfConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/mlaconfConfig.cmake ${PROJECT_BINARY_DIR}/mlaconfConfigVersion.cmake
  DESTINATION ${MLACONF_INSTALL_CMAKEDIR})
