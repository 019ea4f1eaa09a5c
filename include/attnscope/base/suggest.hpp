// attnscope — base: "did you mean …?" for a mistyped name.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace attnscope {

// Optimal string alignment distance (Damerau–Levenshtein with adjacent transpositions):
// the fewest insertions, deletions, substitutions and swaps of two neighbours that turn
// `a` into `b`. Letters compare case-insensitively, a case change costing nothing
// (W_q is W_Q), so that the suggestion can fix case too.
std::size_t edit_distance(std::string_view a, std::string_view b);

// The candidate nearest to `word`, when it is near enough to be a likely slip: at most
// 1 edit for names up to 4 characters, 2 up to 8, 3 beyond; or a case-insensitive
// equal; or the only candidate of which `word` is a prefix (--hea -> --heads). Ties go
// to the earlier candidate. Nothing when `word` is itself a candidate.
std::optional<std::string> nearest_name(std::string_view word, const std::vector<std::string>& candidates);

// "; did you mean NAME?" for nearest_name's answer, or "".
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace attnscope
