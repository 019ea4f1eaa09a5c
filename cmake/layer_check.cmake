# The layer check (CONTRIBUTING.md, "Layers and folders"): no source or header under src/ or
# include/ includes a path that climbs out of its folder ("../core/blas.hpp"). A layer's
# include root holds only its own folder and those of the layers below it, so a wrong-way
# include by the layer's path ("attnscope/report/report.hpp" in the core) does not compile;
# a relative path would find any file of the tree and slip past that.
#
# Runs at configure time (include() from CMakeLists.txt) and before every build of the
# library (cmake -DLAYER_CHECK_ROOT=DIR -P cmake/layer_check.cmake), and fails with one line per include:
#   src/lm/ops.cpp:6: #include "../core/blas.hpp" climbs out of src/lm/: ...
if(NOT LAYER_CHECK_ROOT)
  set(LAYER_CHECK_ROOT ${PROJECT_SOURCE_DIR})
endif()
file(GLOB_RECURSE layer_check_files RELATIVE ${LAYER_CHECK_ROOT}
  ${LAYER_CHECK_ROOT}/src/*.cpp ${LAYER_CHECK_ROOT}/src/*.hpp ${LAYER_CHECK_ROOT}/src/*.h ${LAYER_CHECK_ROOT}/include/*.hpp ${LAYER_CHECK_ROOT}/include/*.h)
list(SORT layer_check_files)
set(layer_check_wrong "")
foreach(file ${layer_check_files})
  file(STRINGS ${LAYER_CHECK_ROOT}/${file} lines REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]")
  # file(STRINGS) gives no line numbers: count them from the whole file for the message.
  foreach(line IN LISTS lines)
    if(line MATCHES "#[ \t]*include[ \t]*[<\"]([^>\"]*)[>\"]")
      set(target ${CMAKE_MATCH_1})
      if(target MATCHES "(^|/)\\.\\.(/|$)")
        get_filename_component(folder ${file} DIRECTORY)
        file(READ ${LAYER_CHECK_ROOT}/${file} text)
        string(FIND "${text}" "${line}" at)
        string(SUBSTRING "${text}" 0 ${at} before)
        string(REGEX MATCHALL "\n" newlines "${before}")
        list(LENGTH newlines number)
        math(EXPR number "${number} + 1")
        string(APPEND layer_check_wrong "${file}:${number}: #include \"${target}\" climbs out of ${folder}/: "
          "include another layer's public header by its path, \"attnscope/LAYER/NAME.hpp\" "
          "(CONTRIBUTING.md, \"Layers and folders\")\n")
      endif()
    endif()
  endforeach()
endforeach()
if(layer_check_wrong)
  message(FATAL_ERROR "layer check failed:\n${layer_check_wrong}")
endif()
