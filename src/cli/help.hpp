// The command line's own words: --help grouped and wrapped, the man page and the shell
// completions generated from the same option tree, and parse errors in the user's terms.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

namespace attnscope::cli {

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

// The options of `cmd` as spelled on the command line ("--heads", "-q"), hidden ones left out.
std::vector<std::string> option_spellings(const CLI::App& cmd);

// UsageError unless `name` is a command of `app`: "unknown command 'rnu'; did you mean run?".
void check_command(const CLI::App& app, const std::string& name);

// `attnscope help [COMMAND]` (`args` as given after the program name, "help" first): the
// help of the top level or of COMMAND, as `attnscope [COMMAND] --help` prints it.
std::string help_command(const CLI::App& app, const std::vector<std::string>& args);

// A long option spelled with one dash (-heads, -causal=1): "unknown option -heads; did you
// mean --heads?" for `cmd`. CLI11 reads -heads as -h -e -a -d -s, so -h would print the
// help; short flags given together (-qV) are not refused. Nothing for any other word.
std::optional<std::string> single_dash_error(const CLI::App& cmd, const std::string& arg);
// The same over a command line (`args` after the program name; COMMAND's options when the
// first word is a command), up to a "--": UsageError for the first such word.
void check_single_dash(const CLI::App& app, const std::vector<std::string>& args);

// The man page (roff), from the same tree as --help: every command and option, each
// example once, and where the example bundles are installed.
std::string man_page(const CLI::App& app);

// A completion script for `shell` ("bash" or "zsh"): commands, options, choices, files.
// UsageError for another shell, naming these two.
std::string completion_script(const CLI::App& app, const std::string& shell);

}  // namespace attnscope::cli
