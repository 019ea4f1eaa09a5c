// attnscope command-line entry point: the one place that catches errors and picks the
// exit code (0 success, 1 runtime failure, 2 usage or bad input).
#include "run.hpp"

#include "attnscope/base/errors.hpp"

#include "attnscope/io/write.hpp"

#include <CLI/CLI.hpp>

#include <csignal>
#include <iostream>
#include <string>
#include <new>

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
        struct sigaction now {}, before {};
        now.sa_handler = remove_outputs_and_die;
        sigemptyset(&now.sa_mask);
        if (::sigaction(sig, nullptr, &before) == 0 && before.sa_handler == SIG_IGN) continue;  // nohup etc.
        ::sigaction(sig, &now, nullptr);
    }
}

}  // namespace

int main(int argc, char** argv) {
    clean_up_on_fatal_signals();
    CLI::App app{"attnscope: inspect transformer attention, stage by stage"};
    app.set_version_flag("--version", "attnscope 0.1.0");
    app.require_subcommand(1);
    attnscope::cli::RunOptions run_opts;
    CLI::App* run = attnscope::cli::setup_run(app, run_opts);
    for (int k = 1; k < argc; ++k) run_opts.args.emplace_back(argv[k]);

    try {
        // Name an unknown command (CLI11 would only say that one is required).
        if (argc > 1 && argv[1][0] != '-' && std::string(argv[1]) != "run")
            throw attnscope::UsageError(std::string("unknown command '") + argv[1] + "' (expected: run; see attnscope --help)");
        app.parse(argc, argv);
        if (run->parsed()) return attnscope::cli::run_run(run_opts);
        return 0;
    } catch (const CLI::ParseError& e) {
        if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
        std::cerr << "attnscope: error: " << e.what() << " (see attnscope " << (app.get_subcommands().empty() ? "" : "run ")
                  << "--help)\n";
        return 2;
    } catch (const attnscope::InputError& e) {
        std::cerr << "attnscope: error: " << e.what() << '\n';
        return 2;
    } catch (const attnscope::UsageError& e) {
        std::cerr << "attnscope: error: " << e.what() << '\n';
        return 2;
    } catch (const attnscope::RuntimeFailure& e) {
        std::cerr << "attnscope: error: " << e.what() << '\n';
        return 1;
    } catch (const std::bad_alloc&) {
        std::cerr << "attnscope: error: out of memory\n";
        return 1;
    } catch (const std::exception& e) {
        std::cerr << "attnscope: internal error: " << e.what() << '\n';
        return 1;
    }
}
