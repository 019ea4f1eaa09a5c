// The option tree as the one record of the command line's options: the flag that spells a
// field named in a library message, the options given, and words parsed over options.
#include <algorithm>
#include <functional>
#include <map>

#include "help.hpp"
#include "options.hpp"
#include "run.hpp"
#include "subcommand.hpp"

namespace attnscope::cli {
namespace {

// Each option of `app`, its subcommands' and their option groups', until `f` says stop.
bool visit_options(const CLI::App& app, const std::function<bool(const CLI::Option&)>& f) {
    for (const CLI::Option* o : app.get_options())
        if (f(*o)) return true;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
        if (visit_options(*sub, f)) return true;
    return false;
}

}  // namespace

std::string flag_of(const CLI::App& root, std::string_view field) {
    // A field is its option's long name with '_' for '-': zero_key is --zero-key, W_Q is --W_Q.
    std::string flag;
    visit_options(root, [&](const CLI::Option& o) {
        for (const std::string& name : o.get_lnames()) {
            std::string as_field = name;
            std::replace(as_field.begin(), as_field.end(), '-', '_');
            if (as_field == field) return flag = "--" + name, true;
        }
        return false;
    });
    return flag.empty() ? "{" + std::string(field) + "}" : flag;
}

// The help heading of each option of `app` given on its command line, its option groups' too
// (an option in an option group is under the group's heading).
void note_headings(const CLI::App& app, std::map<std::string, std::string>& headings) {
    for (const CLI::Option* o : app.get_options())
        if (o->count() > 0)
            headings[o->get_name()] =
                app.get_name().empty() && o->get_group() == "Options" ? app.get_group() : o->get_group();
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App* a) { return a->get_name().empty(); }))
        note_headings(*sub, headings);
}

void note_given_options(CLI::App& cmd, std::set<std::string>& given, std::map<std::string, std::string>* headings) {
    CLI::App* app = &cmd;
    cmd.parse_complete_callback([app, &given, headings] {
        visit_options(*app, [&given](const CLI::Option& o) {
            if (o.count() > 0) given.insert(o.get_name());
            return false;
        });
        if (headings) note_headings(*app, *headings);
    });
}

void later_options_replace(CLI::App* cmd) {
    for (CLI::Option* opt : cmd->get_options())
        if (opt->get_expected_max() == 1 && opt->get_type_size_max() == 1)
            opt->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    for (CLI::App* group : cmd->get_subcommands([](CLI::App* a) { return a->get_name().empty(); }))
        later_options_replace(group);
}

std::optional<std::string> parse_over(const RunOptions& o, const std::vector<std::string>& words, RunOptions& parsed,
                                      bool single_dash) {
    parsed = o;
    CLI::App app;
    CLI::App* run = setup_run(app, parsed);
    run->allow_extras(false);
    if (single_dash)
        for (const std::string& word : words)
            if (auto error = single_dash_error(*run, word)) return error;
    // CLI11's App::parse(std::vector<std::string>&) takes the arguments last first (it pops
    // them off the back as it reads), so the command line "run WORDS..." goes in reversed.
    std::vector<std::string> args = {"run"};
    args.insert(args.end(), words.begin(), words.end());
    std::reverse(args.begin(), args.end());
    try {
        app.parse(args);
    } catch (const CLI::ParseError& e) {
        return parse_error_message(*run, e);
    }
    return std::nullopt;
}

}  // namespace attnscope::cli
