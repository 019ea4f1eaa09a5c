// `attnscope tokens --model PATH (--text S | --text-file F | --jsonl-input F | --decode IDS)
// [--json] [--no-special-tokens]`: a model's own tokenizer (tokenize layer) on a text, or
// ids back to text. Exit 0, or 2 for bad input (with --jsonl-input, when any line failed).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/json_writer.hpp"
#include "attnscope/base/text.hpp"
#include "attnscope/io/read.hpp"
#include "attnscope/tokenize/tokenizer.hpp"
#include "help.hpp"
#include "model_text.hpp"
#include "run.hpp"
#include "subcommand.hpp"

namespace attnscope::cli {
namespace {

constexpr const char* kSchema = "attnscope.tokens/1";

struct TokensArgs {
    std::string model, text, text_file, jsonl_input, decode, max_memory;
    bool json = false, no_special = false, timings = false, ids_only = false;
    CLI::Option *text_opt = nullptr, *file_opt = nullptr, *jsonl_opt = nullptr, *decode_opt = nullptr;
};

// `v` in decimal, right-aligned in `width` columns (0: as it is). Its digits are made from
// the last: a 1 MB text has a million numbers to write.
void put_right(std::string& s, std::uint64_t v, std::size_t width) {
    char digits[20];
    char* first = std::end(digits);
    do *--first = char('0' + v % 10);
    while ((v /= 10) != 0);
    const auto n = std::size_t(std::end(digits) - first);
    if (n < width) s.append(width - n, ' ');
    s.append(first, n);
}

// Each id's first members as JSON (`"id":464,"piece":"\u0120the","text":"␣the"`), written
// once per id by a JsonWriter: a 1 MB text has ~340k tokens but a few thousand distinct
// ids, and these members (the escaped piece most of all) are most of a token's cost.
// Kept by id in a map: what it holds grows with the distinct ids of the text, never with
// the largest id of the vocabulary (an added token's id may be 2^26 - 1).
class TokenHeads {
   public:
    explicit TokenHeads(const Tokenizer& t) : t_(t) {}
    const std::string& of(std::uint32_t id, const std::string& piece) {
        Head& h = heads_[id];
        if (h.json.empty() || h.piece != piece) h.piece = piece, render(h.json, id, piece);
        return h.json;
    }

   private:
    void render(std::string& json, std::uint32_t id, const std::string& piece) const {
        json.clear();
        JsonWriter w(json);
        w.begin_object().key("id").value(id).key("piece").value(piece).key("text").value(t_.readable_piece(id));
        json.erase(0, 1);  // the members without the object's '{'
    }
    struct Head {
        std::string piece, json;  // the piece last rendered, its members
    };
    const Tokenizer& t_;
    std::unordered_map<std::uint32_t, Head> heads_;
};

// A token's members as JSON into `s` (emptied): its id's (`head`), then its bytes and
// special mark, `,"start":1,"end":5,"special":false`, as JsonWriter spells them (numbers
// in decimal, plain ASCII keys), with no writer call per member.
const std::string& token_members(std::string& s, const std::string& head, const std::optional<ByteSpan>& at,
                                 bool special) {
    using namespace std::string_view_literals;  // no strlen per member
    s.assign(head);
    if (at) {  // null for an added special token
        s += ",\"start\":"sv;
        put_right(s, at->start, 0);
        s += ",\"end\":"sv;
        put_right(s, at->end, 0);
    } else {
        s += ",\"start\":null,\"end\":null"sv;
    }
    s += special ? ",\"special\":true"sv : ",\"special\":false"sv;
    return s;
}

// One document (attnscope.tokens/1) on one line: the ids, each token's piece and bytes, the
// decoded text. Written into a string handed to `out` a megabyte at a time: a 1 MB text
// has ~340k tokens, and a stream call per value would cost more than tokenizing them.
void write_encoding(std::ostream& out, const Tokenizer& t, const Encoding& e, const std::string& model) {
    std::string text, members;
    const auto hand_on = [&](std::size_t above) {
        if (text.size() <= above) return;
        out.write(text.data(), std::streamsize(text.size()));
        text.clear();
    };
    JsonWriter w(text);
    w.begin_object().key("schema").value(kSchema).key("model").value(model).key("ids").list(e.ids);
    w.key("tokens").begin_array();
    TokenHeads heads(t);
    for (std::size_t i = 0; i < e.size(); ++i) {
        const std::string& head = heads.of(e.ids[i], e.pieces[i]);
        w.begin_object().members(token_members(members, head, e.offsets[i], e.special[i])).end_object();
        hand_on(std::size_t(1) << 20);
    }
    w.end_array().key("decoded").value(t.decode(e.ids, false)).end_object();
    text += '\n';
    hand_on(0);
}

// `s` padded with spaces to `width` terminal columns.
std::string padded(const std::string& s, std::size_t width) {
    const std::size_t w = display_width(s);
    return s + std::string(w < width ? width - w : 0, ' ');
}

// Text for a person, each line escaped apart (newlines kept, everything else a terminal
// would act on made visible).
std::string shown_text(const std::string& s) {
    std::string out;
    std::size_t at = 0;
    for (std::size_t e = s.find('\n');; e = s.find('\n', at)) {
        out += escape_control(s.substr(at, e == std::string::npos ? std::string::npos : e - at));
        if (e == std::string::npos) break;
        out += '\n';
        at = e + 1;
    }
    return out;
}

// Each id's readable piece and its display width, and its cells of the table (the id and
// the piece padded to the piece column's width), made once per id: a 1 MB text has ~340k
// tokens but a few thousand distinct ids. Kept by id in a map, as TokenHeads.
class ShownPieces {
   public:
    explicit ShownPieces(const Tokenizer& t) : t_(t) {}
    const std::string& text(std::uint32_t id) { return make(id).text; }
    std::size_t width(std::uint32_t id) { return make(id).width; }
    // "       464  ␣the    " (the id in 10 columns, the piece in `column`, two spaces after
    // each); `column` is the same for every call of one table.
    const std::string& cells(std::uint32_t id, std::size_t column) {
        Shown& s = make(id);
        if (s.cells.empty()) {
            put_right(s.cells, id, 10);
            s.cells.append("  ").append(s.text).append(column - std::min(column, s.width), ' ').append("  ");
        }
        return s.cells;
    }

