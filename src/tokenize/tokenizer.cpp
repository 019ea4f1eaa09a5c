// The tokenizer whole: tokenizer.json (or the older vocabulary files) read into a
// Pipeline, and the library's encode and decode over it.
#include <sys/stat.h>

#include <algorithm>
#include <fstream>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/text.hpp"
#include "attnscope/io/read.hpp"
#include "internal.hpp"

namespace attnscope {
namespace tok {
namespace {

void read_added(const Node& root, Pipeline& p) {
    const auto list = root.find("added_tokens");
    if (!list) return;
    list->expect_array();
    for (std::size_t i = 0; i < list->size(); ++i) {
        const Node a = list->at(i);
        AddedToken t;
        const Node id = a.at("id");
        t.id = id.id();
        if (t.id >= kMaxVocab)
            id.fail("the id " + std::to_string(t.id) + " is past the largest id attnscope takes (2^26 - 1)");
        t.content = a.at("content").str();
        if (t.content.empty()) continue;  // the library ignores an empty added token
        t.single_word = a.bool_or("single_word", false);
        t.lstrip = a.bool_or("lstrip", false);
        t.rstrip = a.bool_or("rstrip", false);
        t.special = a.bool_or("special", false);
        t.normalized = a.bool_or("normalized", !t.special);
        p.added_by_id[t.id] = p.added.tokens().size();
        p.added.add(std::move(t));
    }
}

// Whether a component of `j` is {"type": "ByteLevel"} (pieces are then byte-level characters).
bool has_byte_level(const nlohmann::json& j) {
    if (j.is_object()) {
        const auto t = j.find("type");
        if (t != j.end() && *t == "ByteLevel") return true;
    }
    if (j.is_object() || j.is_array())
        for (const auto& v : j)
            if (has_byte_level(v)) return true;
    return false;
}

// Every token the post-processor adds must be in the vocabulary (the model's or an added
// token): its id is spelled when the tokens are shown or decoded.
void check_post_processor(const Pipeline& p, const Node& root) {
    std::vector<Token> specials;
    p.post_processor(specials, true);
    for (const Token& t : specials)
        if (!p.model->token(t.id) && p.added_by_id.count(t.id) == 0)
            root.at("post_processor")
                .fail("the special token \"" + escape_control(clip_fragment(t.piece, 40)) + "\" has the id " +
                      std::to_string(t.id) + ", which is not in the vocabulary");
}

std::unique_ptr<Model> make_model(const Node& m, Budget& budget) {
    m.expect_object();
    std::string type = m.str_or("type", "");
    if (type.empty()) type = m.find("merges") ? "BPE" : m.find("max_input_chars_per_word") ? "WordPiece" : "";
    if (type == "BPE") return make_bpe(m, budget);
    if (type == "WordPiece") return make_wordpiece(m, budget);
    if (type.empty()) m.fail("the model has no \"type\"");
    m.at("type").fail("the model type \"" + escape_control(type) +
                      "\" is not supported (attnscope reads BPE and WordPiece models)");
}

std::shared_ptr<Pipeline> build(const nlohmann::json& j, const std::string& origin, Budget& budget) {
    const Node root(j, "", origin);
    root.expect_object();
    auto p = std::make_shared<Pipeline>();
    p->source = origin;
    p->model = make_model(root.at("model"), budget);
    const auto none = nlohmann::json();
    p->normalizer = make_normalizer(root.find("normalizer").value_or(Node(none, "normalizer", origin)));
    p->pre_tokenizer = make_pre_tokenizer(root.find("pre_tokenizer").value_or(Node(none, "pre_tokenizer", origin)));
    p->post_processor = make_post_processor(root.find("post_processor").value_or(Node(none, "post_processor", origin)));
    if (const auto d = root.find("decoder")) p->decoder = make_decoder(*d), p->has_decoder = true;
    read_added(root, *p);
    check_post_processor(*p, root);
    p->added.build(p->normalizer, budget);
    for (const char* key : {"pre_tokenizer", "decoder"})
        if (j.contains(key) && has_byte_level(j[key])) p->byte_level = true;
    p->budget = budget;
    return p;
}

// One piece of text that is not an added token: normalized, cut at the normalized added
// tokens, pre-tokenized, and each word cut by the model.
void encode_text(const Pipeline& p, Text text, Budget& budget, std::vector<Token>& out) {
    p.normalizer(text, budget);
    std::vector<Piece> pieces;
    for (auto& [part, index] : p.added.split(std::move(text), true)) {
        if (index >= 0) {
            const AddedToken& a = p.added.tokens()[std::size_t(index)];
            out.push_back({a.id, a.content, part.original(0, part.text.size()), a.special});
            continue;
        }
        p.pre_tokenizer(std::move(part), [&](Text&& w) {
            pieces.clear();
            p.model->tokenize(w.text, pieces);
            for (const Piece& s : pieces)
                out.push_back({s.id, *p.model->token(s.id), w.original(s.start, s.end), false});
        });
    }
}

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
    std::size_t size = 0;
    for (const std::string& part : parts) size += part.size() + sep.size();
    std::string out;
    out.reserve(size);
    for (std::size_t i = 0; i < parts.size(); ++i) (i ? out.append(sep) : out).append(parts[i]);
    return out;
}

bool is_dir(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool is_file(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && !S_ISDIR(st.st_mode);
}

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> out;
    std::size_t at = 0;
    while (at < text.size()) {
        std::size_t e = text.find('\n', at);
        if (e == std::string::npos) e = text.size();
        std::string line = text.substr(at, e - at);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        out.push_back(std::move(line));
        at = e + 1;
    }
    return out;
}

// GPT-2's vocab.json + merges.txt as the tokenizer.json the library would make of them.
nlohmann::json gpt2_files(const std::string& dir, std::size_t max_bytes, Budget& budget) {
    const std::string vocab_path = dir + "/vocab.json", merges_path = dir + "/merges.txt";
    const std::string vocab_text = read_file(vocab_path, max_bytes);
    std::size_t used = 0;
    nlohmann::json vocab = parse_json_bounded(vocab_text, vocab_path, max_bytes, &used);
    budget.add(used);
    nlohmann::json merges = nlohmann::json::array();
    for (const std::string& line : lines_of(read_file(merges_path, max_bytes))) {
        if (line.empty() || line.rfind("#version", 0) == 0) continue;
        budget.add(line.size() + 96);
        merges.push_back(line);
    }
    nlohmann::json j = {{"model", {{"type", "BPE"}, {"vocab", std::move(vocab)}, {"merges", std::move(merges)}}},
                        {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
                        {"decoder", {{"type", "ByteLevel"}}}};
    const auto& v = j["model"]["vocab"];
    if (v.is_object() && v.contains("<|endoftext|>") && v["<|endoftext|>"].is_number_unsigned())
        j["added_tokens"] = {{{"id", v["<|endoftext|>"]}, {"content", "<|endoftext|>"}, {"special", true}}};
    return j;
}

// BERT's vocab.txt (one token a line, its id the line number) as the library's BERT tokenizer.
nlohmann::json bert_file(const std::string& dir, std::size_t max_bytes, Budget& budget) {
    nlohmann::json vocab = nlohmann::json::object();
    std::uint32_t id = 0;
    for (const std::string& line : lines_of(read_file(dir + "/vocab.txt", max_bytes))) {
        budget.add(2 * line.size() + 96);
        vocab[line] = id++;
    }
    bool lower = true;
    if (is_file(dir + "/tokenizer_config.json")) {
        const nlohmann::json c = parse_json_bounded(read_file(dir + "/tokenizer_config.json", max_bytes),
                                                    dir + "/tokenizer_config.json", max_bytes);
        if (c.is_object() && c.contains("do_lower_case") && c["do_lower_case"].is_boolean()) lower = c["do_lower_case"];
    }
    nlohmann::json added = nlohmann::json::array();
    for (const char* s : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"})
        if (vocab.contains(s)) added.push_back({{"id", vocab[s]}, {"content", s}, {"special", true}});
    nlohmann::json j = {{"model", {{"type", "WordPiece"}, {"vocab", vocab}, {"unk_token", "[UNK]"}}},
                        {"normalizer", {{"type", "BertNormalizer"}, {"lowercase", lower}}},
                        {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
                        {"decoder", {{"type", "WordPiece"}}},
                        {"added_tokens", added}};
    if (vocab.contains("[CLS]") && vocab.contains("[SEP]"))
        j["post_processor"] = {
            {"type", "BertProcessing"}, {"cls", {"[CLS]", vocab["[CLS]"]}}, {"sep", {"[SEP]", vocab["[SEP]"]}}};
    return j;
}

// tokenizer_config.json beside the tokenizer, when there is one: whether decode() tidies
// spaces as transformers does ("clean_up_tokenization_spaces": true).
void read_config(const std::string& dir, std::size_t max_bytes, Pipeline& p) {
    const std::string path = dir + "/tokenizer_config.json";
    if (!is_file(path)) return;
    const nlohmann::json c = parse_json_bounded(read_file(path, max_bytes), path, max_bytes);
    const Node root(c, "", path);
    root.expect_object();
    p.clean_up_spaces = root.bool_or("clean_up_tokenization_spaces", false);
}

std::string dir_of(const std::string& file) {
    const auto slash = file.rfind('/');
    return slash == std::string::npos ? "." : slash == 0 ? "/" : file.substr(0, slash);
}

}  // namespace
}  // namespace tok

Encoding Tokenizer::encode(std::string_view text, bool add_special) const {
    const tok::Pipeline& p = *p_;
    if (const std::size_t bad = invalid_utf8_at(text); bad != std::string_view::npos)
        throw InputError("text: invalid UTF-8 at byte " + std::to_string(bad));
    if (text.size() > 0xFFFFFFF0u) throw InputError("text: longer than 4 GiB");
    tok::Budget need = p.budget;
    need.origin = "text of " + std::to_string(text.size()) + " bytes";
    need.add(text.size() * tok::kEncodeBytesPerByte);
    // 1) added tokens with "normalized": false, on the raw text; 2) the rest, piece by piece
    std::vector<tok::Token> tokens;
    tokens.reserve(text.size() / 2 + 4);  // address space only: English has ~4 bytes a token
    for (auto& [part, index] : p.added.split(tok::text_of(text), false)) {
        if (index < 0) {
            tok::encode_text(p, std::move(part), need, tokens);
            continue;
        }
        const tok::AddedToken& a = p.added.tokens()[std::size_t(index)];
        tokens.push_back({a.id, a.content, part.original(0, part.text.size()), a.special});
    }
    // 3) the post-processor's special tokens
    p.post_processor(tokens, add_special);
    Encoding e;
    e.ids.reserve(tokens.size()), e.pieces.reserve(tokens.size()), e.offsets.reserve(tokens.size());
    e.special.reserve(tokens.size());
    for (tok::Token& t : tokens) {
        e.ids.push_back(t.id);
        e.pieces.push_back(std::move(t.piece));
        e.offsets.push_back(t.offsets ? std::optional<ByteSpan>(ByteSpan{t.offsets->start, t.offsets->end})
                                      : std::nullopt);
        e.special.push_back(t.special);
    }
    return e;
}

std::optional<std::string> Tokenizer::piece(std::uint32_t id) const {
    if (const auto it = p_->added_by_id.find(id); it != p_->added_by_id.end())
        return p_->added.tokens()[it->second].content;
    const std::string* t = p_->model->token(id);
    return t ? std::optional<std::string>(*t) : std::nullopt;
}

std::string Tokenizer::decode(const std::vector<std::uint32_t>& ids, bool skip_special) const {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (std::uint32_t id : ids) {
        const std::string* s = p_->model->token(id);
        if (const auto it = p_->added_by_id.find(id); it != p_->added_by_id.end()) {
            const tok::AddedToken& a = p_->added.tokens()[it->second];
            if (skip_special && a.special) continue;
            s = &a.content;
        }
        if (!s)
            throw InputError(escape_control(p_->source) + ": the id " + std::to_string(id) +
                             " is not in the vocabulary (ids 0.." + std::to_string(vocab_size() - 1) + ")");
        tokens.push_back(*s);
    }
    if (p_->has_decoder) p_->decoder(tokens);
    const std::string text = tok::join(tokens, p_->has_decoder ? "" : " ");
    return p_->clean_up_spaces ? tok::clean_up_tokenization(text) : text;
}

std::string Tokenizer::readable_piece(std::uint32_t id) const {
    const std::string s = piece(id).value_or("");
    if (!p_->byte_level) return escape_control(s);
    std::string bytes;
    for (std::size_t k = 0, n = 0; k < s.size(); k += n) {
        const int b = tok::char_byte(tok::decode_at(s, k, n));
        if (b < 0) return escape_control(s);  // not byte-level characters (an added token)
        bytes += b == ' ' ? std::string("\xE2\x90\xA3") : std::string(1, char(b));  // ␣
    }
    return escape_control(bytes);
}

std::size_t Tokenizer::vocab_size() const {
    std::size_t n = p_->model->vocab().tokens.size();
    for (const auto& t : p_->added.tokens()) n = std::max<std::size_t>(n, std::size_t(t.id) + 1);
    return n;
}

const std::string& Tokenizer::source() const { return p_->source; }

Tokenizer parse_tokenizer_json(std::string_view json, const std::string& origin, std::size_t max_bytes) {
    tok::Budget budget{0, max_bytes, origin};
    const nlohmann::json j = tok::parse_json_bounded(json, origin, max_bytes, &budget.used);
    return Tokenizer(tok::build(j, origin, budget));
}

Tokenizer load_tokenizer(const std::string& path, std::size_t max_bytes) {
    std::string file = path;
    if (tok::is_dir(path)) {
        file = path + "/tokenizer.json";
        tok::Budget budget{0, max_bytes, path};
        if (!tok::is_file(file) && tok::is_file(path + "/vocab.json") && tok::is_file(path + "/merges.txt")) {
            const nlohmann::json j = tok::gpt2_files(path, max_bytes, budget);
            const std::shared_ptr<tok::Pipeline> p = tok::build(j, path + "/vocab.json + merges.txt", budget);
            tok::read_config(path, max_bytes, *p);
            return Tokenizer(p);
        }
        if (!tok::is_file(file) && tok::is_file(path + "/vocab.txt")) {
            const nlohmann::json j = tok::bert_file(path, max_bytes, budget);
            return Tokenizer(tok::build(j, path + "/vocab.txt", budget));
        }
        if (!tok::is_file(file))
            throw InputError(escape_control(path) +
                             ": no tokenizer here (expected tokenizer.json, vocab.json + merges.txt, or vocab.txt)");
    }
    const FileBytes bytes = map_file(file, max_bytes);
    tok::Budget budget{0, max_bytes, file};
    const nlohmann::json j = tok::parse_json_bounded(bytes.bytes, file, max_bytes, &budget.used);
    const std::shared_ptr<tok::Pipeline> p = tok::build(j, file, budget);
    tok::read_config(tok::dir_of(file), max_bytes, *p);
    return Tokenizer(p);
}

}  // namespace attnscope
