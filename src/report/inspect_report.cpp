// `attnscope inspect`'s listing of a checkpoint (report/inspect_report.hpp).
#include "attnscope/report/inspect_report.hpp"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "attnscope/base/json_writer.hpp"
#include "attnscope/base/text.hpp"
#include "attnscope/io/gguf.hpp"

namespace attnscope {
namespace {

// The command that runs a layer, its options spelled as flags and other words quoted for a shell.
std::string command_text(const std::vector<std::string>& words, const FlagSpelling& flag) {
    std::string s;
    for (const auto& w : words) {
        std::string word = w.size() > 2 && w.front() == '{' && w.back() == '}' ? flag(w.substr(1, w.size() - 2)) : w;
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

// One attention layer's line: its prefix, layout and what the config fixes; then where
// those facts came from.
void put_attention_text(std::ostream& out, const CheckpointLayer& a) {
    out << "  attention: " << escape_control(a.prefix) << "  layout " << layout_name(a);
    if (a.config.heads) out << ", heads " << *a.config.heads;
    if (a.config.kv_heads) out << ", K/V heads " << *a.config.kv_heads;
    if (a.config.head_dim) out << ", head width " << *a.config.head_dim;
    if (a.config.rope) {
        out << ", RoPE base " << a.config.rope->base;
        if (a.config.rope->dim) out << " on " << *a.config.rope->dim << " features";
    }
    if (a.config.window) out << ", window " << *a.config.window;
    if (a.config.causal) out << (*a.config.causal ? ", causal" : ", not causal");
    out << '\n';
    if (!a.config.facts.empty()) out << "  from: " << escape_control(facts_text(a.config)) << '\n';
}

// `s` escaped and cut to at most `cols` terminal columns ("..." ending what was cut).
std::string short_text(std::string_view s, std::size_t cols) {
    const std::string e = escape_control(s);
    if (display_width(e) <= cols) return e;
    std::string out;
    std::size_t width = 0;
    for (std::size_t k = 0; k < e.size();) {
        char32_t cp = 0;
        const std::size_t n = next_code_point(e, k, cp);
        const std::size_t w = column_width(cp);
        if (width + w + 3 > cols) break;
        out.append(e, k, n);
        width += w;
        k += n;
    }
    return out + "...";
}

std::string number_text(const GgufValue& v) {
    char buf[40];
    switch (v.type) {
        case GgufType::boolean:
            return v.u ? "true" : "false";
        case GgufType::f32:
            std::snprintf(buf, sizeof buf, "%.9g", v.f);
            return buf;
        case GgufType::f64:
            std::snprintf(buf, sizeof buf, "%.17g", v.f);
            return buf;
        case GgufType::i8:
        case GgufType::i16:
        case GgufType::i32:
        case GgufType::i64:
            return std::to_string(v.i);
        case GgufType::u8:
        case GgufType::u16:
        case GgufType::u32:
        case GgufType::u64:
            return std::to_string(v.u);
        case GgufType::string:
        case GgufType::array:
            break;
    }
    return "";
}

// An array's first items, escaped, until about `cols` columns are used.
std::string items_text(const GgufValue& v, std::size_t cols) {
    std::vector<std::string> items;
    if (v.item == GgufType::string) {
        for (const std::string_view s : v.strings(8)) {
            items.push_back("'" + short_text(s, 24) + "'");
            if (items.size() == 8) break;
        }
    } else if (v.item == GgufType::array) {
        for (const GgufValue& a : v.items) {
            items.push_back("[" + std::to_string(a.count) + " " + std::string(gguf_type_name(a.item)) + "]");
            if (items.size() == 8) break;
        }
    } else {
        GgufValue one;
        one.type = v.item;
        const std::vector<double> n = v.numbers(8);
        for (std::size_t k = 0; k < n.size() && k < 8; ++k) {
            one.u = std::uint64_t(n[k] < 0 ? 0 : n[k]), one.i = std::int64_t(n[k]), one.f = n[k];
            items.push_back(number_text(one));
        }
    }
    std::string out;
    for (std::size_t k = 0; k < items.size(); ++k) {
        const std::string more = k + 1 < v.count ? ", ..." : "";
        if (!out.empty() && display_width(out) + display_width(items[k]) + 2 + more.size() > cols) {
            out += ", ...";
            return out;
        }
        out += (out.empty() ? "" : ", ") + items[k];
    }
    return out + (items.size() < v.count ? ", ..." : "");
}

// A GGUF file's version, alignment and metadata, one key a line within 80 columns: a
// scalar's value; a string escaped and cut; an array's item type, length and first items.
void put_gguf_text(std::ostream& out, const GgufInfo& g) {
    out << "gguf: version " << g.version << ", alignment " << g.alignment << ", data from byte " << g.data_offset
        << ", " << g.metadata.size() << " metadata key" << (g.metadata.size() == 1 ? "" : "s") << '\n';
    const auto type_of = [](const GgufValue& v) {
        std::string type(gguf_type_name(v.type));
        if (v.type == GgufType::array)
            type += "[" + std::string(gguf_type_name(v.item)) + " x " + std::to_string(v.count) + "]";
        return type;
    };
    const auto pad = [](const std::string& s, std::size_t width) {
        const std::size_t w = display_width(s);
        return s + std::string(width > w ? width - w : 0, ' ');
    };
    std::size_t key_width = 0, type_width = 0;  // the columns, at most 40 and 24 wide
    for (const auto& kv : g.metadata) {
        key_width = std::max(key_width, std::min<std::size_t>(display_width(escape_control(kv.key)), 40));
        type_width = std::max(type_width, std::min<std::size_t>(type_of(kv.value).size(), 24));
    }
    for (const auto& kv : g.metadata) {
        const GgufValue& v = kv.value;
        std::string line = "  " + pad(short_text(kv.key, 60), key_width) + "  " + pad(type_of(v), type_width) + "  ";
        const std::size_t room = display_width(line) < 70 ? 80 - display_width(line) : 10;
        if (v.type == GgufType::string)
            line += "'" + short_text(v.text, room - 2) + "'";
        else if (v.type == GgufType::array)
            line += items_text(v, room);
        else
            line += number_text(v);
        out << line << '\n';
    }
}

}  // namespace

void write_inspect_text(std::ostream& out, const Checkpoint& c, const CheckpointOverview& ov,
                        const FlagSpelling& flag) {
    std::size_t total = 0, bytes = 0;
    for (const auto& g : ov.groups) total += g.tensors.size();
    for (const auto& g : ov.groups)
        for (const auto& t : g.tensors) bytes += t.bytes;
    out << escape_control(c.path) << ": " << c.format << ", " << total << " tensors, " << format_bytes(bytes) << '\n';
    const GgufInfo* gguf = c.source ? c.source->gguf() : nullptr;
    if (gguf) put_gguf_text(out, *gguf);
    out << "config: " << (c.config_path.empty() ? "none" : escape_control(c.config_path)) << '\n';
    out << "preset: " << (ov.preset.empty() ? "none" : ov.preset) << " (" << escape_control(ov.preset_note) << ")\n";
    for (const auto& g : ov.groups)  // the command that runs the first layer found
        if (g.attention) {
            out << "run: " << escape_control(command_text(run_command(c, ov, *g.attention), flag)) << '\n';
            break;
        }
    std::size_t name_width = 0, type_width = 0;  // the columns of the tensor lines
    for (const auto& g : ov.groups)
        for (const auto& t : g.tensors) {
            name_width = std::max(name_width, escape_control(t.name).size());
            type_width = std::max(type_width, t.dtype.size() + 1 + shape_str(t.shape).size());
        }
    for (const auto& g : ov.groups) {
        out << '\n' << (g.group.empty() ? "(not in a numbered layer)" : escape_control(g.group)) << '\n';
        if (g.attention) put_attention_text(out, *g.attention);
        for (const auto& t : g.tensors) {
            const std::string name = escape_control(t.name), type = t.dtype + " " + shape_str(t.shape);
            out << "  " << name << std::string(name_width - name.size() + 2, ' ') << type
                << std::string(type_width - type.size() + 2, ' ') << format_bytes(t.bytes);
            if (gguf) out << "  at " << t.offset;
            out << '\n';
        }
    }
}

namespace {

// An optional value, or null.
template <typename T>
JsonWriter& maybe(JsonWriter& w, const std::optional<T>& v) {
    return v ? w.value(*v) : w.value(nullptr);
}

// One attention layer: its names, preset, configuration and the command that runs it (keys
// in alphabetical order, as the document has always had them).
void put_layer(JsonWriter& w, const Checkpoint& c, const CheckpointOverview& ov, const CheckpointLayer& a,
               const FlagSpelling& flag) {
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
    w.key("run").value(command_text(run_command(c, ov, a), flag));
    maybe(w.key("window"), cfg.window).end_object();
}

// One metadata value: a scalar as itself; an array as its item type, length and first
// (at most 8) items, nested arrays as their own item type and length.
void put_gguf_value(JsonWriter& w, const GgufValue& v) {
    switch (v.type) {
        case GgufType::string:
            w.value(v.text);
            return;
        case GgufType::boolean:
            w.value(v.u != 0);
            return;
        case GgufType::u8:
        case GgufType::u16:
        case GgufType::u32:
        case GgufType::u64:
            w.value(v.u);
            return;
        case GgufType::i8:
        case GgufType::i16:
        case GgufType::i32:
        case GgufType::i64:
            w.value(v.i);
            return;
        case GgufType::f32:
        case GgufType::f64:
            w.value(v.f);
            return;
        case GgufType::array:
            break;
    }
    w.begin_object().key("count").value(v.count).key("first").begin_array();
    if (v.item == GgufType::string)
        for (const std::string_view s : v.strings(8)) w.value(s);
    else if (v.item == GgufType::array)
        for (std::size_t k = 0; k < v.items.size() && k < 8; ++k) put_gguf_value(w, v.items[k]);
    else
        for (const double x : v.numbers(8)) w.value(x);
    w.end_array().key("item_type").value(gguf_type_name(v.item)).end_object();
}

// A GGUF file's version, alignment, data offset and metadata; null for other containers.
void put_gguf_json(JsonWriter& w, const GgufInfo* g) {
    if (!g) {
        w.value(nullptr);
        return;
    }
    w.begin_object().key("alignment").value(g->alignment).key("data_offset").value(g->data_offset);
    w.key("metadata").begin_array();
    for (const auto& kv : g->metadata) {
        w.begin_object().key("key").value(kv.key).key("type").value(gguf_type_name(kv.value.type)).key("value");
        put_gguf_value(w, kv.value);
        w.end_object();
    }
    w.end_array().key("version").value(g->version).end_object();
}

}  // namespace

void write_inspect_json(std::ostream& out, const Checkpoint& c, const CheckpointOverview& ov,
                        const FlagSpelling& flag) {
    JsonWriter w(out, {.indent = 2, .in_script = false});
    w.begin_object().key("schema").value("attnscope.inspect/1").key("config");
    c.config_path.empty() ? w.value(nullptr) : w.value(c.config_path);
    const GgufInfo* gguf = c.source ? c.source->gguf() : nullptr;
    w.key("format").value(c.format).key("gguf");
    put_gguf_json(w, gguf);
    w.key("layers").begin_array();
    for (const auto& g : ov.groups)
        if (g.attention) put_layer(w, c, ov, *g.attention, flag);
    w.end_array().key("path").value(c.path).key("preset");
    ov.preset.empty() ? w.value(nullptr) : w.value(ov.preset);
    w.key("preset_note").value(ov.preset_note).key("tensors").begin_array();
    for (const auto& g : ov.groups)
        for (const auto& t : g.tensors) {
            w.begin_object().key("bytes").value(t.bytes).key("dtype").value(t.dtype).key("file").value(t.file.str());
            w.key("group").value(g.group).key("name").value(t.name).key("offset");
            gguf ? w.value(t.offset) : w.value(nullptr);
            w.key("shape").list(t.shape).end_object();
        }
    w.end_array().end_object();
    out << '\n';
}

}  // namespace attnscope