   private:
    struct Shown {
        std::string text, cells;
        std::size_t width = 0;
    };
    Shown& make(std::uint32_t id) {
        const auto [it, fresh] = shown_.try_emplace(id);
        if (fresh) {
            it->second.text = t_.readable_piece(id);
            it->second.width = display_width(it->second.text);
        }
        return it->second;
    }
    const Tokenizer& t_;
    std::unordered_map<std::uint32_t, Shown> shown_;
};

// The table for a person, built in one string and written at once: a 1 MB text has
// ~340k rows, so a row is appended field by field with no formatting library and each
// id's cells are made once.
void write_text(std::ostream& out, const Tokenizer& t, const Encoding& e) {
    ShownPieces shown(t);
    std::size_t width = 5;
    for (std::uint32_t id : e.ids) width = std::max(width, std::min<std::size_t>(shown.width(id), 40));
    std::string s = std::to_string(e.size()) + " tokens (" + escape_control(t.source()) + ")\n";
    s += "index        id  " + padded("piece", width) + "  bytes\n";
    s.reserve(s.size() + e.size() * (width + 32));
    for (std::size_t i = 0; i < e.size(); ++i) {
        put_right(s, i, 5);
        s += shown.cells(e.ids[i], width);
        const std::size_t at = s.size();
        if (e.offsets[i]) {
            put_right(s, e.offsets[i]->start, 0);
            s += "..";
            put_right(s, e.offsets[i]->end, 0);
        } else {
            s += '-';
        }
        if (e.special[i]) s.append(12 - std::min<std::size_t>(12, s.size() - at), ' ') += "  special";
        s += '\n';
    }
    s += "decoded: " + shown_text(t.decode(e.ids, false)) + '\n';
    out.write(s.data(), std::streamsize(s.size()));
}

// The ids alone, separated by commas on one line: what `--decode` and `run --tokens` read.
void write_ids(std::ostream& out, const Encoding& e) {
    std::string s;
    s.reserve(e.size() * 7 + 1);
    for (std::size_t i = 0; i < e.size(); ++i) {
        if (i) s += ',';
        put_right(s, e.ids[i], 0);
    }
    s += '\n';
    out.write(s.data(), std::streamsize(s.size()));
}

int run_jsonl(const TokensArgs& a, const Tokenizer& t, std::size_t limit) {
    const std::string all = read_file(a.jsonl_input, limit);
    bool failed = false;
    std::size_t line_no = 0;
    for (std::size_t at = 0; at < all.size();) {
        std::size_t e = all.find('\n', at);
        if (e == std::string::npos) e = all.size();
        const std::string line = all.substr(at, e - at);
        at = e + 1;
        ++line_no;
        try {
            const nlohmann::json j = nlohmann::json::parse(line);
            if (!j.is_string()) throw InputError("expected a JSON string, found " + std::string(j.type_name()));
            write_encoding(std::cout, t, t.encode(j.get<std::string>(), !a.no_special), a.model);
        } catch (const std::exception& ex) {  // nlohmann's parse errors, InputError
            if (!dynamic_cast<const InputError*>(&ex) && !dynamic_cast<const nlohmann::json::exception*>(&ex)) throw;
            failed = true;
            const std::string what = a.jsonl_input + ":" + std::to_string(line_no) + ": " + ex.what();
            JsonWriter(std::cout).begin_object().key("schema").value(kSchema).key("error").value(what).end_object();
            std::cout << '\n';
        }
    }
    return failed ? 2 : 0;
}

int run_tokens(const TokensArgs& a) {
    const int given = int(a.text_opt->count() > 0) + int(a.file_opt->count() > 0) + int(a.jsonl_opt->count() > 0) +
                      int(a.decode_opt->count() > 0);
    if (given != 1) throw UsageError("tokens: give one of --text, --text-file, --jsonl-input or --decode");
    RunOptions limits;
    limits.max_memory = a.max_memory;
    const std::size_t limit = memory_limit(limits);
    using Clock = std::chrono::steady_clock;
    const auto since = [](Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); };
    const auto t0 = Clock::now();
    const Tokenizer t = load_tokenizer(a.model, limit);
    if (a.jsonl_opt->count()) return run_jsonl(a, t, limit);
    if (a.decode_opt->count()) {
        const auto ids = parse_ids(a.decode, "--decode");
        const std::string text = t.decode(ids, a.no_special);
        if (a.json) {
            JsonWriter w(std::cout);
            w.begin_object().key("schema").value(kSchema).key("model").value(a.model).key("ids").list(ids);
            w.key("decoded").value(text).end_object();
            std::cout << '\n';
        } else {
            std::cout << shown_text(text) << '\n';
        }
        return 0;
    }
    std::string text = a.text;
    std::string origin = "--text";
    if (a.file_opt->count()) text = read_file(a.text_file, limit), origin = a.text_file;
    if (const std::size_t bad = invalid_utf8_at(text); bad != std::string::npos)
        throw InputError(escape_control(origin) + ": invalid UTF-8 at byte " + std::to_string(bad) +
                         " (the text must be UTF-8)");
    const double load_s = since(t0);
    const auto t1 = Clock::now();
    const Encoding e = t.encode(text, !a.no_special);
    const double compute_s = since(t1);
    const auto t2 = Clock::now();
    if (a.ids_only)
        write_ids(std::cout, e);
    else if (a.json)
        write_encoding(std::cout, t, e, a.model);
    else
        write_text(std::cout, t, e);
    std::cout.flush();
    if (!std::cout) throw RuntimeFailure("<stdout>: cannot write the tokens");
    if (a.timings) {  // the line `run --timings` prints; scripts/bench --tokenize reads it
        char line[128];
        std::snprintf(line, sizeof line, "attnscope: timings: load=%.6f compute=%.6f output=%.6f\n", load_s, compute_s,
                      since(t2));
        std::cerr << line;
    }
    return 0;
}

}  // namespace

