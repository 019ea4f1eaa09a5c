// --help, the man page and the shell completions, all read from one option tree, and
// parse errors said in the user's terms.
#include "help.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <sstream>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/suggest.hpp"
#include "attnscope/base/text.hpp"
#include "attnscope/core/stages.hpp"
#include "version.hpp"

namespace attnscope::cli {
namespace {

constexpr std::size_t kPipeWidth = 80, kMaxWidth = 100, kMinWidth = 40;
constexpr std::size_t kNameColumn = 28;  // where descriptions start

// Where `cmake --install` puts data/ (CMakeLists.txt), relative to the install prefix.
constexpr const char* kDataDir = "PREFIX/share/attnscope/data";
constexpr const char* kExampleData =
    "The examples read the bundles of data/: run them in the source tree, or in PREFIX/share/attnscope, where "
    "the install puts data/ (PREFIX is the directory above the bin/ holding attnscope, e.g. /usr/local or "
    "~/.local).";

// The terminal's columns (40..100), or 80 when standard output is not a terminal.
std::size_t help_width() {
    struct winsize ws {};
    if (::isatty(STDOUT_FILENO) && ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        return std::clamp<std::size_t>(ws.ws_col, kMinWidth, kMaxWidth);
    return kPipeWidth;
}

// Display columns of UTF-8 text (each character one column: help text has no wide ones).
std::size_t columns(const std::string& s) {
    std::size_t n = 0;
    for (unsigned char c : s) n += (c & 0xc0) != 0x80;
    return n;
}

// `text` wrapped at spaces: the first line continues a line already `first` columns
// wide, the others start with `indent` spaces; no line longer than `width` unless one
// word is.
std::string wrap(const std::string& text, std::size_t first, std::size_t indent, std::size_t width) {
    std::string out, word;
    std::size_t col = first;
    bool line_empty = true;
    std::istringstream in(text);
    while (in >> word) {
        const std::size_t w = columns(word);
        if (!line_empty && col + 1 + w > width) {
            out += '\n' + std::string(indent, ' ');
            col = indent;
            line_empty = true;
        }
        if (!line_empty) out += ' ', ++col;
        out += word;
        col += w;
        line_empty = false;
    }
    return out;
}

bool hidden(const CLI::Option* o) { return o->get_group().empty(); }

// "TEXT:{float32,float64}" -> {"float32", "float64"}: an IsMember check's choices.
std::vector<std::string> choices_of(const CLI::Option* o) {
    const std::string t = o->get_type_name();
    const auto open = t.find('{'), close = t.rfind('}');
    std::vector<std::string> out;
    if (open == std::string::npos || close == std::string::npos || close < open) return out;
    std::stringstream list(t.substr(open + 1, close - open - 1));
    std::string item;
    while (std::getline(list, item, ',')) out.push_back(item);
    return out;
}

bool is_flag(const CLI::Option* o) { return o->get_expected_max() == 0; }

// The placeholder after an option's name.
std::string metavar(const CLI::Option* o) {
    static const std::map<std::string, std::string> kNamed = {{"heads", "H"},
                                                              {"kv-heads", "G"},
                                                              {"scale", "S|none"},
                                                              {"temperature", "T"},
                                                              {"zero-key", "J"},
                                                              {"cell", "B,H,I,J"},
                                                              {"why", "B,H,I"},
                                                              {"batch", "B[,B...]"},
                                                              {"head", "H[,H...]"},
                                                              {"stages", "LIST"},
                                                              {"decimals", "N"},
                                                              {"edgeitems", "N"},
                                                              {"dump", "PATH"},
                                                              {"html", "FILE"},
                                                              {"svg", "FILE"},
                                                              {"width", "COLUMNS"},
                                                              {"threads", "N"},
                                                              {"max-memory", "SIZE"},
                                                              {"compare", "'OPTIONS'"},
                                                              {"sweep", "NAME=V,V..."},
                                                              {"window", "W"},
                                                              {"softcap", "C"},
                                                              {"rope-base", "BASE"},
                                                              {"rope-dim", "R"},
                                                              {"layer", "N"},
                                                              {"prefix", "PREFIX"},
                                                              {"checkpoint", "PATH"},
                                                              {"prefill", "P"},
                                                              {"rtol", "R"},
                                                              {"atol", "A"},
                                                              {"axes", "NAME=ORDER"},
                                                              {"against", "BUNDLE"},
                                                              {"preset", "NAME"},
                                                              {"bug", "NAME"},
                                                              {"range", "auto|fixed|row|LO,HI"},
                                                              {"qkv", "FILE"},
                                                              {"model", "DIR"},
                                                              {"text", "STRING"},
                                                              {"text-file", "FILE"},
                                                              {"tokens", "IDS"},
                                                              {"predict", "K"},
                                                              {"save-forward", "FILE"},
                                                              {"memory-tokens", "TOKENS"},
                                                              {"length", "T"},
                                                              {"pad", "N"},
                                                              {"seed", "N"}};
    if (is_flag(o)) return "";
    if (o->get_positional()) {
        std::string n = o->get_name();
        std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return char(std::toupper(c)); });
        return n;
    }
    // An option names its own placeholder with type_name("=NAME") where its name means
    // something else elsewhere (make's --tokens are words, run's are ids).
    if (o->get_type_name().rfind('=', 0) == 0) return o->get_type_name().substr(1);
    const std::string name = o->get_lnames().empty() ? "" : o->get_lnames()[0];
    if (auto it = kNamed.find(name); it != kNamed.end()) return it->second;
    const auto choices = choices_of(o);
    std::string joined;
    for (const auto& c : choices) joined += (joined.empty() ? "" : "|") + c;
    if (!joined.empty() && joined.size() <= 24) return joined;
    const std::string t = o->get_type_name().substr(0, o->get_type_name().find(':'));
    if (t == "UINT" || t == "INT") return "N";
    if (t == "FLOAT") return "X";
    if (!choices.empty()) return "NAME";
    return "FILE";
}

// "-q, --quiet", "--causal, --no-causal", "--heads H", "BUNDLE".
std::string option_names(const CLI::Option* o) {
    if (o->get_positional()) return metavar(o);
    std::string names;
    for (const auto& s : o->get_snames()) names += (names.empty() ? "-" : ", -") + s;
    for (const auto& l : o->get_lnames()) names += (names.empty() ? "--" : ", --") + l;
    const std::string m = metavar(o);
    return m.empty() ? names : names + ' ' + m;
}

// The description, with the choices and the default when it does not state them.
std::string option_text(const CLI::Option* o) {
    std::string d = o->get_description();
    const auto choices = choices_of(o);
    const std::string m = metavar(o);
    if (!choices.empty() && m.find('|') == std::string::npos && d.find(choices[0]) == std::string::npos) {
        std::string list;
        for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
        d += " (one of: " + list + ")";
    }
    const std::string def = o->get_default_str();
    if (!def.empty() && !is_flag(o) && d.find("default") == std::string::npos) d += " (default " + def + ")";
    return d;
}

// A heading's rank: the listed headings in their order, then any other, then the help.
int rank(const std::string& heading) {
    static const char* const kOrder[] = {kInputs, kComparison, kDecoding,   kCheckpoint, kOwnQKV,      kModel, kMasks,
                                         kModern, kOutputs,    kSelections, kViews,      kExperiments, kLimits};
    for (int k = 0; k < int(std::size(kOrder)); ++k)
        if (heading == kOrder[k]) return k;
    return heading == "Help" ? 1000 : 100;
}

struct Section {
    std::string heading;
    std::vector<const CLI::Option*> options;
};

// The visible options of `cmd` by heading, headings in rank order (stable otherwise).
std::vector<Section> sections_of(const CLI::App* cmd) {
    std::vector<Section> out;
    auto add = [&out](const std::string& heading, const CLI::Option* o) {
        auto it = std::find_if(out.begin(), out.end(), [&](const Section& s) { return s.heading == heading; });
        if (it == out.end()) it = out.insert(out.end(), Section{heading, {}});
        it->options.push_back(o);
    };
    const CLI::Option* help = cmd->get_help_ptr();
    const CLI::Option* version = cmd->get_version_ptr();
    for (const CLI::Option* o : cmd->get_options()) {
        if (hidden(o) || o == help || o == version) continue;
        const std::string g = o->get_group();
        add(o->get_positional() && g == "Options" ? std::string(kInputs) : g, o);
    }
    for (const CLI::App* sub : cmd->get_subcommands([](const CLI::App* a) { return a->get_name().empty(); }))
        for (const CLI::Option* o : sub->get_options())
            if (!hidden(o) && o != sub->get_help_ptr()) add(sub->get_group(), o);
    if (version) add("Help", version);
    if (help) add("Help", help);
    std::stable_sort(out.begin(), out.end(),
                     [](const Section& a, const Section& b) { return rank(a.heading) < rank(b.heading); });
    return out;
}

std::vector<const CLI::App*> commands_of(const CLI::App* app) {
    return app->get_subcommands([](const CLI::App* a) { return !a->get_name().empty(); });
}

std::string names_of(const CLI::App& app) {
    std::string names;
    for (const CLI::App* c : commands_of(&app)) names += (names.empty() ? "" : ", ") + c->get_name();
    return names;
}

std::string program_of(const CLI::App* app) {
    return app->get_parent() ? program_of(app->get_parent()) + " " + app->get_name() : "attnscope";
}

// "attnscope run [BUNDLE] [OPTIONS]": positionals, then required options.
std::string usage_of(const CLI::App* app) {
    if (!commands_of(app).empty()) return program_of(app) + " COMMAND [OPTIONS]";
    std::string u = program_of(app);
    for (const CLI::Option* o : all_options(app))
        if (o->get_positional() && !hidden(o)) u += ' ' + (o->get_required() ? metavar(o) : '[' + metavar(o) + ']');
    for (const CLI::Option* o : all_options(app))
        if (!o->get_positional() && o->get_required() && !hidden(o)) u += " --" + o->get_lnames()[0] + ' ' + metavar(o);
    return u + " [OPTIONS]";
}

std::string option_line(const CLI::Option* o, std::size_t width) {
    const std::string names = option_names(o);
    const bool has_short = !o->get_snames().empty() || o->get_positional();
    std::string left = (has_short ? "  " : "      ") + names;
    if (columns(left) + 2 > kNameColumn)
        left += '\n' + std::string(kNameColumn, ' ');
    else
        left += std::string(kNameColumn - columns(left), ' ');
    return left + wrap(option_text(o), kNameColumn, kNameColumn, width) + '\n';
}

std::string examples_text(const std::string& command, std::size_t width) {
    const auto ex = examples_of(command);
    if (ex.empty()) return "";
    std::string out = "\nExamples:\n";
    for (const Example& e : ex) {
        out += "  " + wrap(std::string("attnscope ") + e.line, 2, 6, width) + '\n';
        out += "      " + wrap(e.what, 6, 6, width) + '\n';
    }
    return out;
}

// roff: backslashes, hyphens (so they stay ASCII and searchable), a leading dot or quote,
// and every character beyond ASCII as groff's \[uXXXX] (troff reads its input as Latin-1).
std::string roff(const std::string& s) {
    std::string out;
    for (std::size_t k = 0; k < s.size();) {
        const unsigned char c = static_cast<unsigned char>(s[k]);
        if (c >= 0x80) {
            const std::size_t n = utf8_sequence_length(s, k);
            if (n == 0) {  // not UTF-8: never in our own help text
                ++k;
                continue;
            }
            std::uint32_t cp = c & (0xFF >> (n + 1));
            for (std::size_t i = 1; i < n; ++i) cp = cp << 6 | (static_cast<unsigned char>(s[k + i]) & 0x3F);
            char buf[16];
            std::snprintf(buf, sizeof buf, "\\[u%04X]", static_cast<unsigned>(cp));
            out += buf;
            k += n;
            continue;
        }
        if (c == '\\')
            out += "\\e";
        else if (c == '-')
            out += "\\-";
        else
            out += char(c);
        ++k;
    }
    if (!out.empty() && (out[0] == '.' || out[0] == '\'')) out = "\\&" + out;
    return out;
}

std::vector<std::string> stage_choices() {
    std::vector<std::string> out = {"all", "none"};
    for (const StageInfo& s : stage_table()) out.emplace_back(s.name);
    return out;
}

std::string bash_script(const CLI::App& app) {
    std::ostringstream s;
    s << "# bash completion for attnscope (generated by attnscope --completion bash)\n"
      << "_attnscope() {\n"
      << "  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} cmd='' w opts=''\n"
      << "  for w in \"${COMP_WORDS[@]:1:COMP_CWORD-1}\"; do\n"
      << "    case $w in\n";
    std::string names;
    for (const CLI::App* c : commands_of(&app)) names += (names.empty() ? "" : "|") + c->get_name();
    s << "      " << names << ") cmd=$w; break ;;\n    esac\n  done\n"
      << "  case $cmd in\n"
      << "    '') COMPREPLY=($(compgen -W '";
    for (const CLI::App* c : commands_of(&app)) s << c->get_name() << ' ';
    s << "--help --version' -- \"$cur\")); return ;;\n";
    for (const CLI::App* c : commands_of(&app)) {
        s << "    " << c->get_name() << ")\n      case $prev in\n";
        std::string all;
        for (const CLI::Option* o : all_options(c)) {
            if (hidden(o) || o->get_positional()) continue;
            std::string spelled;
            for (const auto& n : o->get_snames()) spelled += (spelled.empty() ? "-" : "|-") + n, all += " -" + n;
            for (const auto& n : o->get_lnames()) spelled += (spelled.empty() ? "--" : "|--") + n, all += " --" + n;
            if (is_flag(o)) continue;
            const auto choices = o->get_lnames()[0] == "stages" ? stage_choices() : choices_of(o);
            if (o->get_lnames()[0] == "stages") {
                // A comma-separated list: complete the name after the last comma.
                s << "        " << spelled << ") local head=${cur%\"${cur##*,}\"}\n"
                  << "          COMPREPLY=($(compgen -P \"$head\" -W '";
                for (const auto& c2 : choices) s << c2 << ' ';
                s << "' -- \"${cur##*,}\")); return ;;\n";
            } else if (!choices.empty()) {
                s << "        " << spelled << ") COMPREPLY=($(compgen -W '";
                for (const auto& c2 : choices) s << c2 << ' ';
                s << "' -- \"$cur\")); return ;;\n";
            } else if (metavar(o) == "FILE" || metavar(o) == "PATH" || metavar(o) == "BUNDLE") {
                s << "        " << spelled << ") COMPREPLY=($(compgen -f -- \"$cur\")); return ;;\n";
            } else {
                s << "        " << spelled << ") return ;;\n";  // a number or words: nothing to offer
            }
        }
        s << "      esac\n      opts='" << all.substr(all.empty() ? 0 : 1) << "' ;;\n";
    }
    s << "  esac\n"
      << "  if [[ $cur == -* ]]; then COMPREPLY=($(compgen -W \"$opts\" -- \"$cur\"))\n"
      << "  else COMPREPLY=($(compgen -f -- \"$cur\")); fi\n"
      << "}\n"
      << "complete -o filenames -o bashdefault -F _attnscope attnscope\n";
    return s.str();
}

// An _arguments description: no brackets or colons, which _arguments reads as syntax.
std::string zsh_words(std::string d) {
    const auto cut = d.find(": ");
    if (cut != std::string::npos && cut > 20) d = d.substr(0, cut);
    for (char& c : d)
        if (c == '[' || c == ']')
            c = c == '[' ? '(' : ')';
        else if (c == ':')
            c = ' ';
    std::string out;
    for (char c : d) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out;
}

std::string zsh_script(const CLI::App& app) {
    std::ostringstream s;
    s << "#compdef attnscope\n# zsh completion for attnscope (generated by attnscope --completion zsh)\n"
      << "_attnscope() {\n  local -a commands\n  commands=(\n";
    for (const CLI::App* c : commands_of(&app))
        s << "    '" << c->get_name() << ':' << zsh_words(c->get_description()) << "'\n";
    s << "  )\n  if (( CURRENT == 2 )); then\n"
      << "    _describe -t commands 'attnscope command' commands\n"
      << "    _arguments '(- *)'{-h,--help}'[Print the help]' '(- *)'{-V,--version}'[Print the version]'\n"
      << "    return\n  fi\n"
      << "  local cmd=$words[2]\n  shift words; (( CURRENT-- ))\n  case $cmd in\n";
    for (const CLI::App* c : commands_of(&app)) {
        s << "    " << c->get_name() << ")\n      _arguments -s \\\n";
        for (const CLI::Option* o : all_options(c)) {
            if (hidden(o)) continue;
            const std::string what = zsh_words(o->get_description());
            if (o->get_positional()) {
                s << "        '*:" << zsh_words(metavar(o)) << ":_files' \\\n";
                continue;
            }
            std::string value;
            if (!is_flag(o)) {
                const auto choices = o->get_lnames()[0] == "stages" ? stage_choices() : choices_of(o);
                const std::string m = metavar(o);
                if (o->get_lnames()[0] == "stages") {
                    value = ":stages:_sequence compadd - ";
                    for (const auto& ch : choices) value += ch + ' ';
                } else if (!choices.empty()) {
                    value = ":" + zsh_words(m) + ":(";
                    for (const auto& ch : choices) value += ch + ' ';
                    value += ')';
                } else if (m == "FILE" || m == "PATH" || m == "BUNDLE") {
                    value = ":" + m + ":_files";
                } else {
                    value = ":" + zsh_words(m) + ": ";
                }
            }
            for (const auto& n : o->get_snames()) s << "        '-" << n << '[' << what << ']' << value << "' \\\n";
            for (const auto& n : o->get_lnames()) s << "        '--" << n << '[' << what << ']' << value << "' \\\n";
        }
        s << "        '(- *)'{-h,--help}'[Print the help]'\n      ;;\n";
    }
    s << "  esac\n}\n_attnscope \"$@\"\n";
    return s.str();
}

}  // namespace

