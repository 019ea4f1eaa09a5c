// The command line's subcommands: each file under src/cli/ that defines one registers it
// here (CLI11's pattern: an options struct, setup_x(app), run_x(options)).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <string_view>

namespace attnscope::cli {

struct Subcommand {
    CLI::App* app;             // the parsed subcommand, owned by the parent app
    std::function<int()> run;  // runs it once parsed; returns the exit code
};

// Adds the subcommand to `parent`; the options it parses into live as long as `run`.
using SetupFn = Subcommand (*)(CLI::App& parent);

Subcommand setup_run_command(CLI::App& parent);
Subcommand setup_check_command(CLI::App& parent);    // check.cpp
Subcommand setup_decode_command(CLI::App& parent);   // decode.cpp
Subcommand setup_inspect_command(CLI::App& parent);  // inspect.cpp
Subcommand setup_report_command(CLI::App& parent);   // report.cpp
Subcommand setup_tokens_command(CLI::App& parent);   // tokens.cpp
Subcommand setup_make_command(CLI::App& parent);     // make.cpp
Subcommand setup_lesson_command(CLI::App& parent);   // lesson.cpp

// Every subcommand, in the order --help lists them.
inline constexpr SetupFn kSubcommands[] = {setup_run_command,     setup_check_command,  setup_decode_command,
                                           setup_inspect_command, setup_report_command, setup_tokens_command,
                                           setup_make_command,    setup_lesson_command};

// The command-line spelling of a field named in a library message, as the option tree
// under `root` spells it ("zero_key" -> "--zero-key"); an unknown field keeps its braces
// (flags.cpp).
std::string flag_of(const CLI::App& root, std::string_view field);

}  // namespace attnscope::cli
