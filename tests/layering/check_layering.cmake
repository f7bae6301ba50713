cmake_minimum_required(VERSION 3.25)
# cmake -P script over the table of the layers' CMake links (DEPS_FILE, written at configure
# time by this folder's CMakeLists.txt). Fails when
# - a file under weft/<layer>/ includes a header of a layer that <layer> does not link,
#   directly or through another layer;
# - it includes another layer's internal/ header, or an umbrella header (weft/dist.h): those
#   are for users, not for layers;
# - one of the three boundaries that carry the design is crossed, even through the links;
# - a folder under weft/ is not a layer of the build, or docs/ARCHITECTURE.md's table of
#   layers and their dependencies differs from the build's.
include(${DEPS_FILE})
set(never "dist:tensor" "nn:dist" "launch:dist")

# closure_<layer>: every layer reached through the links.
foreach(layer IN LISTS layers)
  set(closure_${layer} "")
  set(frontier ${direct_${layer}})
  while(frontier)
    list(POP_FRONT frontier dep)
    if(NOT dep IN_LIST closure_${layer})
      list(APPEND closure_${layer} ${dep})
      list(APPEND frontier ${direct_${dep}})
    endif()
  endwhile()
endforeach()

set(violations "")
foreach(edge IN LISTS never)
  string(REPLACE ":" ";" pair ${edge})
  list(GET pair 0 from)
  list(GET pair 1 to)
  if(to IN_LIST closure_${from})
    string(APPEND violations "weft/${from} links weft/${to}, which it must never depend on\n")
  endif()
endforeach()

file(GLOB folders LIST_DIRECTORIES true RELATIVE ${SOURCE_DIR}/weft ${SOURCE_DIR}/weft/*)
foreach(folder IN LISTS folders)
  if(IS_DIRECTORY ${SOURCE_DIR}/weft/${folder} AND NOT folder IN_LIST layers)
    string(APPEND violations "weft/${folder}: a folder that is no layer (weft_cc_library) of the build\n")
  endif()
endforeach()

foreach(layer IN LISTS layers)
  file(GLOB_RECURSE files ${SOURCE_DIR}/weft/${layer}/*.h ${SOURCE_DIR}/weft/${layer}/*.cc)
  foreach(f IN LISTS files)
    file(STRINGS ${f} includes REGEX "^#include [\"<]weft/")
    foreach(line IN LISTS includes)
      if(line MATCHES "weft/([a-z_]+)\\.h")
        string(APPEND violations "${f}: an umbrella header inside a layer: ${line}\n")
      elseif(line MATCHES "weft/([a-z_]+)/(internal/)?")
        set(dep ${CMAKE_MATCH_1})
        if(NOT dep STREQUAL layer AND CMAKE_MATCH_2)
          string(APPEND violations "${f}: weft/${dep}'s internal header: ${line}\n")
        elseif(NOT dep STREQUAL layer AND NOT dep IN_LIST closure_${layer})
          string(APPEND violations "${f}: weft/${layer} does not link weft/${dep}: ${line}\n")
        endif()
      endif()
    endforeach()
  endforeach()
endforeach()

# docs/ARCHITECTURE.md: a line "weft/<layer>   what it holds   deps: a, b" per layer, the deps
# being the layer's direct links ("std" for none), optionally followed by " — never ...".
file(STRINGS ${SOURCE_DIR}/docs/ARCHITECTURE.md doc_lines REGEX "^weft/[a-z_]+ .* deps: ")
set(documented "")
foreach(line IN LISTS doc_lines)
  string(REGEX MATCH "^weft/([a-z_]+) .* deps: ([a-z_, ]+)" _ "${line}")
  set(layer ${CMAKE_MATCH_1})
  string(REPLACE ", " ";" deps "${CMAKE_MATCH_2}")
  string(STRIP "${deps}" deps)
  if(deps STREQUAL "std")
    set(deps "")
  endif()
  list(APPEND documented ${layer})
  if(NOT layer IN_LIST layers)
    string(APPEND violations "docs/ARCHITECTURE.md names weft/${layer}, which is no layer\n")
    continue()
  endif()
  list(SORT deps)
  set(built "${direct_${layer}}")
  list(SORT built)
  if(NOT deps STREQUAL built)
    string(APPEND violations
           "docs/ARCHITECTURE.md: weft/${layer} deps '${deps}', CMake links '${built}'\n")
  endif()
endforeach()
foreach(layer IN LISTS layers)
  if(NOT layer IN_LIST documented)
    string(APPEND violations "docs/ARCHITECTURE.md does not list weft/${layer}\n")
  endif()
endforeach()

if(violations)
  message(FATAL_ERROR "layering violations:\n${violations}")
endif()
message(STATUS "layering: ok")
