// attnscope — io layer: the one reader of JSON documents into nlohmann's tree
// (tokenizer.json, config.json, tokenizer_config.json, vocab.json, a sharded checkpoint's
// index), under one depth bound and the memory limit. A bundle's JSON is read by its own
// streaming reader (read.hpp), under the same depth message.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace attnscope {

// Objects and arrays nested in one another at most this deep. nlohmann's dump() and
// comparisons recurse: a document nested 100,000 deep (200 KB of brackets) overflows the
// stack. Real configs, indexes and tokenizers nest up to eight levels.
constexpr int kMaxJsonDepth = 64;

// "SRC: objects and arrays nested more than N deep": the refusal of every JSON reader.
std::string json_too_deep(const std::string& src, std::size_t depth);

// The JSON document `text` (from the file shown as `src`, escaped, in messages) as
// nlohmann's tree. InputError, one line naming `src`: not JSON, a NUL byte, nested more
// than kMaxJsonDepth. MemoryLimitError once the text and the tree together would hold
// more than `max_bytes`; `held`, when given, receives what they hold.
nlohmann::json parse_json_tree(std::string_view text, const std::string& src, std::size_t max_bytes,
                               std::size_t* held = nullptr);

}  // namespace attnscope
