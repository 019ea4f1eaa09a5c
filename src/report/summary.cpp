// Views of the per-row summaries (summary_report.hpp).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>

#include "attnscope/base/json_writer.hpp"
#include "attnscope/report/report.hpp"
#include "attnscope/report/summary_report.hpp"
#include "text_util.hpp"

namespace attnscope {
namespace {

using namespace text;

// A number of a row or head; a NaN (a row whose logits were not finite) is null.
constexpr JsonNonFinite kNan = JsonNonFinite::nan_null;

// A list of numbers of a row or head.
void put_numbers(JsonWriter& w, const double* xs, std::size_t n) {
    w.begin_array();
    for (std::size_t k = 0; k < n; ++k) w.value(xs[k], kNan);
    w.end_array();
}

std::vector<std::size_t> rows_shape(const Summary& s, bool batched, std::size_t last) {
    std::vector<std::size_t> shape;
    if (batched) shape.push_back(s.B);
    shape.push_back(s.H);
    shape.push_back(last);
    return shape;
}

// "0", "1", "2-3", "4-7", ...: the distances of bin k.
std::string bin_label(std::size_t k) {
    if (k < 2) return std::to_string(k);
    return std::to_string(1ULL << (k - 1)) + "-" + std::to_string((1ULL << k) - 1);
}

void put_row_fields(JsonWriter& w, const Summary& s, std::size_t r) {
    w.key("visible_keys").value(s.visible_keys[r]).key("row_sum").value(s.row_sum[r], kNan);
    w.key("entropy").value(s.entropy[r], kNan).key("effective_keys").value(s.effective_keys[r], kNan);
    w.key("max_weight").value(s.max_weight[r], kNan).key("max_key").value(s.max_key[r]);
    w.key("sink_mass").value(s.sink_mass[r], kNan).key("local_mass").value(s.local_mass[r], kNan);
    w.key("mean_distance").value(s.mean_distance[r], kNan);
    w.key("topk_index").list(s.topk_index.data() + r * s.K, s.K);
    w.key("topk_weight");
    put_numbers(w, s.topk_weight.data() + r * s.K, s.K);
}

void put_head_fields(JsonWriter& w, const Summary& s, std::size_t b, std::size_t h) {
    const HeadClass c = classify_head(s, b, h);
    w.key("class").value(c.label).key("rows").value(s.profile_rows[b * s.H + h]);
    w.key("nonfinite_rows").value(s.nonfinite_rows[b * s.H + h]).key("mean_sink_mass").value(c.sink, kNan);
    w.key("mean_local_mass").value(c.local, kNan).key("mean_effective_keys").value(c.effective_keys, kNan);
    w.key("mean_distance").value(c.distance, kNan).key("distance_profile");
    put_numbers(w, s.distance_profile.data() + (b * s.H + h) * s.bins, s.bins);
}

void put_options(JsonWriter& w, const Summary& s) {
    w.key("topk").value(s.K).key("sink_keys").value(s.spec.sink_keys.value_or(0)).key("local").value(s.spec.local);
    w.key("distance_bins").begin_array();
    for (std::size_t k = 0; k < s.bins; ++k) w.value(bin_label(k));
    w.end_array().key("classes").value(head_class_rule(s.spec));
}

// The batch item (when batched) and head of a line or element.
void put_at(JsonWriter& w, bool batched, std::size_t b, std::size_t h) {
    if (batched) w.key("batch").value(b);
    w.key("head").value(h);
}

}  // namespace

std::vector<OutArray> summary_arrays(const Summary& s, bool batched) {
    const auto rows = rows_shape(s, batched, s.Tq);
    auto with = [&](std::size_t last) {
        auto v = rows;
        v.push_back(last);
        return v;
    };
    return {
        {"entropy", rows, DType::float64, s.entropy.data()},
        {"effective_keys", rows, DType::float64, s.effective_keys.data()},
        {"max_weight", rows, DType::float64, s.max_weight.data()},
        {"max_key", rows, DType::int64, s.max_key.data()},
        {"topk_index", with(s.K), DType::int64, s.topk_index.data()},
        {"topk_weight", with(s.K), DType::float64, s.topk_weight.data()},
        {"sink_mass", rows, DType::float64, s.sink_mass.data()},
        {"local_mass", rows, DType::float64, s.local_mass.data()},
        {"mean_distance", rows, DType::float64, s.mean_distance.data()},
        {"visible_keys", rows, DType::int64, s.visible_keys.data()},
        {"row_sum", rows, DType::float64, s.row_sum.data()},
        {"distance_profile", rows_shape(s, batched, s.bins), DType::float64, s.distance_profile.data()},
    };
}

namespace {

// The ruler under the sparklines: the first distance of every fourth bin, where it fits
// ("0   8   128 2K  32K"), `n` columns.
std::string bin_ruler(std::size_t n) {
    std::string r;
    for (std::size_t k = 0; k < n; k += 4) {
        const unsigned long long d = k == 0 ? 0 : 1ULL << (k - 1);
        std::string t = d >= (1ULL << 30)   ? std::to_string(d >> 30) + "G"
                        : d >= (1ULL << 20) ? std::to_string(d >> 20) + "M"
                        : d >= (1ULL << 10) ? std::to_string(d >> 10) + "K"
                                            : std::to_string(d);
        t = t.substr(0, std::min<std::size_t>(4, n - k));
        r += t + std::string(std::min<std::size_t>(4, n - k) - t.size(), ' ');
    }
    return r;
}

// Per chosen head: its class, mean masses, effective keys, distance and a sparkline of its
// distance profile, with a ruler of bins above; and the heads' non-finite rows.
void write_head_table(std::ostream& out, const Summary& s, const std::vector<std::size_t>& batches,
                      const std::vector<std::size_t>& heads) {
    static const char* const kBars[] = {" ", "▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
    const std::size_t spark = std::min<std::size_t>(s.bins, 19);
    char line[160];
    std::snprintf(line, sizeof line, "%2s %2s %-14s %5s %5s %5s %5s %7s %7s %s\n", "b", "h", "class", "sink", "local",
                  "diag", "prev", "eff", "dist", "profile");
    const std::string ruler = std::string(std::string(line).find("profile"), ' ') + bin_ruler(spark);
    out << line << ruler.substr(0, ruler.find_last_not_of(' ') + 1) << '\n';
    std::string nonfinite;
    for (std::size_t b : batches)
        for (std::size_t h : heads) {
            const HeadClass c = classify_head(s, b, h);
            const double* prof = &s.distance_profile[(b * s.H + h) * s.bins];
            double top = 0;
            for (std::size_t k = 0; k < s.bins; ++k) top = std::max(top, prof[k]);
            std::string bars;
            for (std::size_t k = 0; k < spark; ++k)
                bars += kBars[top > 0 ? std::size_t(std::lround(prof[k] / top * 8)) : 0];
            std::snprintf(line, sizeof line, "%2zu %2zu %-14s %5.3f %5.3f %5.3f %5.3f %7.1f %7.1f ", b, h,
                          c.label.c_str(), c.sink, c.local, c.diagonal, c.previous, c.effective_keys, c.distance);
            out << line << bars << '\n';
            if (const std::int64_t n = s.nonfinite_rows[b * s.H + h])
                nonfinite += (nonfinite.empty() ? "" : ", ") + std::string("b") + std::to_string(b) + " h" +
                             std::to_string(h) + ": " + std::to_string(n);
        }
    out << "   profile: mass at distance 0, 1, 2-3, 4-7, ...: a column a bin, the ruler\n"
           "   gives the first distance of every 4th (█: the head's largest)\n";
    if (!nonfinite.empty())
        for (const auto& l :
             text::wrap("rows with a NaN or inf logit (their numbers NaN, left out of the means): " + nonfinite, 77))
            out << "   " << l << '\n';
}

// The top keys of each chosen head's rows (the ends of Tq around "…", unless `full`),
// within `width`: "key 'token' weight", largest first.
void write_top_keys(std::ostream& out, const Summary& s, const TraceView& v, const TextOptions& o,
                    const std::vector<std::size_t>& batches, const std::vector<std::size_t>& heads) {
    if (s.K == 0) return;
    out << "   top " << s.K << (s.K == 1 ? " key" : " keys") << " per row, largest first: key 'token' weight"
        << (o.full ? "" : " (--full: every row)") << '\n';
    const std::size_t width = std::max<std::size_t>(o.width, 40);
    for (std::size_t b : batches)
        for (std::size_t h : heads) {
            out << "  -- " << (v.batched ? "batch " + std::to_string(b) + ", " : std::string()) << "head " << h << '\n';
            for (std::size_t i : shown(s.Tq, o.full ? s.Tq : 2 * o.edgeitems + 2, o.edgeitems)) {
                if (i == kGap) {
                    out << "    …\n";
                    continue;
                }
                const std::size_t r = s.row(b, h, i);
                std::string line = "    " + pad_right(clip_label(axis_label(v, "Tq", b, i), 8), 8);
                if (!s.finite(r)) line += " (a NaN or inf logit)";
                if (s.visible_keys[r] == 0) line += " (no key visible)";
                for (std::size_t k = 0; k < s.K && s.finite(r); ++k) {
                    const std::int64_t j = s.topk_index[r * s.K + k];
                    if (j < 0) break;
                    std::string item = " " + std::to_string(j);
                    if (!v.key_tokens.empty())
                        item += " '" + clip_label(axis_label(v, "Tk", b, std::size_t(j)), 8) + "'";
                    item += " " + format_number(s.topk_weight[r * s.K + k], 3) + (k + 1 < s.K ? "," : "");
                    if (display_width(line) + display_width(item) + 2 > width) {
                        line += " …";
                        break;
                    }
                    line += item;
                }
                if (!line.empty() && line.back() == ',') line.pop_back();
                out << line << '\n';
            }
        }
}

}  // namespace

void write_summary_text(std::ostream& out, const Summary& s, const TraceView& v, const TextOptions& o) {
    const auto batches = chosen_or_all(o.batches, s.B), heads = chosen_or_all(o.heads, s.H);
    out << "\n== summary: " << (v.batched ? "(B, H, Tq) = (" + std::to_string(s.B) + ", " : "(H, Tq) = (") << s.H
        << ", " << s.Tq << "), Tk = " << s.Tk << "\n   per row (in --dump, --json, --jsonl): entropy, top " << s.K
        << " keys, masses, distance\n";
    out << "   mass: sink on " << sink_keys_words(s.spec.sink_keys.value_or(0)) << ", local on q-" << s.spec.local
        << " < k <= q, diag/prev at distance 0/1\n";
    out << "   eff = exp(entropy); dist = sum w|q-k|; means over the rows that see a key\n";
    write_head_table(out, s, batches, heads);
    for (const auto& l : text::wrap("classes: " + head_class_rule(s.spec), 77)) out << "   " << l << '\n';
    write_top_keys(out, s, v, o, batches, heads);
}

void write_summary_json(JsonWriter& w, const Summary& s, bool batched) {
    w.begin_object();
    put_options(w, s);
    w.key("heads").begin_array();
    for (std::size_t b = 0; b < s.B; ++b)
        for (std::size_t h = 0; h < s.H; ++h) {
            put_at(w.newline().begin_object(), batched, b, h);
            put_head_fields(w, s, b, h);
            w.end_object();
        }
    w.end_array().newline().key("rows").begin_array();
    for (std::size_t b = 0; b < s.B; ++b)
        for (std::size_t h = 0; h < s.H; ++h)
            for (std::size_t i = 0; i < s.Tq; ++i) {
                put_at(w.newline().begin_object(), batched, b, h);
                w.key("query").value(i);
                put_row_fields(w, s, s.row(b, h, i));
                w.end_object();
            }
    w.end_array().end_object();
}

namespace {

constexpr const char* kJsonlSchema = "attnscope.jsonl/1";

// The opening of a line of kind `kind`: {"schema":...,"kind":...[,"layer":L] (run --layer all).
JsonWriter& begin_line(JsonWriter& w, const char* kind, std::optional<std::size_t> layer) {
    w.begin_object().key("schema").value(kJsonlSchema).key("kind").value(kind);
    return layer ? w.key("layer").value(*layer) : w;
}

}  // namespace

void write_jsonl_header(std::ostream& out, const std::string& source, const Dims& d, bool batched, const Summary* s,
                        std::optional<std::size_t> layer) {
    JsonWriter w(out);
    begin_line(w, "run", layer).key("source").value(source).key("dims").begin_object();
    w.key("B").value(d.B).key("H").value(d.H).key("G").value(d.G).key("Tq").value(d.Tq).key("Tk").value(d.Tk);
    w.key("Dk").value(d.Dk).key("Dv").value(d.Dv).end_object().key("batched").value(batched);
    if (s) {
        w.key("summary").begin_object();
        put_options(w, *s);
        w.end_object();
    }
    w.end_object();
    out << '\n';
}

void write_jsonl_rows(std::ostream& out, const Summary& s, bool batched, std::size_t b, std::size_t h, std::size_t i0,
                      std::size_t n, std::optional<std::size_t> layer) {
    for (std::size_t i = i0; i < i0 + n; ++i) {
        JsonWriter w(out);
        put_at(begin_line(w, "row", layer), batched, b, h);
        w.key("query").value(i);
        put_row_fields(w, s, s.row(b, h, i));
        w.end_object();
        out << '\n';
    }
}

void write_jsonl_heads(std::ostream& out, const Summary& s, bool batched, std::optional<std::size_t> layer) {
    for (std::size_t b = 0; b < s.B; ++b)
        for (std::size_t h = 0; h < s.H; ++h) {
            JsonWriter w(out);
            put_at(begin_line(w, "head", layer), batched, b, h);
            put_head_fields(w, s, b, h);
            w.end_object();
            out << '\n';
        }
}

void write_jsonl_stage(std::ostream& out, const StageView& st, bool batched, std::optional<std::size_t> layer) {
    // Leading axes split into lines: the batch (when there is one), then a head axis.
    std::size_t lead = batched ? 1 : 0;
    if (st.axes.size() > lead + 1 && (st.axes[lead] == "H" || st.axes[lead] == "G")) ++lead;
    std::size_t lines = 1, per = 1;
    for (std::size_t a = 0; a < st.shape.size(); ++a) (a < lead ? lines : per) *= st.shape[a];
    const std::vector<std::string> axes(st.axes.begin() + std::ptrdiff_t(lead), st.axes.end());
    const std::vector<std::size_t> shape(st.shape.begin() + std::ptrdiff_t(lead), st.shape.end());
    for (std::size_t l = 0; l < lines; ++l) {
        JsonWriter w(out);
        begin_line(w, "stage", layer).key("stage").value(st.name);
        std::size_t rest = l;
        std::vector<std::size_t> at(lead);
        for (std::size_t a = lead; a-- > 0;) at[a] = rest % st.shape[a], rest /= st.shape[a];
        for (std::size_t a = 0; a < lead; ++a)
            w.key(st.axes[a] == "B" ? "batch" : st.axes[a] == "G" ? "kv_head" : "head").value(at[a]);
        w.key("axes").list(axes).key("shape").list(shape).key("data");
        w.nested(shape, [&](JsonWriter& j, std::size_t k) {
            const std::size_t f = l * per + k;
            if (st.dtype == DType::boolean)
                j.value(st.at(f) != 0);
            else if (st.dtype == DType::float32)
                j.value(static_cast<const float*>(st.data)[f]);
            else
                j.value(st.at(f));
        });
        w.end_object();
        out << '\n';
    }
}

}  // namespace attnscope
