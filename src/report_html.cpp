// Placeholder until the HTML/SVG writer lands.
#include "attnscope/errors.hpp"
#include "attnscope/report.hpp"

namespace attnscope {
void write_html(std::ostream&, const TraceView&, const std::vector<std::string>&) {
    throw RuntimeFailure("HTML output is not available yet");
}
void write_svg(std::ostream&, const TraceView&, const std::string&, std::size_t, std::size_t) {
    throw RuntimeFailure("SVG output is not available yet");
}
}  // namespace attnscope