std::vector<Example> examples_of(const std::string& command) {
    if (command.empty())
        return {{"run data/sentence.json --heads 2", "every stage of two-head self-attention, formulas and shapes"},
                {"run data/padded.json --heads 2 --stages weights --heatmap", "the weights as heatmaps"},
                {"run data/sentence.json --heads 2 --compare '--scale none'", "how the scores change unscaled"},
                {"check mine.npz --against data/sentence.json --heads 2", "find where your attention first differs"},
                {"decode data/causal.json --prefill 3", "KV-cache decoding checked against the full run"}};
    if (command == "run")
        return {{"run data/sentence.json --heads 2", "every stage, with formulas, shapes and token labels"},
                {"run data/sentence.json --heads 2 --stages weights --head 0 --explain",
                 "head 0's weights, each step narrated with its numbers"},
                {"run data/padded.json --heads 2 --stages weights --heatmap --batch 1",
                 "batch item 1's weights as heatmaps; padded keys marked"},
                {"run data/sentence.json --heads 2 --cell 0,2,1 --stages none",
                 "one weight computed by hand: head 0, query 2, key 1"},
                {"run data/sentence.json --heads 2 --compare '--scale none'",
                 "run B adds --scale none to run A; how each stage changes"}};
    if (command == "check")
        return {{"check mine.npz --against data/sentence.json --heads 2",
                 "compare your stages with the reference; name the first that differs"},
                {"check mine/ --against bundle.npz --heads 2 --causal --axes attn=bhqk",
                 "a directory of NAME.npy, one array stored in another axis order"}};
    if (command == "decode")
        return {{"decode data/causal.json --prefill 3", "prefill 3 positions, then one step per position"},
                {"decode data/rope.json --heads 4 --kv-heads 1 --rope --prefill 4 --bug rope-position-zero",
                 "a classic KV-cache bug, and where its steps part from the full run"}};
    if (command == "inspect")
        return {{"inspect model.safetensors", "the layers and attention tensors a checkpoint holds"}};
    if (command == "report")
        return {{"report data/sentence.json data/padded.json --heads 2 --html heads.html",
                 "two bundles as rows of thumbnails, a column per head, on one HTML page"},
                {"report --model gpt2/ --text \"The cat sat on the mat\" --html model.html",
                 "every layer of a model on a text; a click opens a head"}};
    if (command == "make")
        return {{"make -o prev.npz --pattern previous-token", "a bundle whose weights look one token back"},
                {"make -o cross.json --tokens \"le chat\" --memory-tokens \"the cat\" --pad 2",
                 "cross-attention with two padded keys, as JSON"}};
    if (command == "lesson")
        return {{"lesson", "the topics"},
                {"lesson keys", "a paced lesson on keys, with questions"},
                {"lesson masks --quiz", "only the questions, and a score"},
                {"lesson scaling --json", "the questions and answers, for a grader"}};
    if (command == "tokens")
        return {{"tokens --model gpt2/ --text \"The cat sat on the mat\"",
                 "ids, pieces and byte offsets, as the model's own tokenizer.json gives them"},
                {"tokens --model gpt2/ --decode 464,3797,3332", "ids back into text"},
                {"tokens --model bert/ --text-file notes.txt --json --no-special-tokens",
                 "a file's tokens as JSON, without [CLS] and [SEP]"}};
    return {};
}

