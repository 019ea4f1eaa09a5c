// attnscope — io layer, private: small JSON documents (config.json, a sharded
// checkpoint's index) read into nlohmann's tree, bounded like every other input. Not
// installed; src/io/ only.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "attnscope/base/errors.hpp"
#include "attnscope/io/array.hpp"
#include "attnscope/io/json_tree.hpp"
#include "bytes.hpp"

namespace attnscope::io_detail {

// What one value of the tree holds beyond its text: the node, a vector slot's worth of
// growth, an object's map entry.
template <class Json>
constexpr std::size_t kJsonNodeBytes = 2 * sizeof(Json) + 48;

// The JSON document `text` (from the file shown as `src` in messages) as nlohmann's tree
// (or ordered tree): what parse_json_tree (json_tree.hpp) runs, and `held`, when given,
// receives what the text and the tree hold.
// InputError, one line naming `src`: not JSON (nlohmann's message; a NUL byte, which its
// reader takes for the end of the text, is refused by its offset), nested more than
// kMaxJsonDepth, or, with `unique_keys`, a key repeated in one object (a JSON object keeps
// the last silently). MemoryLimitError once the text (in memory while it is read) and the
// tree together would hold more than `max_bytes`.
template <class Json>
Json parse_json_document(std::string_view text, const std::string& src, std::size_t max_bytes, bool unique_keys,
                         std::size_t* held_out = nullptr) {
    if (const auto nul = text.find('\0'); nul != std::string_view::npos)
        throw InputError(src + ": not valid JSON: a NUL byte at offset " + std::to_string(nul));
    using Event = typename Json::parse_event_t;
    std::vector<std::unordered_set<std::string>> keys;  // per open object, when unique_keys
    std::size_t held = text.size();
    const auto charge = [&](std::size_t n) {
        if (n > max_bytes || held > max_bytes - n)
            throw MemoryLimitError(src + ": its JSON needs more than " + memory_limit_of(max_bytes) + " to read");
        held += n;
    };
    const auto bound = [&](int depth, Event event, Json& j) {
        const bool opens = event == Event::object_start || event == Event::array_start;
        if (opens && depth >= kMaxJsonDepth)
            throw InputError(json_too_deep(src, kMaxJsonDepth) + "; not a JSON file attnscope reads");
        if (event == Event::key || event == Event::value || opens)
            charge(kJsonNodeBytes<Json> + (j.is_string() ? j.template get_ref<const std::string&>().size() : 0));
        if (!unique_keys) return true;
        if (event == Event::object_start) keys.emplace_back();
        if (event == Event::object_end) keys.pop_back();
        if (event == Event::key) {
            const std::string& k = j.template get_ref<const std::string&>();
            charge(k.size() + 48);
            if (!keys.back().insert(k).second)
                throw InputError(src + ": key '" + shown(k, 160) + "' appears twice in an object");
        }
        return true;
    };
    try {
        Json j = Json::parse(text.begin(), text.end(), bound);
        if (held_out) *held_out = held;
        return j;
    } catch (const nlohmann::json::exception& e) {
        throw InputError(src + ": not valid JSON: " + shown(e.what(), 200));
    }
}

}  // namespace attnscope::io_detail
