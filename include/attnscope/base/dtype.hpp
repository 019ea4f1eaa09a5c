// attnscope — base: the element types of the arrays attnscope writes and shows, and
// their sizes. Shared by the core's TraceView and the io layer's writers.
#pragma once

#include <cstddef>
#include <vector>

namespace attnscope {

enum class DType { float32, float64, boolean, int64 };

std::size_t dtype_size(DType dtype);                               // bytes per element (bool: 1)
std::size_t element_count(const std::vector<std::size_t>& shape);  // product of the extents (1 for a scalar)

}  // namespace attnscope
