// "Did you mean …?": the nearest name by edit distance.
#include "attnscope/base/suggest.hpp"

#include <algorithm>
#include <cctype>

namespace attnscope {
namespace {

char fold(char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }

}  // namespace

std::size_t edit_distance(std::string_view a, std::string_view b) {
    // d[i][j]: distance of a[0, i) and b[0, j); three rows suffice for the transposition.
    const std::size_t n = a.size(), m = b.size();
    std::vector<std::size_t> before(m + 1), prev(m + 1), cur(m + 1);
    for (std::size_t j = 0; j <= m; ++j) prev[j] = j;
    for (std::size_t i = 1; i <= n; ++i) {
        cur[0] = i;
        for (std::size_t j = 1; j <= m; ++j) {
            const std::size_t cost = fold(a[i - 1]) == fold(b[j - 1]) ? 0 : 1;
            cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost});
            if (i > 1 && j > 1 && fold(a[i - 1]) == fold(b[j - 2]) && fold(a[i - 2]) == fold(b[j - 1]))
                cur[j] = std::min(cur[j], before[j - 2] + 1);
        }
        std::swap(before, prev);
        std::swap(prev, cur);
    }
    return prev[m];
}

std::optional<std::string> nearest_name(std::string_view word, const std::vector<std::string>& candidates) {
    if (word.empty() || std::find(candidates.begin(), candidates.end(), word) != candidates.end()) return {};
    const std::size_t letters = word.size() - std::min(word.find_first_not_of('-'), word.size());
    const std::size_t allowed = letters <= 4 ? 1 : letters <= 8 ? 2 : 3;
    std::optional<std::string> best;
    std::size_t best_d = allowed + 1;
    for (const auto& c : candidates) {
        const std::size_t d = edit_distance(word, c);
        if (d < best_d && d < letters) best = c, best_d = d;  // something in common
    }
    if (best) return best;
    // A unique completion of what was typed (at least two letters of it).
    std::vector<std::string> completions;
    for (const auto& c : candidates)
        if (letters >= 2 && c.size() > word.size() && c.compare(0, word.size(), word) == 0) completions.push_back(c);
    if (completions.size() == 1) return completions[0];
    return {};
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
    const auto n = nearest_name(word, candidates);
    return n ? "; did you mean " + *n + "?" : "";
}

}  // namespace attnscope
