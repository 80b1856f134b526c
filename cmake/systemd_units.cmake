# Writes the systemd units from systemd/*.service.in with @TXO_BINDIR@ (the directory that holds
# the txo command) substituted: at install time, for the prefix given then, and in the test that
# verifies the units against the build's txo.
#   cmake -DSRC=<dir of .in files> -DOUT=<dir> -DTXO_BINDIR=<dir> -P systemd_units.cmake
# Included from install(CODE) with the same variables set.
file(GLOB units "${SRC}/*.service.in")
foreach(in IN LISTS units)
  get_filename_component(name "${in}" NAME)
  string(REGEX REPLACE "\\.in$" "" name "${name}")
  configure_file("${in}" "${OUT}/${name}" @ONLY)
endforeach()
