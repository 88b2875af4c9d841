# Install rules for splicegate (included from the top-level CMakeLists.txt).
#   cmake --install BUILD_DIR --prefix /usr [--component ...]   (DESTDIR=... to stage)
# Binaries, man pages, bash completion and the sysctl drop-in follow the prefix; the config
# file and the systemd unit go to absolute paths (cache variables below), because the daemon's
# documented config path and the unit's location do not move with the prefix. The unit runs
# /usr/sbin/splicegate: it is meant for a /usr install (the Debian package, build-deb.sh).
include(GNUInstallDirs)

set(SPLICEGATE_CONFIG_DIR "/etc/splicegate" CACHE PATH "where splicegate.conf is installed")
set(SPLICEGATE_SYSTEMD_UNIT_DIR "/lib/systemd/system" CACHE PATH
    "where splicegate.service is installed")
option(SPLICEGATE_INSTALL_SYSTEM_FILES
       "install the config file, systemd unit and sysctl drop-in besides the binaries" ON)

set(_sg_pkg ${PROJECT_SOURCE_DIR}/packaging)

if(TARGET splicegate)
  install(TARGETS splicegate RUNTIME DESTINATION ${CMAKE_INSTALL_SBINDIR} COMPONENT splicegate)
endif()
foreach(_sg_tool splicegatectl splicegate-audit splicegate-archive)
  if(TARGET ${_sg_tool})
    install(TARGETS ${_sg_tool} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT splicegate)
  endif()
endforeach()

install(FILES ${_sg_pkg}/man/splicegate.8 ${_sg_pkg}/man/splicegate-archive.8 DESTINATION ${CMAKE_INSTALL_MANDIR}/man8
        COMPONENT splicegate)
install(FILES ${_sg_pkg}/man/splicegate.conf.5 DESTINATION ${CMAKE_INSTALL_MANDIR}/man5
        COMPONENT splicegate)
install(FILES ${_sg_pkg}/man/splicegatectl.1 ${_sg_pkg}/man/splicegate-audit.1
        DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT splicegate)
if(EXISTS ${_sg_pkg}/bash-completion/splicegatectl)
  install(FILES ${_sg_pkg}/bash-completion/splicegatectl
          DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions COMPONENT splicegate)
endif()

# What a monitoring setup takes from the package: the Prometheus alert rules (with their
# promtool unit tests) and the Grafana dashboard.
install(FILES ${_sg_pkg}/prometheus/splicegate.rules.yml ${_sg_pkg}/prometheus/splicegate.rules.test.yml
              ${_sg_pkg}/prometheus/splicegate-dashboard.json
        DESTINATION ${CMAKE_INSTALL_DATADIR}/splicegate COMPONENT splicegate)

if(SPLICEGATE_INSTALL_SYSTEM_FILES)
  install(FILES ${_sg_pkg}/splicegate.conf DESTINATION ${SPLICEGATE_CONFIG_DIR}
          COMPONENT splicegate)
  install(FILES ${_sg_pkg}/systemd/splicegate.service ${_sg_pkg}/systemd/splicegate-archive.service
          DESTINATION ${SPLICEGATE_SYSTEMD_UNIT_DIR} COMPONENT splicegate)
  install(FILES ${_sg_pkg}/systemd/sysctl.d/50-splicegate.conf
          DESTINATION lib/sysctl.d COMPONENT splicegate)
  # Commented out, for the operator to copy: it widens who may choose which congestion control.
  install(FILES ${_sg_pkg}/systemd/sysctl.d/60-splicegate-congestion.conf ${_sg_pkg}/archive.conf
          DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples COMPONENT splicegate)
endif()