std::vector<const CLI::Option*> all_options(const CLI::App* cmd) {
    std::vector<const CLI::Option*> out = cmd->get_options();
    for (const CLI::App* sub : cmd->get_subcommands([](const CLI::App* a) { return a->get_name().empty(); }))
        for (const CLI::Option* o : sub->get_options())
            if (o != sub->get_help_ptr()) out.push_back(o);
    return out;
}

std::string HelpFormatter::make_help(const CLI::App* app, std::string, CLI::AppFormatMode) const {
    const std::size_t width = help_width();
    std::string out = "Usage: " + usage_of(app) + "\n\n" + wrap(app->get_description(), 0, 0, width) + '\n';
    if (!app->get_footer().empty()) out += '\n' + wrap(app->get_footer(), 0, 0, width) + '\n';
    const auto commands = commands_of(app);
    if (!commands.empty()) {
        out += "\nCommands:\n";
        for (const CLI::App* c : commands) {
            std::string left = "  " + c->get_name();
            left += std::string(left.size() + 2 > 12 ? 2 : 12 - left.size(), ' ');
            out += left + wrap(c->get_description(), columns(left), 12, width) + '\n';
        }
    }
    for (const Section& s : sections_of(app)) {
        out += '\n' + (s.heading == "Options" ? std::string("Other options") : s.heading) + ":\n";
        for (const CLI::Option* o : s.options) out += option_line(o, width);
    }
    out += examples_text(app->get_parent() ? app->get_name() : "", width);
    if (!commands.empty())
        out += '\n' +
               wrap(
                   "See attnscope help COMMAND (or attnscope COMMAND --help) for a command's options, and man "
                   "attnscope.",
                   0, 0, width) +
               '\n';
    return out;
}

