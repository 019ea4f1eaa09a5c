// tokenizer.json read into a document tree under two bounds (nesting depth, memory), and
// typed access to its values whose messages name the file and the key path.
#include <limits>
#include <string>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/text.hpp"
#include "internal.hpp"

namespace attnscope::tok {
namespace {

constexpr std::size_t kMaxDepth = 128;
// What one value of the tree costs at least, besides its strings: the json node, the
// vector slot or map node that holds it.
constexpr std::size_t kNodeBytes = 96;

// Refuses nesting deeper than kMaxDepth in one pass over the bytes (strings skipped), so
// that no parser or destructor recurses that deep.
void check_depth(std::string_view text, const std::string& origin) {
    std::size_t depth = 0;
    bool in_string = false;
    for (std::size_t k = 0; k < text.size(); ++k) {
        const char c = text[k];
        if (in_string) {
            if (c == '\\')
                ++k;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > kMaxDepth)
                throw InputError(escape_control(origin) + ": JSON nested deeper than " + std::to_string(kMaxDepth) +
                                 " levels at byte " + std::to_string(k));
        } else if ((c == ']' || c == '}') && depth > 0) {
            --depth;
        }
    }
}

std::string mib(std::size_t b) { return std::to_string((b + (1u << 20) - 1) >> 20) + " MiB"; }

}  // namespace

void Budget::add(std::size_t bytes) {
    used += bytes;
    if (used > max)
        throw MemoryLimitError(escape_control(origin) + ": the tokenizer needs more than the memory limit of " +
                               mib(max) + " ({max_memory})");
}

nlohmann::json parse_json_bounded(std::string_view text, const std::string& origin, std::size_t max_bytes,
                                  std::size_t* used_out) {
    check_depth(text, origin);
    std::size_t used = text.size();  // the text is in memory while it is parsed
    auto bound = [&](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        used += kNodeBytes;
        if (event == nlohmann::json::parse_event_t::key || parsed.is_string())
            used += parsed.is_string() ? parsed.get_ref<const std::string&>().size() : 0;
        if (used > max_bytes)
            throw MemoryLimitError(escape_control(origin) + ": the tokenizer needs more than the memory limit of " +
                                   mib(max_bytes) + " ({max_memory})");
        return true;
    };
    try {
        nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), bound);
        if (used_out) *used_out = used;
        return j;
    } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for 1e400
        std::string what = e.what();
        const auto colon = what.find("parse error");
        if (colon != std::string::npos) what = what.substr(colon);
        throw InputError(escape_control(origin) + ": invalid JSON: " + escape_control(what));
    }
}

std::string json_kind(const nlohmann::json& j) {
    switch (j.type()) {
        case nlohmann::json::value_t::null:
            return "null";
        case nlohmann::json::value_t::object:
            return "an object";
        case nlohmann::json::value_t::array:
            return "an array";
        case nlohmann::json::value_t::string:
            return "the string \"" + escape_control(clip_fragment(j.get_ref<const std::string&>(), 40)) + "\"";
        case nlohmann::json::value_t::boolean:
            return j.get<bool>() ? "true" : "false";
        case nlohmann::json::value_t::number_float:
            return "the number " + j.dump();
        case nlohmann::json::value_t::number_integer:
        case nlohmann::json::value_t::number_unsigned:
            return "the integer " + j.dump();
        case nlohmann::json::value_t::binary:
        case nlohmann::json::value_t::discarded:
            break;
    }
    return "an unknown value";
}

void Node::fail(const std::string& what) const {
    throw InputError(escape_control(*file_) + ": " + escape_control(path_.empty() ? "(top level)" : path_) + ": " +
                     what);
}

void Node::expect_object() const {
    if (!j_->is_object()) fail("expected an object, found " + json_kind(*j_));
}

void Node::expect_array() const {
    if (!j_->is_array()) fail("expected an array, found " + json_kind(*j_));
}

std::optional<Node> Node::find(const std::string& key) const {
    expect_object();
    const auto it = j_->find(key);
    if (it == j_->end() || it->is_null()) return std::nullopt;
    return Node(*it, path_.empty() ? key : path_ + "." + key, *file_);
}

Node Node::at(const std::string& key) const {
    auto n = find(key);
    if (!n) fail("the key \"" + key + "\" is missing");
    return *n;
}

Node Node::at(std::size_t i) const {
    expect_array();
    return Node((*j_)[i], path_ + "[" + std::to_string(i) + "]", *file_);
}

std::size_t Node::size() const {
    if (!j_->is_array() && !j_->is_object()) fail("expected an array or object, found " + json_kind(*j_));
    return j_->size();
}

std::string Node::str() const {
    if (!j_->is_string()) fail("expected a string, found " + json_kind(*j_));
    return j_->get<std::string>();
}

bool Node::boolean() const {
    if (!j_->is_boolean()) fail("expected true or false, found " + json_kind(*j_));
    return j_->get<bool>();
}

std::uint64_t Node::count() const {
    if (!j_->is_number_unsigned() && !(j_->is_number_integer() && j_->get<std::int64_t>() >= 0))
        fail("expected a non-negative integer, found " + json_kind(*j_));
    return j_->get<std::uint64_t>();
}

std::uint32_t Node::id() const {
    const std::uint64_t v = count();
    if (v > std::uint64_t(std::numeric_limits<std::int32_t>::max())) fail("a token id past 2^31-1: " + j_->dump());
    return static_cast<std::uint32_t>(v);
}

std::string Node::str_or(const std::string& key, const std::string& fallback) const {
    const auto n = find(key);
    return n ? n->str() : fallback;
}

bool Node::bool_or(const std::string& key, bool fallback) const {
    const auto n = find(key);
    return n ? n->boolean() : fallback;
}

}  // namespace attnscope::tok
