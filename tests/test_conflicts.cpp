// The matrix of run's modes against the options (src/cli/conflicts.cpp): an option no row
// places is refused in every mode, never dropped; a placed one gets its own verdict.
#include <doctest/doctest.h>

#include <string>

#include "attnscope/base/errors.hpp"
#include "options.hpp"

using attnscope::cli::mode_refusal;

namespace {

const char* const kModes[] = {"--compare", "--sweep", "--why", "--layer all", "--model"};

}  // namespace

TEST_CASE("an output no row of the matrix places is refused in every mode") {
    for (const char* mode : kModes) {
        CAPTURE(mode);
        for (const char* heading : {"Outputs", "Views", "Selections", "Limits", "Model and text", "Experiments", ""}) {
            CAPTURE(heading);
            const auto refusal = mode_refusal(mode, "--brand-new-output", heading);
            REQUIRE(refusal.has_value());
            CHECK(refusal->find("--brand-new-output") != std::string::npos);
            CHECK(refusal->rfind(mode, 0) == 0);  // the mode is blamed: "--compare: takes no ..."
            CHECK(refusal->find("refused, not ignored") != std::string::npos);
        }
    }
}

TEST_CASE("a heading that configures the run takes its new options in every mode but where it says") {
    for (const char* heading : {"Model", "Masks", "Modern attention"})
        for (const char* mode : kModes) CHECK_FALSE(mode_refusal(mode, "--brand-new-knob", heading).has_value());
    CHECK(mode_refusal("--model", "--brand-new-array", "Inputs").has_value());
    CHECK_FALSE(mode_refusal("--compare", "--brand-new-array", "Inputs").has_value());
}

TEST_CASE("the placed options keep their verdicts, with their sentences") {
    CHECK(*mode_refusal("--compare", "--jsonl", "") ==
          "--compare: prints the differences of two runs; --jsonl belongs to a single run (run it without --compare)");
    CHECK_FALSE(mode_refusal("--compare", "--stages", "Outputs").has_value());
    CHECK_FALSE(mode_refusal("--layer all", "--jsonl", "").has_value());
    CHECK(*mode_refusal("--layer all", "--html", "") ==
          "--html: draws one layer with --layer N; every layer's heads on one page: attnscope report --model DIR "
          "--html FILE");
    CHECK(*mode_refusal("--model", "bundle", "") ==
          "--model: makes x from the text with the model's weights; a bundle cannot be given with it");
    // Not a mode: nothing to say.
    CHECK_FALSE(mode_refusal("--heads", "--jsonl", "").has_value());
}
