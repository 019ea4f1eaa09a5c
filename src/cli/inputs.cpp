// The steps of `run` that check, decode and report share (run.hpp): the Spec the options
// give, the inputs as loaded (a bundle, files, a checkpoint's layer), the problem.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/text.hpp"
#include "attnscope/core/attention.hpp"
#include "attnscope/io/checkpoint.hpp"
#include "attnscope/io/read.hpp"
#include "attnscope/model/checkpoint_layer.hpp"
#include "attnscope/model/qkv.hpp"
#include "run.hpp"

namespace attnscope::cli {

Spec spec_of(const RunOptions& o) {
    Spec spec;
    spec.heads = o.heads;
    spec.causal = o.causal;
    spec.causal_align = o.causal_align;
    spec.layout = o.layout == WeightLayout::torch ? Layout::torch : Layout::math;  // tl: math once converted
    spec.temperature = o.temperature;
    spec.zero_key = o.zero_key;
    spec.scale_text = o.scale_text;
    spec.scale = o.scale();
    spec.kv_heads = o.kv_heads;
    if (o.rope) {
        spec.rope = Rope{};
        if (o.rope_base) spec.rope->base = *o.rope_base;
        spec.rope->dim = o.rope_dim;
        spec.rope->style = o.rope_style.value_or(RopeStyle::half);
    }
    spec.alibi = o.alibi;
    spec.add_zero_attn = o.add_zero_attn;
    spec.window = o.window;
    spec.softcap = o.softcap;
    spec.attn_mask_means = o.attn_mask_means;
    check_conflicts(o, Scope::every);
    return spec;
}

Bundle load_named_arrays(const std::string& path, std::size_t limit) {
    std::error_code ec;
    if (!std::filesystem::is_directory(path, ec)) {
        if (path.size() >= 4 && path.compare(path.size() - 4, 4, ".npy") == 0)
            throw InputError(path +
                             ": one .npy holds one array; give a directory of NAME.npy files, an .npz or a "
                             "JSON object of your stages");
        return load_bundle(path, limit);
    }
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(path, ec))
        if (e.path().extension() == ".npy") files.push_back(e.path());
    if (ec) throw InputError(path + ": cannot list the directory (" + ec.message() + ")");
    if (files.empty()) throw InputError(path + ": a directory without .npy files (expected NAME.npy per stage)");
    std::sort(files.begin(), files.end());
    Bundle b;
    b.source = path;
    for (const auto& f : files) b.arrays[f.stem().string()] = load_array(f.string(), f.stem().string(), limit);
    return b;
}

Bundle load_inputs(const RunOptions& command_line, std::size_t limit, Spec& spec, Predictions* predicted) {
    Bundle bundle;
    if (!command_line.bundle.empty())
        bundle = load_bundle(command_line.bundle, limit, check_array_name);  // an unknown array is never read
    else
        bundle.source =
            command_line.qkv.empty() ? "<options>" : command_line.qkv;  // a run of --qkv alone is that file's
    // The options the bundle carries, under the command line's (bundle_config.cpp).
    const RunOptions o = with_bundle_config(command_line, bundle, spec);
    for (const auto& [name, file] : o.array_files) {
        if (file == "-")  // one standard input: it can be read once, as the bundle
            throw UsageError("--" + name + " -: standard input can only hold the whole bundle (run -); give " + name +
                             " as a .npy or .json file");
        bundle.arrays[name] = load_array(file, name, limit);
    }
    if (o.ignore_padding) {
        spec.padding_dropped = bundle.arrays.erase("key_padding_mask") > 0;
        if (!spec.padding_dropped)
            std::cerr << "attnscope: note: --ignore-padding: the inputs hold no key_padding_mask; nothing dropped\n";
    }
    if (!o.model_text.model.empty()) {
        add_model_input(o, limit, bundle, spec, predicted);
    } else if (!o.checkpoint.empty()) {
        add_checkpoint_layer(o, limit, bundle, spec);
    } else if (o.layout == WeightLayout::tl) {
        const std::size_t h = convert_tl_layout(bundle);
        if (o.given.count("--heads") && o.heads != h)
            throw UsageError("--heads " + std::to_string(o.heads) + ": W_Q holds " + std::to_string(h) +
                             " heads ({layout} tl: its first axis)");
        spec.heads = h;
    }
    return bundle;
}

