// The element types of written and shown arrays (include/attnscope/base/dtype.hpp).
#include "attnscope/base/dtype.hpp"

namespace attnscope {

std::size_t element_count(const std::vector<std::size_t>& shape) {
    std::size_t n = 1;
    for (std::size_t d : shape) n *= d;
    return n;
}

std::size_t dtype_size(DType dtype) {
    switch (dtype) {
        case DType::float32:
            return 4;
        case DType::float64:
            return 8;
        case DType::boolean:
            return 1;
        case DType::int64:
            return 8;
    }
    return 0;
}

}  // namespace attnscope