std::vector<std::string> option_spellings(const CLI::App& cmd) {
    std::vector<std::string> known;
    for (const CLI::Option* o : all_options(&cmd)) {
        if (hidden(o)) continue;
        for (const auto& n : o->get_lnames()) known.push_back("--" + n);
        for (const auto& n : o->get_snames()) known.push_back("-" + n);
    }
    return known;
}

void check_command(const CLI::App& app, const std::string& name) {
    std::vector<std::string> names;
    for (const CLI::App* c : commands_of(&app)) names.push_back(c->get_name());
    if (std::find(names.begin(), names.end(), name) != names.end()) return;
    throw UsageError("unknown command '" + name + "'" + did_you_mean(name, names) + " (expected: " + names_of(app) +
                     "; see attnscope --help)");
}

std::string help_command(const CLI::App& app, const std::vector<std::string>& args) {
    if (args.size() == 1 || (args.size() == 2 && (args[1] == "--help" || args[1] == "-h"))) return app.help();
    if (args.size() > 2)
        throw UsageError("help: expected one command, found " + std::to_string(args.size() - 1) +
                         " words (usage: attnscope help [COMMAND])");
    check_command(app, args[1]);
    for (const CLI::App* c : commands_of(&app))
        if (c->get_name() == args[1]) return c->help();
    return app.help();
}

