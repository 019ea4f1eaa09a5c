# ctest's test of the layer check (cmake/layer_check.cmake): it refuses a relative include
# that climbs out of a layer's folder in a small tree written here, names the file, the line
# and the include, and passes on the repository itself.
#   cmake -DSOURCE=REPOSITORY -DWORK=SCRATCH_DIR -P cmake/layer_check_test.cmake
file(REMOVE_RECURSE ${WORK})
file(WRITE ${WORK}/src/lm/ops.cpp "// a model's linear map\n#include <cmath>\n\n#include \"../core/blas.hpp\"\n")
file(WRITE ${WORK}/src/core/blas.hpp "#pragma once\n")
file(WRITE ${WORK}/include/attnscope/lm/x.hpp "#pragma once\n#  include <../../core/y.hpp>\n")
set(check -DLAYER_CHECK_ROOT=${WORK} -P ${SOURCE}/cmake/layer_check.cmake)
execute_process(COMMAND ${CMAKE_COMMAND} ${check} RESULT_VARIABLE code ERROR_VARIABLE err)
string(REGEX REPLACE "[ \n]+" " " err "${err}")
if(code EQUAL 0)
  message(FATAL_ERROR "the layer check accepted src/lm/ops.cpp's #include \"../core/blas.hpp\"")
endif()
foreach(expected "src/lm/ops.cpp:4: #include \"../core/blas.hpp\" climbs out of src/lm/"
                 "include/attnscope/lm/x.hpp:2: #include \"../../core/y.hpp\" climbs out of include/attnscope/lm/")
  string(FIND "${err}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "the layer check's message lacks `${expected}`:\n${err}")
  endif()
endforeach()
# The repository itself passes.
execute_process(COMMAND ${CMAKE_COMMAND} -DLAYER_CHECK_ROOT=${SOURCE} -P ${SOURCE}/cmake/layer_check.cmake
  RESULT_VARIABLE code ERROR_VARIABLE err)
if(NOT code EQUAL 0)
  message(FATAL_ERROR "the repository fails its own layer check:\n${err}")
endif()
file(REMOVE_RECURSE ${WORK})
