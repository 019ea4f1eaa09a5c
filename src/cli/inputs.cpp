// The steps of `run` that check, decode and report share (run.hpp): the Spec the options
// give, the inputs as loaded (a bundle, files, a checkpoint's layer), the problem.
#include <algorithm>
#include <filesystem>
#include <iostream>

#include "attnscope/base/errors.hpp"
#include "attnscope/io/read.hpp"
#include "attnscope/model/checkpoint.hpp"
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

Bundle load_inputs(const RunOptions& command_line, std::size_t limit, Spec& spec) {
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
        add_model_input(o, limit, bundle, spec);
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

}  // namespace attnscope::cli
