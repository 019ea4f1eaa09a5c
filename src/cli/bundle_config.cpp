// The run options a bundle carries (its `config` record, docs/usage.md, "Bundles"),
// applied under the command line's: each key is parsed as its flag would be,
// unless the command line gave that flag; what came from where is recorded for reports.
#include <algorithm>
#include <string>
#include <vector>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/suggest.hpp"
#include "attnscope/base/text.hpp"
#include "help.hpp"
#include "run.hpp"

namespace attnscope::cli {
namespace {

using Kind = ConfigValue::Kind;

// The keys a config record may hold and the kind of their value (`scale` also takes the
// string "none"); each stands for the flag of its field (kv_heads: --kv-heads). Model and
// mask options only: outputs, views and experiments belong to a command, not to the bundle.
struct ConfigKey {
    const char* key;
    Kind kind;
    std::string flag() const {
        std::string f = std::string("--") + key;
        std::replace(f.begin(), f.end(), '_', '-');
        return f;
    }
};
constexpr ConfigKey kConfigKeys[] = {
    {"heads", Kind::number},        {"kv_heads", Kind::number},        {"causal", Kind::boolean},
    {"causal_align", Kind::string}, {"layout", Kind::string},          {"scale", Kind::number},
    {"rope", Kind::boolean},        {"rope_base", Kind::number},       {"rope_dim", Kind::number},
    {"rope_style", Kind::string},   {"alibi", Kind::boolean},          {"window", Kind::number},
    {"softcap", Kind::number},      {"attn_mask_means", Kind::string}, {"add_zero_attn", Kind::boolean},
};

std::vector<std::string> known_keys() {
    std::vector<std::string> keys;
    for (const ConfigKey& k : kConfigKeys) keys.emplace_back(k.key);
    return keys;
}

const ConfigKey& find_key(const std::string& where, const std::string& key) {
    for (const ConfigKey& k : kConfigKeys)
        if (key == k.key) return k;
    const std::vector<std::string> known = known_keys();
    std::string list;
    for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
    throw InputError(where + ": unknown option '" + escape_control(clip_fragment(key)) + "'" +
                     escape_control(did_you_mean(key, known)) + " (a config may hold: " + list + ")");
}

const char* kind_name(Kind k) {
    return k == Kind::number ? "a number" : k == Kind::boolean ? "true or false" : "a string";
}

// The words the command line would hold for one option: "--heads 2", "--causal",
// "--no-causal"; none for a flag that is false (every such flag's default).
std::vector<std::string> words_of(const std::string& where, const ConfigKey& k, const ConfigValue& v) {
    const bool none_scale =
        k.kind == Kind::number && v.kind == Kind::string && std::string(k.key) == "scale" && v.text == "none";
    if (v.kind != k.kind && !none_scale)
        throw InputError(where + ": expected " + kind_name(k.kind) +
                         (std::string(k.key) == "scale" ? " or \"none\"" : "") + ", found " + kind_name(v.kind) + " " +
                         escape_control(clip_fragment(v.text)));
    if (k.kind != Kind::boolean) return {k.flag(), v.text};
    if (v.text == "true") return {k.flag()};
    if (std::string(k.key) == "causal") return {"--no-causal"};
    return {};
}

// `o` with `words` parsed over it as `run`'s options; InputError naming `where` if refused.
void parse_words(RunOptions& o, const std::vector<std::string>& words, const std::string& where) {
    if (words.empty()) return;
    RunOptions parsed;
    if (const auto error = parse_over(o, words, parsed, false))
        throw InputError(where + ": " + clip_fragment(*error, 300));
    parsed.given = o.given;
    o = std::move(parsed);
}

}  // namespace

RunOptions with_bundle_config(const RunOptions& given, const Bundle& bundle, Spec& spec) {
    if (bundle.config.empty()) return given;
    RunOptions o = given;
    std::vector<BundleOption> record;
    for (const auto& [key, value] : bundle.config) {
        const std::string where = escape_control(bundle.source) + ": config: " + escape_control(clip_fragment(key));
        const ConfigKey& k = find_key(escape_control(bundle.source) + ": config", key);
        const std::vector<std::string> words = words_of(where, k, value);
        const bool overridden = given.given.count(k.flag()) > 0;
        if (!overridden) parse_words(o, words, where);
        record.push_back({key, value.text, value.kind == Kind::string, overridden});
    }
    spec = spec_of(o);
    spec.bundle_options = std::move(record);
    return o;
}

}  // namespace attnscope::cli
