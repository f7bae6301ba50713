# cmake -P script: runs COMMAND and fails unless its exit code is 0 (any code with
# -DANY_EXIT=1) and every line of EXPECT appears in its output (with -DANY_EXIT=1, in its
# output or its errors). Both are "|"-separated lists (";" would not survive add_test).
string(REPLACE "|" ";" COMMAND "${COMMAND}")
string(REPLACE "|" ";" EXPECT "${EXPECT}")
execute_process(COMMAND ${COMMAND} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                TIMEOUT 60)
if(NOT rc EQUAL 0 AND NOT ANY_EXIT)
  message(FATAL_ERROR "exit ${rc}\n${out}\n${err}")
endif()
if(ANY_EXIT)
  string(APPEND out "${err}")
endif()
foreach(line IN LISTS EXPECT)
  string(FIND "${out}" "${line}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "missing '${line}' in:\n${out}")
  endif()
endforeach()
