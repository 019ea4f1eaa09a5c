// tokenizer.json read into a document tree by the io layer's JSON reader (its depth and
// memory bounds), and typed access to its values whose messages name the file and the
// key path.
#include <limits>
#include <string>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/text.hpp"
#include "attnscope/io/json_tree.hpp"
#include "internal.hpp"

namespace attnscope::tok {
namespace {

std::string mib(std::size_t b) { return std::to_string((b + (1u << 20) - 1) >> 20) + " MiB"; }

}  // namespace

void Budget::add(std::size_t bytes) {
    used += bytes;
    if (used > max)
        throw MemoryLimitError(escape_control(origin) + ": the tokenizer needs more than the memory limit of " +
                               mib(max) + " ({max_memory})");
}

void Budget::add(std::size_t bytes, const std::string& what) {
    if (bytes > max || used > max - bytes)
        throw MemoryLimitError(what + " past the memory limit of " + mib(max) + " ({max_memory})");
    used += bytes;
}

nlohmann::json parse_json_bounded(std::string_view text, const std::string& origin, std::size_t max_bytes,
                                  std::size_t* used) {
    return parse_json_tree(text, escape_control(origin), max_bytes, used);
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
