// Fields named in library messages, spelled as this command line's flags.
#include <array>
#include <utility>

#include "subcommand.hpp"

namespace attnscope::cli {

std::string flag_of(std::string_view field) {
    // Fields whose flag is not simply "--" + field.
    static constexpr std::array<std::pair<std::string_view, std::string_view>, 11> kSpelled = {{
        {"add_zero_attn", "--add-zero-attn"},
        {"log_scale", "--log-scale"},
        {"zero_key", "--zero-key"},
        {"svg_stage", "--svg-stage"},
        {"max_memory", "--max-memory"},
        {"causal_align", "--causal-align"},
        {"kv_heads", "--kv-heads"},
        {"rope_base", "--rope-base"},
        {"rope_dim", "--rope-dim"},
        {"attn_mask_means", "--attn-mask-means"},
        {"sink_keys", "--sink-keys"},
    }};
    for (const auto& [f, flag] : kSpelled)
        if (f == field) return std::string(flag);
    static constexpr std::string_view kSame[] = {
        "heads",   "range",      "threads", "force",    "scale",  "temperature",
        "stages",  "batch",      "head",    "cell",     "dump",   "html",
        "svg",     "heatmap",    "panels",  "diagnose", "layout", "causal",
        "dtype",   "x",          "memory",  "W_Q",      "W_K",    "W_V",
        "W_O",     "b_Q",        "b_K",     "b_V",      "b_O",    "key_padding_mask",
        "rope",    "alibi",      "window",  "softcap",  "axes",   "prefill",
        "bug",     "checkpoint", "layer",   "preset",   "prefix", "qkv",
        "summary", "topk",       "local",   "jsonl"};
    for (std::string_view f : kSame)
        if (f == field) return "--" + std::string(field);
    return "{" + std::string(field) + "}";
}

}  // namespace attnscope::cli
