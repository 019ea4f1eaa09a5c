// attnscope — report: run --why B,H,I as text (80 columns), JSON (attnscope.why/1) and,
// with --explain, its narration (docs/classroom.md, "Why this key").
#pragma once

#include <iosfwd>

#include "attnscope/analysis/why.hpp"

namespace attnscope {

void write_why_text(std::ostream& out, const TraceView& view, const WhyRow& r, bool explain);
void write_why_json(std::ostream& out, const TraceView& view, const WhyRow& r);

}  // namespace attnscope
