cmake_policy(SET CMP0057 NEW) # IN_LIST
# Writes the man pages, txo(1) and txo-<command>(1) for every command `txo help --commands`
# lists, from `txo help --man [COMMAND]` (the settings tables), into OUT/man1, and txo.env(5),
# the environment file (`txo help --man txo.env`), into OUT/man5.
#   cmake -DTXO=<the txo command> -DOUT=<dir> -P man_pages.cmake
file(MAKE_DIRECTORY "${OUT}/man1" "${OUT}/man5")
execute_process(COMMAND "${TXO}" help --commands OUTPUT_VARIABLE names RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${TXO} help --commands failed (${rc})")
endif()
string(REGEX REPLACE "\n$" "" names "${names}")
string(REPLACE "\n" ";" names "${names}")
set(pages "")
foreach(name "" ${names})
  if(name STREQUAL "")
    set(page "${OUT}/man1/txo.1")
  else()
    set(page "${OUT}/man1/txo-${name}.1")
  endif()
  execute_process(COMMAND "${TXO}" help --man ${name} OUTPUT_FILE "${page}" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${TXO} help --man ${name} failed (${rc})")
  endif()
  list(APPEND pages "${page}")
endforeach()
execute_process(COMMAND "${TXO}" help --man txo.env OUTPUT_FILE "${OUT}/man5/txo.env.5"
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${TXO} help --man txo.env failed (${rc})")
endif()
# Pages of commands that no longer exist must not be installed.
file(GLOB all "${OUT}/man1/*.1")
foreach(page IN LISTS all)
  if(NOT page IN_LIST pages)
    file(REMOVE "${page}")
  endif()
endforeach()
