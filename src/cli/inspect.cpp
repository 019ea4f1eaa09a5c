// `attnscope inspect PATH`: lists what a checkpoint holds.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/json_writer.hpp"
#include "attnscope/base/text.hpp"
#include "attnscope/io/checkpoint.hpp"
#include "attnscope/model/checkpoint_layer.hpp"
#include "help.hpp"
#include "run.hpp"
#include "subcommand.hpp"

namespace attnscope::cli {
namespace {

struct InspectArgs {
    std::string path;
    std::string preset = "auto";
    bool json = false;
    LimitOptions limits;             // --max-memory only: the limit of a run, read as run reads it
    const CLI::App* root = nullptr;  // spells the fields of the run commands shown
};

std::string shape_text(const std::vector<std::size_t>& s) { return shape_str(s); }

// The command that runs a layer, its options spelled as flags and other words quoted for a shell.
std::string command_text(const std::vector<std::string>& words, const CLI::App& root) {
    std::string s;
    for (const auto& w : words) {
        std::string word =
            w.size() > 2 && w.front() == '{' && w.back() == '}' ? flag_of(root, w.substr(1, w.size() - 2)) : w;
        if (word.empty() || word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                                   "_-./:=+,@%") != std::string::npos) {
            std::string q = "'";
            for (char ch : word) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
            word = q + "'";
        }
        s += (s.empty() ? "" : " ") + word;
    }
    return s;
}

void print_text(const Checkpoint& c, const CheckpointOverview& ov, const CLI::App& root) {
    std::size_t total = 0, bytes = 0;
    for (const auto& g : ov.groups) total += g.tensors.size();
    for (const auto& g : ov.groups)
        for (const auto& t : g.tensors) bytes += t.bytes;
    std::cout << escape_control(c.path) << ": " << c.format << ", " << total << " tensors, " << format_bytes(bytes)
              << '\n';
    std::cout << "config: " << (c.config_path.empty() ? "none" : escape_control(c.config_path)) << '\n';
    std::cout << "preset: " << (ov.preset.empty() ? "none" : ov.preset) << " (" << escape_control(ov.preset_note)
              << ")\n";
    for (const auto& g : ov.groups)  // the command that runs the first layer found
        if (g.attention) {
            std::cout << "run: " << escape_control(command_text(run_command(c, ov, *g.attention), root)) << '\n';
            break;
        }
    std::size_t name_width = 0, type_width = 0;  // the columns of the tensor lines
    for (const auto& g : ov.groups)
        for (const auto& t : g.tensors) {
            name_width = std::max(name_width, escape_control(t.name).size());
            type_width = std::max(type_width, t.dtype.size() + 1 + shape_text(t.shape).size());
        }
    for (const auto& g : ov.groups) {
        std::cout << '\n' << (g.group.empty() ? "(not in a numbered layer)" : escape_control(g.group)) << '\n';
        if (g.attention) {
            const auto& a = *g.attention;
            std::cout << "  attention: " << escape_control(a.prefix) << "  layout " << layout_name(a);
            if (a.config.heads) std::cout << ", heads " << *a.config.heads;
            if (a.config.kv_heads) std::cout << ", K/V heads " << *a.config.kv_heads;
            if (a.config.head_dim) std::cout << ", head width " << *a.config.head_dim;
            if (a.config.rope) {
                std::cout << ", RoPE base " << a.config.rope->base;
                if (a.config.rope->dim) std::cout << " on " << *a.config.rope->dim << " features";
            }
            if (a.config.window) std::cout << ", window " << *a.config.window;
            if (a.config.causal) std::cout << (*a.config.causal ? ", causal" : ", not causal");
            std::cout << '\n';
            if (!a.config.facts.empty()) std::cout << "  from: " << escape_control(facts_text(a.config)) << '\n';
        }
        for (const auto& t : g.tensors) {
            const std::string name = escape_control(t.name), type = t.dtype + " " + shape_text(t.shape);
            std::cout << "  " << name << std::string(name_width - name.size() + 2, ' ') << type
                      << std::string(type_width - type.size() + 2, ' ') << format_bytes(t.bytes) << '\n';
        }
    }
}

// An optional value, or null.
template <typename T>
JsonWriter& maybe(JsonWriter& w, const std::optional<T>& v) {
    return v ? w.value(*v) : w.value(nullptr);
}

// One attention layer: its names, preset, configuration and the command that runs it (keys
// in alphabetical order, as the document has always had them).
void put_layer(JsonWriter& w, const Checkpoint& c, const CheckpointOverview& ov, const CheckpointLayer& a,
               const CLI::App& root) {
    const LayerConfig& cfg = a.config;
    w.begin_object();
    maybe(w.key("causal"), cfg.causal).key("facts").list(cfg.facts);
    maybe(w.key("head_dim"), cfg.head_dim);
    maybe(w.key("heads"), cfg.heads);
    maybe(w.key("kv_heads"), cfg.kv_heads ? cfg.kv_heads : cfg.heads);
    maybe(w.key("layer"), a.layer).key("layout").value(layout_name(a));
    w.key("prefix").value(a.prefix).key("preset").value(a.preset).key("rope");
    if (cfg.rope) {
        w.begin_object().key("base").value(cfg.rope->base);
        maybe(w.key("dim"), cfg.rope->dim).key("style");
        w.value(cfg.rope->style == RopeStyle::half ? "half" : "interleaved").end_object();
    } else {
        w.value(nullptr);
    }
    w.key("run").value(command_text(run_command(c, ov, a), root));
    maybe(w.key("window"), cfg.window).end_object();
}

// One document (attnscope.inspect/1), indented by 2, streamed: the tensors (its last
// member) are written one by one, so that a million of them never sit in memory twice.
void print_json(const Checkpoint& c, const CheckpointOverview& ov, const CLI::App& root) {
    JsonWriter w(std::cout, {.indent = 2, .in_script = false});
    w.begin_object().key("schema").value("attnscope.inspect/1").key("config");
    c.config_path.empty() ? w.value(nullptr) : w.value(c.config_path);
    w.key("format").value(c.format).key("layers").begin_array();
    for (const auto& g : ov.groups)
        if (g.attention) put_layer(w, c, ov, *g.attention, root);
    w.end_array().key("path").value(c.path).key("preset");
    ov.preset.empty() ? w.value(nullptr) : w.value(ov.preset);
    w.key("preset_note").value(ov.preset_note).key("tensors").begin_array();
    for (const auto& g : ov.groups)
        for (const auto& t : g.tensors) {
            w.begin_object().key("bytes").value(t.bytes).key("dtype").value(t.dtype).key("file").value(t.file.str());
            w.key("group").value(g.group).key("name").value(t.name).key("shape").list(t.shape).end_object();
        }
    w.end_array().end_object();
    std::cout << '\n';
}

int run_inspect(const InspectArgs& a) {
    const Checkpoint c = open_checkpoint(a.path, memory_limit(a.limits));
    const CheckpointOverview ov = describe_checkpoint(c, a.preset);
    if (a.json)
        print_json(c, ov, *a.root);
    else
        print_text(c, ov, *a.root);
    std::cout.flush();
    if (!std::cout) throw RuntimeFailure("<stdout>: cannot write the listing");
    return 0;
}

}  // namespace

Subcommand setup_inspect_command(CLI::App& parent) {
    auto a = std::make_shared<InspectArgs>();
    a->root = &parent;
    CLI::App* cmd = parent.add_subcommand(
        "inspect",
        "List what a checkpoint holds: tensors by layer (name, dtype, shape, bytes), the preset, and each layer's "
        "attention configuration");
    cmd->add_option("path", a->path,
                    "A .safetensors file, model.safetensors.index.json, a torch.save file, or a directory")
        ->required();
    cmd->add_option("--preset", a->preset,
                    "auto (config.json's model_type), gpt2, bert, llama, mistral, qwen2, mha, tl")
        ->capture_default_str()
        ->group(kCheckpoint);
    cmd->add_flag("--json", a->json, "Print one JSON document")->group(kOutputs);
    a->limits.add(*cmd, {"Refuse checkpoints whose listing needs more memory than this (e.g. 8G, 512M; default 3/4 "
                         "of physical memory)",
                         nullptr});
    return {cmd, [a] { return run_inspect(*a); }};
}

}  // namespace attnscope::cli
