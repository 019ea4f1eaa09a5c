// "Did you mean …?": edit distances counted by hand, and which slips get a suggestion.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "attnscope/base/suggest.hpp"

using attnscope::did_you_mean;
using attnscope::edit_distance;
using attnscope::nearest_name;

TEST_CASE("edit distance: insertions, deletions, substitutions, adjacent swaps; case is free") {
    CHECK(edit_distance("", "") == 0);
    CHECK(edit_distance("heads", "heads") == 0);
    CHECK(edit_distance("", "abc") == 3);
    CHECK(edit_distance("head", "heads") == 1);       // one insertion
    CHECK(edit_distance("--hedas", "--heads") == 1);  // one swap of neighbours
    CHECK(edit_distance("kitten", "sitting") == 3);   // k->s, e->i, +g
    CHECK(edit_distance("W_q", "W_Q") == 0);          // case only
    CHECK(edit_distance("ca", "abc") == 3);           // optimal string alignment, not full Damerau
}

TEST_CASE("nearest name: a likely slip, never a wild guess") {
    const std::vector<std::string> options = {"--heads", "--head", "--heatmap", "--causal", "--stages", "--scale"};
    CHECK(nearest_name("--hedas", options) == std::optional<std::string>("--heads"));
    CHECK(nearest_name("--casual", options) == std::optional<std::string>("--causal"));
    CHECK(nearest_name("--stage", options) == std::optional<std::string>("--stages"));  // tie-free: 1 edit
    CHECK(nearest_name("--heat", options) == std::optional<std::string>("--head"));     // nearest wins over prefix
    CHECK_FALSE(nearest_name("--frobnicate", options));
    CHECK_FALSE(nearest_name("--heads", options));  // known: nothing to suggest
    const std::vector<std::string> stages = {"scores", "mask", "weights", "context"};
    CHECK(nearest_name("weight", stages) == std::optional<std::string>("weights"));
    CHECK(nearest_name("contxt", stages) == std::optional<std::string>("context"));
    CHECK_FALSE(nearest_name("y", {"x"}));  // nothing in common: no guess
    CHECK(nearest_name("W_q", {"x", "W_Q", "W_K"}) == std::optional<std::string>("W_Q"));
    CHECK(did_you_mean("weight", stages) == "; did you mean weights?");
    CHECK(did_you_mean("zzzzzz", stages).empty());
}
