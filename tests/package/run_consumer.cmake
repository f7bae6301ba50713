# cmake -P script: install the build tree, configure + build + run the consumer, import the
# installed Python package from the prefix (not the build tree's).
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()

run(${CMAKE_COMMAND} --install ${WEFT_BUILD_DIR} --prefix ${prefix})
run(${CMAKE_COMMAND} -S ${CONSUMER_SOURCE_DIR} -B ${WORK_DIR}/build -G Ninja
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_PREFIX_PATH=${prefix})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/consumer)

if(PYTHON)  # built with the Python package
  set(modules "weft, weft.dist")
  if(WITH_TORCH)
    string(APPEND modules ", weft.torch")
  endif()
  # One statement a line: a ';' would split the argument in CMake.
  set(check "import ${modules}\nassert weft.__file__.startswith('${prefix}/'), weft.__file__\nprint(weft.__file__)")
  run(${CMAKE_COMMAND} -E env PYTHONPATH=${prefix}/${PYTHON_INSTALL_DIR} ${PYTHON} -c "${check}")
endif()