// ---- run --checkpoint PATH [--layer N] [--preset P] [--prefix P]: one layer's weights from a model file

namespace {

// The number of output features of the query projection, as the layer holds it.
std::optional<std::size_t> query_width(const CheckpointLayer& l) {
    const auto it = l.arrays.find("W_Q");
    if (it == l.arrays.end() || it->second.ndim() != 2) return std::nullopt;
    return l.layout == Layout::torch ? it->second.shape[0] : it->second.shape[1];
}

// Heads: the config's (or the weights'), or --heads; never a silent single head. `width`:
// the query projection's outputs, checked against heads × the config's head width.
void apply_heads(const RunOptions& o, const Checkpoint& c, const CheckpointLayer& layer,
                 std::optional<std::size_t> width, Spec& spec) {
    const LayerConfig& cfg = layer.config;
    const auto given = [&o](const char* flag) { return o.given.count(flag) > 0; };
    if (cfg.heads) {
        if (given("--heads") && o.heads != *cfg.heads)
            throw UsageError("--heads " + std::to_string(o.heads) + ": the checkpoint says " +
                             std::to_string(*cfg.heads) + " (" + facts_text(cfg) + ")");
        spec.heads = *cfg.heads;
    } else if (!given("--heads")) {
        throw UsageError("--heads: " + escape_control(o.checkpoint) +
                         (c.config_path.empty() ? " has no config.json" : "'s config.json does not say") +
                         ", and a state dict does not record the number of heads; give --heads");
    }
    if (cfg.kv_heads) {
        if (given("--kv-heads") && o.kv_heads != cfg.kv_heads)
            throw UsageError("--kv-heads " + std::to_string(*o.kv_heads) + ": the checkpoint says " +
                             std::to_string(*cfg.kv_heads));
        spec.kv_heads = cfg.kv_heads;
    }
    if (cfg.head_dim && width && *width != spec.heads * *cfg.head_dim)
        throw InputError(escape_control(o.checkpoint) + ": " + layer.prefix + " query projection has " +
                         std::to_string(*width) + " outputs, expected heads " + std::to_string(spec.heads) +
                         " × head width " + std::to_string(*cfg.head_dim));
}

}  // namespace