Subcommand setup_tokens_command(CLI::App& parent) {
    auto a = std::make_shared<TokensArgs>();
    CLI::App* cmd = parent.add_subcommand(
        "tokens", "Tokenize a text with a model's own tokenizer (tokenizer.json), or turn ids back into text");
    cmd->add_option("--model", a->model,
                    "The model's folder (tokenizer.json, else vocab.json + merges.txt, else vocab.txt) or a "
                    "tokenizer.json")
        ->required()
        ->group(kInputs);
    a->text_opt = cmd->add_option("--text", a->text, "The text to tokenize")->group(kInputs);
    a->file_opt =
        cmd->add_option("--text-file", a->text_file, "A file whose bytes (UTF-8) are the text")->group(kInputs);
    a->jsonl_opt = cmd->add_option("--jsonl-input", a->jsonl_input,
                                   "A file of JSON strings, one a line: one JSON document per line out")
                       ->group(kInputs);
    a->decode_opt =
        cmd->add_option("--decode", a->decode, "Ids separated by commas (464,3797,...) to turn back into text")
            ->group(kInputs);
    auto* json =
        cmd->add_flag("--json", a->json, "Print one JSON document (ids, tokens with pieces and byte offsets, decoded)")
            ->group(kOutputs);
    cmd->add_flag("--ids-only", a->ids_only,
                  "Print the ids alone, separated by commas on one line (as --decode and run --tokens read them)")
        ->group(kOutputs)
        ->excludes(json)
        ->excludes(a->jsonl_opt)
        ->excludes(a->decode_opt);
    cmd->add_flag("--no-special-tokens", a->no_special,
                  "Encode without the post-processor's special tokens; decode without any special token")
        ->group(kOutputs);
    cmd->add_flag("--timings", a->timings,
                  "Print the seconds spent loading (tokenizer and text), tokenizing and writing to stderr")
        ->group(kOutputs);
    cmd->add_option("--max-memory", a->max_memory,
                    "Refuse tokenizers and texts needing more memory than this (e.g. 8G, 512M; default 3/4 of "
                    "physical memory)")
        ->group(kLimits);
    later_options_replace(cmd);
    return {cmd, [a] { return run_tokens(*a); }};
}

}  // namespace attnscope::cli
