# Installs weft as a CMake package: find_package(weft CONFIG REQUIRED) then
# target_link_libraries(app weft::weft). weft::weft links every layer.
include(CMakePackageConfigHelpers)

get_property(_weft_libs GLOBAL PROPERTY WEFT_LIBRARIES)
add_library(weft INTERFACE)
add_library(weft::weft ALIAS weft)
target_link_libraries(weft INTERFACE ${_weft_libs})

install(TARGETS weft ${_weft_libs} EXPORT weftTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY weft/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/weft
        FILES_MATCHING PATTERN "*.h")
install(EXPORT weftTargets NAMESPACE weft:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/weft)

configure_package_config_file(cmake/weftConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/weftConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/weft)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/weftConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/weftConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/weftConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/weft)