std::optional<std::string> single_dash_error(const CLI::App& cmd, const std::string& arg) {
    if (arg.size() < 3 || arg[0] != '-' || !std::isalpha(static_cast<unsigned char>(arg[1]))) return std::nullopt;
    const std::string name = arg.substr(0, arg.find_first_of("= "));
    const std::vector<std::string> known = option_spellings(cmd);
    const auto is_short = [&](char c) { return std::count(known.begin(), known.end(), std::string{'-', c}) > 0; };
    if (std::all_of(name.begin() + 1, name.end(), is_short)) return std::nullopt;  // -qV: -q -V
    return "unknown option " + name + did_you_mean(name, known) + " (see " + program_of(&cmd) + " --help)";
}

void check_single_dash(const CLI::App& app, const std::vector<std::string>& args) {
    const CLI::App* cmd = &app;
    std::size_t k = 0;
    for (const CLI::App* c : commands_of(&app))
        if (!args.empty() && c->get_name() == args[0]) cmd = c, k = 1;
    for (; k < args.size() && args[k] != "--"; ++k)
        if (const auto error = single_dash_error(*cmd, args[k])) throw UsageError(*error);
}

std::string parse_error_message(const CLI::App& cmd, const CLI::ParseError& e) {
    const std::string where = "(see " + program_of(&cmd) + " --help)";
    // An unknown option comes first, whatever CLI11 found wrong: it may explain the rest
    // (--prefil 2 leaves --prefill missing).
    const bool extras = dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr;
    const auto option_like = [](const std::string& arg) {
        return arg.size() >= 2 && arg[0] == '-' && !std::isdigit(static_cast<unsigned char>(arg[1])) && arg[1] != '.';
    };
    std::vector<std::string> left = cmd.remaining();
    if (left.empty() && cmd.get_parent()) left = cmd.get_parent()->remaining();
    if (extras || std::any_of(left.begin(), left.end(), option_like)) {
        const std::vector<std::string> known = option_spellings(cmd);
        for (const std::string& arg : left) {
            if (!option_like(arg)) continue;
            const std::string name = arg.substr(0, arg.find('='));
            return "unknown option " + name + did_you_mean(name, known) + " " + where;
        }
        std::string list;
        for (const auto& a : left) list += (list.empty() ? "'" : ", '") + a + "'";
        return "unexpected argument" + std::string(left.size() > 1 ? "s " : " ") + list + " (usage: " + usage_of(&cmd) +
               "; see " + program_of(&cmd) + " --help)";
    }
    // CLI11's own phrasing, in ours: counts of values, a missing value, a range.
    std::string what = e.what();
    const auto colon0 = what.find(": ");
    if (colon0 != std::string::npos && what.compare(0, 1, "-") == 0) {
        const std::string option = what.substr(0, colon0), rest = what.substr(colon0 + 2);
        const CLI::Option* opt = nullptr;
        for (const CLI::Option* o : all_options(&cmd))
            for (const auto& n : o->get_lnames())
                if ("--" + n == option) opt = o;
        const std::string usage = opt ? option_names(opt) : option;
        unsigned long n = 0, m = 0;
        char word[8] = {};
        if (std::sscanf(rest.c_str(), "At %7s %lu required but received %lu", word, &n, &m) == 3)
            return option + ": expected " + (std::string(word) == "least" ? "at least " : "at most ") +
                   std::to_string(n) + " values, found " + std::to_string(m) + " (" + usage + ") " + where;
        if (rest.find(" required ") != std::string::npos && rest.size() > 8 &&
            rest.compare(rest.size() - 8, 8, " missing") == 0)
            return option + ": expected a value (" + usage + ") " + where;
        const auto range = rest.find(" not in range ");
        if (rest.compare(0, 6, "Value ") == 0 && range != std::string::npos)
            return option + ": expected a number from " + rest.substr(range + 14) + ", found '" +
                   rest.substr(6, range - 6) + "' " + where;
    }
    if (what == "A subcommand is required") return "expected a command (" + names_of(cmd) + ") " + where;
    // A value outside an option's choices: "--svg-stage: weight not in {scores,...}".
    const auto not_in = what.find(" not in {");
    const auto colon = what.find(": ");
    if (dynamic_cast<const CLI::ValidationError*>(&e) && not_in != std::string::npos && colon != std::string::npos &&
        colon < not_in && what.back() == '}') {
        const std::string option = what.substr(0, colon), value = what.substr(colon + 2, not_in - colon - 2);
        std::vector<std::string> choices;
        std::stringstream list(what.substr(not_in + 9, what.size() - not_in - 10));
        std::string item, shown;
        while (std::getline(list, item, ',')) choices.push_back(item), shown += (shown.empty() ? "" : ", ") + item;
        return option + ": unknown value '" + value + "'" + did_you_mean(value, choices) +
               " (expected one of: " + shown + ")";
    }
    return what + " " + where;
}

