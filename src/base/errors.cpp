// Spelling the fields named in error messages.
#include "attnscope/base/errors.hpp"

namespace attnscope {

std::string spell_fields(std::string_view m, const std::function<std::string(std::string_view)>& spell) {
    std::string out;
    out.reserve(m.size());
    for (std::size_t k = 0; k < m.size();) {
        const std::size_t open = m.find('{', k);
        const std::size_t close = open == std::string_view::npos ? open : m.find('}', open);
        // A field is a plain identifier: letters, digits and '_' (a '{' in a file name stays).
        bool field = close != std::string_view::npos && close > open + 1;
        for (std::size_t i = open + 1; field && i < close; ++i) {
            const char c = m[i];
            field = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
        }
        if (!field) {
            const std::size_t end = open == std::string_view::npos ? m.size() : open + 1;
            out.append(m.substr(k, end - k));
            k = end;
            continue;
        }
        out.append(m.substr(k, open - k));
        out += spell(m.substr(open + 1, close - open - 1));
        k = close + 1;
    }
    return out;
}

}  // namespace attnscope
