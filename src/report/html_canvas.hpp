// A big matrix on the HTML page is a canvas that the page's script draws
// (src/report/html_page.js) from data written beside it: its levels, values and labels;
// the palettes; and the head view's data. Internal to the report layer.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "figure.hpp"

namespace attnscope::figure {

// The rows and columns a canvas draws: all, or (unless --full) the ends of an axis longer
// than kHtmlMaxAxis around a gap.
std::vector<std::size_t> canvas_axis(std::size_t n, bool full);

// "rows 1024–3071 and columns 1024–3071 (of 4096 × 4096)" left out, or "".
std::string canvas_note(const Matrix& m, bool full);

// A matrix's data for the script, as <script type="application/json" id="ID">: sizes,
// labels, levels and values.
void write_canvas_data(std::ostream& out, const TraceView& v, const Matrix& m, const ColourScale& sc,
                       const std::vector<char>& seen, bool full, const std::string& id, const std::string& title);

// The palettes for the script (a JSON object): the levels of viridis and blue-red, the mask's colour, the hatch.
void write_palettes(std::ostream& out);

// The head view's data: the heads, the sizes, the tokens of each chosen batch item and
// the weights (float32, base64).
void write_head_view_data(std::ostream& out, const TraceView& v, const std::vector<std::size_t>& bs,
                          const std::vector<std::size_t>& hs, const std::vector<float>& data);

}  // namespace attnscope::figure
