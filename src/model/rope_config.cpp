// A layer's RoPE from config.json: rope_theta, the rotated width, and rope_scaling, each
// type's frequencies as Hugging Face's modeling_rope_utils.py defines them (written from
// its formulas): default, linear, dynamic (NTK), yarn, longrope (su), llama3.
#include <cmath>
#include <cstdio>
#include <numbers>
#include <string>

#include "attnscope/base/text.hpp"
#include "attnscope/model/family.hpp"

namespace attnscope {
namespace {

std::string num(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
}

// rope_scaling's members, each named "rope_scaling.KEY" in messages.
struct Scaling {
    const ConfigJson& cfg;
    const nlohmann::json& j;
    std::string key;  // "rope_scaling"

    std::optional<double> number(const char* k) const {
        if (!j.contains(k) || j[k].is_null()) return std::nullopt;
        if (!j[k].is_number() || !std::isfinite(j[k].get<double>()))
            cfg.fail(key + "." + k, "expected a finite number, found " + escape_control(clip_fragment(j[k].dump())));
        return j[k].get<double>();
    }
    double positive(const char* k) const {
        const auto v = number(k);
        if (!v) cfg.fail(key + "." + k, "missing (rope_type " + type() + " needs it)");
        if (!(*v > 0)) cfg.fail(key + "." + k, num(*v), "expected a number above 0");
        return *v;
    }
    std::string type() const {
        for (const char* k : {"rope_type", "type"})
            if (j.contains(k) && j[k].is_string()) return j[k].get<std::string>();
        return "default";
    }
    // A list of R/2 positive numbers (longrope's factors).
    std::vector<double> factors(const char* k, std::size_t n) const {
        if (!j.contains(k) || !j[k].is_array())
            cfg.fail(key + "." + k, "expected a list of " + std::to_string(n) + " numbers (one per rotated pair)");
        if (j[k].size() != n)
            cfg.fail(key + "." + k, "expected " + std::to_string(n) + " numbers (one per rotated pair), found " +
                                        std::to_string(j[k].size()));
        std::vector<double> v;
        for (const auto& e : j[k]) {
            if (!e.is_number() || !(e.get<double>() > 0) || !std::isfinite(e.get<double>()))
                cfg.fail(key + "." + k,
                         "expected finite numbers above 0, found " + escape_control(clip_fragment(e.dump())));
            v.push_back(e.get<double>());
        }
        return v;
    }
};

// θ^(-2j/R), j < R/2.
std::vector<double> plain(double base, std::size_t R) {
    std::vector<double> f(R / 2);
    for (std::size_t j = 0; j < R / 2; ++j) f[j] = 1.0 / std::pow(base, double(2 * j) / double(R));
    return f;
}

// llama3 (Llama 3.1): long wavelengths divided by `factor`, short ones kept, a smooth ramp between.
void llama3(const Scaling& s, Rope& rope, std::size_t R) {
    const double factor = s.positive("factor"), low = s.positive("low_freq_factor"),
                 high = s.positive("high_freq_factor"), old = s.positive("original_max_position_embeddings");
    if (!(high > low)) s.cfg.fail(s.key + ".high_freq_factor", num(high), "expected more than low_freq_factor");
    rope.inv_freq = plain(rope.base, R);
    for (double& f : rope.inv_freq) {
        const double wavelen = 2 * std::numbers::pi / f;
        if (wavelen > old / low) {
            f /= factor;
        } else if (!(wavelen < old / high)) {
            const double smooth = (old / wavelen - low) / (high - low);
            f = (1 - smooth) * f / factor + smooth * f;
        }
    }
    rope.scaling = "llama3 factor " + num(factor);
}

// yarn: interpolated and extrapolated frequencies blended by a ramp over the pairs; cos and
// sin times the attention factor (0.1 ln(factor) + 1 unless given).
void yarn(const Scaling& s, Rope& rope, std::size_t R, double max_positions) {
    double factor = s.positive("factor");
    double original = max_positions;
    if (s.number("original_max_position_embeddings")) {
        original = s.positive("original_max_position_embeddings");
        factor = max_positions / original;
    }
    auto mscale = [&](double m) { return factor <= 1 ? 1.0 : 0.1 * m * std::log(factor) + 1.0; };
    const auto given = s.number("attention_factor"), m = s.number("mscale"), m_all = s.number("mscale_all_dim");
    rope.attention_factor = given                                    ? *given
                            : (m && *m != 0 && m_all && *m_all != 0) ? mscale(*m) / mscale(*m_all)
                                                                     : mscale(1);
    const double fast = s.number("beta_fast").value_or(0) ? *s.number("beta_fast") : 32;
    const double slow = s.number("beta_slow").value_or(0) ? *s.number("beta_slow") : 1;
    const bool truncate = !(s.j.contains("truncate") && s.j["truncate"].is_boolean()) || s.j["truncate"].get<bool>();
    auto dim_of = [&](double rotations) {
        return double(R) * std::log(original / (rotations * 2 * std::numbers::pi)) / (2 * std::log(rope.base));
    };
    double low = dim_of(fast), high = dim_of(slow);
    if (truncate) low = std::floor(low), high = std::ceil(high);
    low = std::max(low, 0.0), high = std::min(high, double(R - 1));
    if (low == high) high += 0.001;
    rope.inv_freq = plain(rope.base, R);
    for (std::size_t j = 0; j < R / 2; ++j) {
        const double ramp = std::clamp((double(j) - low) / (high - low), 0.0, 1.0), extrapolation = 1 - ramp;
        const double f = rope.inv_freq[j];
        rope.inv_freq[j] = f / factor * (1 - extrapolation) + f * extrapolation;
    }
    rope.scaling = "yarn factor " + num(factor) + ", attention factor " + num(rope.attention_factor);
}

// longrope (Phi-3): per-pair factors, long_factor past the original context, else short_factor.
void longrope(const Scaling& s, Rope& rope, std::size_t R, double max_positions, std::optional<std::size_t> seq_len) {
    std::optional<double> factor = s.number("factor");
    double original = max_positions;
    if (const auto o = s.cfg.count("original_max_position_embeddings")) {
        original = double(*o);
        factor = max_positions / original;
    }
    const auto given = s.number("attention_factor");
    rope.attention_factor = given                     ? *given
                            : !factor || *factor <= 1 ? 1.0
                                                      : std::sqrt(1 + std::log(*factor) / std::log(original));
    const bool long_run = seq_len && double(*seq_len) > original;
    const std::vector<double> ext = s.factors(long_run ? "long_factor" : "short_factor", R / 2);
    s.factors(long_run ? "short_factor" : "long_factor", R / 2);  // both checked
    rope.inv_freq = plain(rope.base, R);
    for (std::size_t j = 0; j < R / 2; ++j) rope.inv_freq[j] /= ext[j];
    rope.scaling = std::string("longrope ") + (long_run ? "long" : "short") + " factors, attention factor " +
                   num(rope.attention_factor);
}

}  // namespace

const std::vector<std::string>& rope_scaling_types() {
    static const std::vector<std::string> v = {"default", "linear", "dynamic", "yarn", "longrope", "su", "llama3"};
    return v;
}

void scale_rope(const ConfigJson& cfg, const nlohmann::json& scaling, const std::string& key, Rope& rope, std::size_t R,
                std::optional<std::size_t> seq_len) {
    if (!scaling.is_object()) cfg.fail(key, "expected an object ({\"rope_type\": ..., \"factor\": ...})");
    const Scaling s{cfg, scaling, key};
    const std::string type = s.type();
    const double max_positions = double(cfg.count("max_position_embeddings").value_or(2048));
    if (type == "default") return;
    if (type == "linear") {
        const double factor = s.positive("factor");
        rope.inv_freq = plain(rope.base, R);
        for (double& f : rope.inv_freq) f /= factor;
        rope.scaling = "linear factor " + num(factor);
    } else if (type == "dynamic") {
        const double factor = s.positive("factor");
        if (R < 4) cfg.fail(key, "dynamic NTK scaling needs at least 4 rotated features, found " + std::to_string(R));
        const double seq = std::max(double(seq_len.value_or(0)), max_positions);
        const double base =
            rope.base * std::pow(factor * seq / max_positions - (factor - 1), double(R) / double(R - 2));
        rope.inv_freq = plain(base, R);
        rope.scaling = "dynamic NTK factor " + num(factor) + " at " + num(seq) + " positions: base " + num(base);
    } else if (type == "yarn") {
        yarn(s, rope, R, max_positions);
    } else if (type == "longrope" || type == "su") {
        longrope(s, rope, R, max_positions, seq_len);
    } else if (type == "llama3") {
        llama3(s, rope, R);
    } else {
        std::string known;
        for (const auto& t : rope_scaling_types()) known += (known.empty() ? "" : ", ") + t;
        cfg.fail(key, "rope_type '" + escape_control(clip_fragment(type)) +
                          "' is not a RoPE scaling attnscope follows (" + known + ")");
    }
}

}  // namespace attnscope
