// attnscope command-line entry point: registers the subcommands, and is the one place
// that catches errors, spells the fields they name as flags, and picks the exit code
// (0 success, 1 runtime failure, 2 usage or bad input).
#include <CLI/CLI.hpp>
#include <csignal>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/text.hpp"
#include "attnscope/io/read.hpp"
#include "attnscope/io/write.hpp"
#include "help.hpp"
#include "subcommand.hpp"
#include "version.hpp"

namespace {

// Ctrl-C, a closed pipe, kill: remove the outputs being written (temporaries sized for
// gigabytes of stages, a dump directory just created), then die of the same signal.
extern "C" void remove_outputs_and_die(int sig) {
    attnscope::remove_unfinished_outputs();
    std::signal(sig, SIG_DFL);
    std::raise(sig);  // delivered once this handler returns: the default action
}

void clean_up_on_fatal_signals() {
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGQUIT}) {
        struct sigaction now {
        }, before{};
        now.sa_handler = remove_outputs_and_die;
        sigemptyset(&now.sa_mask);
        if (::sigaction(sig, nullptr, &before) == 0 && before.sa_handler == SIG_IGN) continue;  // nohup etc.
        ::sigaction(sig, &now, nullptr);
    }
}

// `e`'s fields spelled as the options of `app` spell them.
int fail(const CLI::App& app, const attnscope::Error& e, int code) {
    // One line, nothing a terminal would act on: file names, labels and keys from the
    // input are echoed inside messages.
    const auto spell = [&app](std::string_view field) { return attnscope::cli::flag_of(app, field); };
    std::cerr << "attnscope: error: " << attnscope::escape_control(e.text(spell)) << '\n';
    return code;
}

}  // namespace

int main(int argc, char** argv) {
    using namespace attnscope;
    clean_up_on_fatal_signals();
    exit_on_changed_mappings();  // a mapped input truncated under us: one line, exit 2
    CLI::App app{"attnscope: inspect transformer attention, stage by stage"};
    app.formatter(std::make_shared<cli::HelpFormatter>());  // before the subcommands: they inherit it
    app.set_version_flag("-V,--version", std::string("attnscope ") + cli::kVersion, "Print the version");
    app.set_help_flag("-h,--help", "Print this help");
    app.require_subcommand(1);
    // The outputs' notes (a link replaced), spelled as the errors are.
    set_output_notes([&app](const std::string& line) {
        const auto spell = [&app](std::string_view field) { return cli::flag_of(app, field); };
        std::cerr << "attnscope: note: " << escape_control(spell_fields(line, spell)) << '\n';
    });
    std::vector<cli::Subcommand> commands;
    for (cli::SetupFn setup : cli::kSubcommands) commands.push_back(setup(app));
    const std::vector<std::string> args(argv + 1, argv + argc);

    try {
        // Generated from the option tree for the build (man page, completions): hidden options.
        if (args.size() == 1 && args[0] == "--man") return std::cout << cli::man_page(app), 0;
        if (!args.empty() && args[0] == "--completion") {
            if (args.size() != 2) throw UsageError("--completion: expected one shell, bash or zsh");
            return std::cout << cli::completion_script(app, args[1]), 0;
        }
        // `attnscope help [COMMAND]`: the help of the command, as with --help.
        if (!args.empty() && args[0] == "help") return std::cout << cli::help_command(app, args), 0;
        // Name an unknown command (CLI11 would only say that one is required).
        if (!args.empty() && args[0][0] != '-') cli::check_command(app, args[0]);
        // A long option with one dash (-heads) is refused: CLI11 would read -h, --help.
        cli::check_single_dash(app, args);
        app.parse(argc, argv);
        for (const auto& c : commands)
            if (c.app->parsed()) return c.run();
        return 0;
    } catch (const CLI::ParseError& e) {
        if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
        const auto chosen = app.get_subcommands();
        std::cerr << "attnscope: error: "
                  << escape_control(cli::parse_error_message(chosen.empty() ? app : *chosen[0], e)) << '\n';
        return 2;
    } catch (const InputError& e) {
        return fail(app, e, 2);
    } catch (const UsageError& e) {
        return fail(app, e, 2);
    } catch (const RuntimeFailure& e) {
        return fail(app, e, 1);
    } catch (const std::bad_alloc&) {
        std::cerr << "attnscope: error: out of memory\n";
        return 1;
    } catch (const std::exception& e) {
        std::cerr << "attnscope: internal error: " << escape_control(e.what()) << '\n';
        return 1;
    }
}