std::string man_page(const CLI::App& app) {
    std::ostringstream s;
    s << ".TH ATTNSCOPE 1 \"\" \"" << roff(std::string("attnscope ") + kVersion) << "\" \"User Commands\"\n"
      << ".SH NAME\nattnscope \\- " << roff(app.get_description().substr(app.get_description().find(':') + 2))
      << "\n.SH SYNOPSIS\n";
    for (const CLI::App* c : commands_of(&app)) s << ".B " << roff(usage_of(c)) << "\n.br\n";
    s << ".SH DESCRIPTION\n" << roff(app.get_description()) << "\n.SH COMMANDS\n";
    for (const CLI::App* c : commands_of(&app)) {
        s << ".SS \"" << roff(usage_of(c)) << "\"\n" << roff(c->get_description()) << '\n';
        if (!c->get_footer().empty()) s << ".PP\n" << roff(c->get_footer()) << '\n';
        for (const Section& sec : sections_of(c)) {
            s << ".PP\n.B " << roff(sec.heading == "Options" ? "Other options" : sec.heading) << '\n';
            for (const CLI::Option* o : sec.options)
                s << ".TP\n.B " << roff(option_names(o)) << '\n' << roff(option_text(o)) << '\n';
        }
    }
    s << ".SH EXAMPLES\n" << roff(kExampleData) << '\n';
    std::vector<std::string> shown;            // a command's examples repeat some of the top level's
    std::vector<std::string> commands = {""};  // the top level's, then each command's in its order
    for (const CLI::App* c : commands_of(&app)) commands.push_back(c->get_name());
    for (const std::string& command : commands)
        for (const Example& e : examples_of(command)) {
            if (std::find(shown.begin(), shown.end(), e.line) != shown.end()) continue;
            shown.emplace_back(e.line);
            s << ".TP\n.B " << roff(std::string("attnscope ") + e.line) << '\n' << roff(e.what) << '\n';
        }
    s << ".SH EXIT STATUS\n0 success (check: every stage matches); 1 a runtime failure (check: a stage differs); "
      << "2 a usage error or bad input, said in one line on standard error.\n"
      << ".SH ENVIRONMENT\n.TP\n.B NO_COLOR\nAny value: no colour with \\-\\-color auto (\\-\\-color always still "
      << "colours).\n.TP\n.B COLUMNS\nThe width of the report when standard output is not a terminal.\n"
      << ".SH FILES\n.TP\n.I " << roff(kDataDir) << '\n'
      << roff("The example bundles (data/ in the source tree) and their README.md.") << '\n'
      << ".SH SEE ALSO\nThe README of attnscope, and attnscope COMMAND \\-\\-help.\n";
    return s.str();
}

std::string completion_script(const CLI::App& app, const std::string& shell) {
    if (shell == "bash") return bash_script(app);
    if (shell == "zsh") return zsh_script(app);
    throw UsageError("--completion " + shell + ": no script for this shell; expected bash or zsh");
}

}  // namespace attnscope::cli