void add_checkpoint_layer(const RunOptions& o, std::size_t limit, Bundle& bundle, Spec& spec) {
    // The weights come from one place (sinks too: a checkpoint may hold them).
    std::vector<std::string> given_weights = weight_array_names();
    given_weights.push_back("sinks");
    for (const std::string& name : given_weights)
        if (bundle.arrays.count(name))
            throw UsageError("--checkpoint: " + escape_control(bundle.source) + " already holds " + name +
                             "; the weights come from the bundle or from the checkpoint, not both");
    const Checkpoint c = open_checkpoint(o.checkpoint, limit);
    LayerRequest request;
    request.layer = o.layer;
    request.preset = o.preset;
    request.prefix = o.prefix;
    // The run's tokens (a scaled RoPE may depend on them): x's (.., T, Dm).
    if (const auto x = bundle.arrays.find("x"); x != bundle.arrays.end() && x->second.ndim() >= 2)
        request.tokens = x->second.shape[x->second.ndim() - 2];
    CheckpointLayer layer = choose_layer(c, request, limit);
    const LayerConfig& cfg = layer.config;
    const auto given = [&o](const char* flag) { return o.given.count(flag) > 0; };

    // The layout: the preset's, or --layout's for names chosen by --prefix alone.
    if (layer.layout_fixed) {
        const std::string fixed = layout_name(layer);
        if (given("--layout") && name_of(kLayouts, o.layout) != fixed)
            throw UsageError("--layout " + name_of(kLayouts, o.layout) + ": the " + layer.preset +
                             " preset's weights are in the " + fixed + " layout");
        spec.layout = layer.layout;
    } else if (o.layout == WeightLayout::tl) {
        Bundle weights;
        weights.source = o.checkpoint;
        weights.arrays = std::move(layer.arrays);
        layer.config.heads = convert_tl_layout(weights);
        layer.arrays = std::move(weights.arrays);
    }
    const std::optional<std::size_t> width = query_width(layer);
    for (auto& [name, array] : layer.arrays) bundle.arrays[name] = std::move(array);

    apply_heads(o, c, layer, width, spec);
    // What the model does and no option said otherwise: masks, positions, scale.
    if (cfg.causal && !given("--causal")) spec.causal = *cfg.causal;
    if (cfg.rope) {
        Rope rope = *cfg.rope;
        if (o.rope_base) rope.base = *o.rope_base;
        if (o.rope_dim) rope.dim = o.rope_dim;
        if (o.rope_style) rope.style = *o.rope_style;
        spec.rope = rope;
    }
    if (cfg.window && !given("--window")) spec.window = cfg.window;
    if (cfg.softcap && !given("--softcap")) spec.softcap = cfg.softcap;
    spec.qk_norm_eps = cfg.qk_norm_eps;
    // The config's scale; --temperature divides it, as it divides the default 1/sqrt(Dk).
    if (cfg.scale && !given("--scale")) {
        spec.scale = *cfg.scale / o.temperature;
        spec.temperature = 1;
        spec.scale_source = cfg.scale_why;
        if (o.temperature != 1) {
            char t[32];
            std::snprintf(t, sizeof t, "%g", o.temperature);
            spec.scale_source += " / temperature " + std::string(t);
        }
    }
    // The layer's names without their joining dot ("transformer.h.1.attn"); a model run from
    // text (--model) names its layer by number, which keeps the header within 80 columns.
    std::string names = layer.prefix;
    if (!names.empty() && names.back() == '.') names.pop_back();
    if (!o.model_text.model.empty() && layer.layer) names = "layer " + std::to_string(*layer.layer);
    std::string where = escape_control(o.checkpoint) + " " + names + " (" + layer.preset + ")";
    bundle.source = (o.bundle.empty() ? std::string() : bundle.source + " with ") + where;
}

template <typename T>
Problem<T> problem_of(const RunOptions& o, const Bundle& bundle, const Spec& spec, std::size_t limit) {
    if (o.qkv.empty()) return make_problem<T>(bundle, spec);
    const auto axes = parse_axes_option(o.axes, "q=bthd or k=bt(hd)");
    const GivenQKV qkv =
        read_qkv(load_named_arrays(o.qkv, limit), spec.heads, spec.kv_heads.value_or(spec.heads), axes);
    return make_problem_qkv<T>(bundle, qkv, spec);
}

template Problem<float> problem_of<float>(const RunOptions&, const Bundle&, const Spec&, std::size_t);
template Problem<double> problem_of<double>(const RunOptions&, const Bundle&, const Spec&, std::size_t);

template <typename T>
std::shared_ptr<const Attended<T>> attend_checked(const Bundle& bundle, Problem<T> problem, StageSet keep,
                                                  std::size_t threads, std::size_t limit) {
    auto a = std::make_shared<Attended<T>>();
    a->problem = std::move(problem);
    Compute how;
    how.keep = keep;
    how.threads = threads;
    check_memory_limit(bundle, a->problem, how, limit);
    a->trace = attend(a->problem, how);
    a->view = view_of(bundle.source, a->problem, a->trace);
    return a;
}

template std::shared_ptr<const Attended<float>> attend_checked<float>(const Bundle&, Problem<float>, StageSet,
                                                                      std::size_t, std::size_t);
template std::shared_ptr<const Attended<double>> attend_checked<double>(const Bundle&, Problem<double>, StageSet,
                                                                        std::size_t, std::size_t);

void print_warnings(const std::vector<std::string>& warnings) {
    for (const auto& w : warnings) std::cerr << "attnscope: warning: " << escape_control(w) << '\n';
}

}  // namespace attnscope::cli
