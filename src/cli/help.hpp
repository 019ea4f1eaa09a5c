// The command line's own words: --help grouped and wrapped, the man page and the shell
// completions generated from the same option tree, and parse errors in the user's terms.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace attnscope::cli {

inline constexpr const char* kVersion = "0.1.0";

// Help headings, in the order --help lists them. An option joins one with
// `->group(kOutputs)` (or sits in an option group of that name); an option under a heading
// not listed here is shown after these, under its own heading.
inline constexpr const char* kInputs = "Inputs";
inline constexpr const char* kComparison = "Comparison";  // check's own
inline constexpr const char* kDecoding = "Decoding";      // decode's own
inline constexpr const char* kCheckpoint = "Checkpoint";
inline constexpr const char* kOwnQKV = "Your own Q, K, V";
inline constexpr const char* kModel = "Model";
inline constexpr const char* kMasks = "Masks";
inline constexpr const char* kModern = "Modern attention";
inline constexpr const char* kOutputs = "Outputs";
inline constexpr const char* kSelections = "Selections";
inline constexpr const char* kViews = "Views";
inline constexpr const char* kExperiments = "Experiments";
inline constexpr const char* kLimits = "Limits";

// --help: usage, the description, options by heading with their values (choices, defaults)
// and no CLI11 type names, wrapped to the terminal (80 columns in a pipe, never above 100),
// then examples.
class HelpFormatter : public CLI::Formatter {
   public:
    std::string make_help(const CLI::App* app, std::string name, CLI::AppFormatMode mode) const override;
};

// Examples shown at the end of `attnscope [COMMAND] --help` and in the man page:
// command lines (after "attnscope ") and what each shows. `command` "" is the top level.
struct Example {
    const char* line;
    const char* what;
};
std::vector<Example> examples_of(const std::string& command);

// Every option of `cmd`, its option groups' included, in the order they were added
// (hidden ones, whose group is "", too).
std::vector<const CLI::Option*> all_options(const CLI::App* cmd);

// One line for a parse error: an unknown option is named with the nearest known one
// ("unknown option --hedas; did you mean --heads?"), never blamed on the bundle.
// `cmd`: the subcommand being parsed (or the top level).
std::string parse_error_message(const CLI::App& cmd, const CLI::ParseError& e);

// The man page (roff), from the same tree as --help: every command and option.
std::string man_page(const CLI::App& app);

// A completion script for `shell` ("bash" or "zsh"): commands, options, choices, files.
std::string completion_script(const CLI::App& app, const std::string& shell);

}  // namespace attnscope::cli
