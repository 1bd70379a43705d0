# Run by ctest (cmake -P): install the build tree into a scratch prefix, configure and build the consumer
# against it (nothing from the source tree on its include path), run it on a committed fixture.
set(prefix ${MLACONF_BUILD}/install-test/prefix)
set(cbuild ${MLACONF_BUILD}/install-test/consumer)
file(REMOVE_RECURSE ${MLACONF_BUILD}/install-test)
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(last_out "${out}" PARENT_SCOPE)
endfunction()
run(${CMAKE_COMMAND} --install ${MLACONF_BUILD} --prefix ${prefix})
foreach(f lib/cmake/mlaconf/mlaconfConfig.cmake include/mlaconf/fixtures/compare.h bin/mlaconf)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "not installed: ${prefix}/${f}")
  endif()
endforeach()
set(launcher)
if(LAUNCHER)
  set(launcher -DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER})
endif()
# The build's own compile and link flags (empty in the default presets; -fsanitize=... in the asan one).
run(${CMAKE_COMMAND} -S ${CONSUMER_SRC} -B ${cbuild} -G ${GENERATOR} -DCMAKE_CXX_COMPILER=${CXX} ${launcher}
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}"
    "-DCMAKE_EXE_LINKER_FLAGS=${EXE_LINKER_FLAGS}")
run(${CMAKE_COMMAND} --build ${cbuild})
run(${cbuild}/consumer ${FIXTURE})
message("${last_out}")
