// The diagnosis of the first divergent stage: each mistake of the catalogue run through
// the recomputed pipeline from its entry, kept when it reproduces their tensor.
//
// The diagnosis recomputes the classic pipeline in float64 on its own, with one mistake
// switched on at a time (a Mutation), from the stages before the mistake's entry (the
// reference's, or theirs where they gave them and they match). It first checks, stage by
// stage, that its unmutated computation reproduces the reference: a stage it does not
// model (RoPE, softcap, sinks, a window the mask rule adds) makes it skip the mistakes
// that would have to pass through that stage, rather than guess.
#include <algorithm>
#include <array>

#include "check_internal.hpp"

namespace attnscope::check_detail {
namespace {

struct Context {
    const TraceView& ref;
    Run run;
    std::array<std::optional<Dense>, kStageCount> refd;  // the reference, present stages
    std::array<const Theirs*, kStageCount> theirs{};     // given arrays
    StageSet matched;                                    // given and matching
    StageSet faithful;                                   // our unmutated step reproduces the reference
    bool mask_parts_ok = false;                          // the mask rebuilt from padding and causal is the reference's
};

Dense dense_of(const StageView& s, bool batched) {
    Dense d;
    d.shape = s.shape;
    if (!batched) d.shape.insert(d.shape.begin(), 1);
    d.v.resize(s.size());
    for (std::size_t k = 0; k < d.v.size(); ++k) d.v[k] = s.at(k);
    return d;
}

bool same(const Dense& a, const Dense& b) {
    return a.shape == b.shape && compare(a.v, b.v, Tolerance{1e-9, 1e-9}).match;
}

// Sizes from the reference's own stages; false when they are not the classic shapes.
bool init_run(Context& c) {
    Run& r = c.run;
    const auto &Q = c.refd[kQ], &K = c.refd[kK], &V = c.refd[kV], &O = c.refd[kOutput];
    if (!Q || !K || !V || !O || !c.refd[kScores] || !c.refd[kMask] || !c.refd[kMaskedScores] || !c.refd[kWeights] ||
        !c.refd[kContext])
        return false;
    r.B = Q->shape[0], r.H = Q->shape[1], r.Tq = Q->shape[2], r.Dk = Q->shape[3];
    r.G = K->shape[1], r.Tk = K->shape[2], r.Dv = V->shape[3], r.Dout = O->shape[2];
    r.scale = c.ref.scale;
    return r.G > 0 && r.H % r.G == 0 && K->shape[3] == r.Dk &&
           c.refd[kScores]->shape == std::vector<std::size_t>{r.B, r.H, r.Tq, r.Tk};
}

void check_faithful(Context& c) {
    Pipe refp{};
    for (std::size_t p = 0; p < kStageCount; ++p) refp[p] = c.refd[p] ? &*c.refd[p] : nullptr;
    const Mutation none;
    for (std::size_t p = 0; p < kStageCount; ++p) {
        if (!c.run.present[p]) continue;
        bool empty = false;
        try {
            c.faithful[p] = same(step(Stage(p), c.run, refp, none, empty), *c.refd[p]);
        } catch (const std::exception&) {
            c.faithful[p] = false;
        }
    }
    c.faithful[kQRot] = c.faithful[kKRot] = c.faithful[kBias] = false;  // not modelled: never passed through
    c.mask_parts_ok = same(edited_mask(c.run, MaskEdit::none, *c.refd[kMask]), *c.refd[kMask]);
}

struct Trial {
    bool fits = false;
    double max_abs = 0;
    std::vector<std::string> also, not_later;
    bool empty_lines = false;
};

// Runs mutation m from its entry to the first divergent stage S (and on past it when it
// fits there, to see which later stages it reproduces too).
Trial try_mutation(const Context& c, const Mutation& m, Stage S) {
    Trial t;
    Pipe cur{};
    std::array<Dense, kStageCount> own, known;  // known: theirs, in the reference's order, where given and matching
    for (std::size_t p = 0; p < kStageCount; ++p) {
        cur[p] = c.refd[p] ? &*c.refd[p] : nullptr;
        if (c.theirs[p] && c.matched[p]) {
            known[p].shape = c.refd[p]->shape;
            known[p].v = c.theirs[p]->values;
            cur[p] = &known[p];
        }
    }
    std::size_t last = S;
    for (std::size_t p = S + 1; p < kStageCount; ++p)
        if (c.theirs[p]) last = p;
    for (std::size_t p = m.entry; p <= last; ++p) {
        if (!c.run.present[p]) continue;
        const bool parts = p == kMask && m.mask != MaskEdit::none && m.mask != MaskEdit::inverted;
        if (p == kBias || (p == kMask && m.mask == MaskEdit::none)) continue;  // passes through
        if (p <= S && (parts ? !c.mask_parts_ok : !c.faithful[p])) return t;
        if (p > S && !c.faithful[p]) break;
        own[p] = step(Stage(p), c.run, cur, m, t.empty_lines);
        cur[p] = &own[p];
        const Theirs* th = c.theirs[p];
        if (p < S && th && !compare(th->values, own[p].v, th->tol).match) return t;  // theirs is right there
        if (p == S) {
            if (compare(own[p].v, c.refd[p]->v, th->tol).match) return t;  // changes nothing
            const Cmp fit = compare(th->values, own[p].v, th->tol);
            if (!fit.match) return t;
            t.fits = true, t.max_abs = fit.max_abs;
        } else if (p > S && th) {
            (compare(th->values, own[p].v, th->tol).match ? t.also : t.not_later).emplace_back(stage_name(Stage(p)));
        }
    }
    return t;
}

const char* policy_words(RowPolicy p) {
    return p == RowPolicy::nan ? "rows with no visible key NaN" : "rows with no visible key uniform";
}

std::vector<Diagnosis> diagnose_stage(const Context& c, Stage S) {
    std::vector<Diagnosis> found;
    auto consider = [&](const Mutation& m, const Trial& t) {
        if (!t.fits) return;
        Diagnosis d;
        d.id = m.id, d.stage = S, d.max_abs_diff = t.max_abs;
        d.variant = m.variant;
        if (m.policy != RowPolicy::zero && m.id.rfind("masked-rows", 0) != 0)
            d.variant += (d.variant.empty() ? "" : "; ") + std::string(policy_words(m.policy));
        d.also = t.also, d.not_later = t.not_later;
        const Mistake& info = mistake_catalogue()[catalogue_index(m.id)];
        d.title = info.title, d.explanation = info.explanation, d.fix = info.fix;
        for (auto& e : found)
            if (e.id == d.id) {
                if (d.also.size() > e.also.size() ||
                    (d.also.size() == e.also.size() && d.max_abs_diff < e.max_abs_diff))
                    e = d;
                return;
            }
        found.push_back(d);
    };
    for (const Mutation& m : mutations(c.run)) {
        const Trial t = try_mutation(c, m, S);
        consider(m, t);
        if (t.empty_lines && m.policy == RowPolicy::zero && m.id.rfind("masked-rows", 0) != 0)
            for (RowPolicy p : {RowPolicy::nan, RowPolicy::uniform}) {
                Mutation v = m;
                v.policy = p;
                consider(v, try_mutation(c, v, S));
            }
    }
    std::stable_sort(found.begin(), found.end(), [](const Diagnosis& a, const Diagnosis& b) {
        if (a.also.size() != b.also.size()) return a.also.size() > b.also.size();
        if (a.not_later.size() != b.not_later.size()) return a.not_later.size() < b.not_later.size();
        return catalogue_index(a.id) < catalogue_index(b.id);
    });
    return found;
}

}  // namespace

void diagnose_first(const TraceView& ref, const Problem<double>& problem, const std::map<Stage, Theirs>& given,
                    CheckResult& result) {
    Context c{ref, Run{problem}, {}, {}, {}, {}, false};
    for (const Stage p : stages_in(kModelled)) {
        const StageView* s = ref.find(p);
        if (!s) continue;
        c.refd[p] = dense_of(*s, ref.batched);
        c.run.present[p] = true;
        if (given.count(p)) {
            c.theirs[p] = &given.at(p);
            for (const auto& sc : result.stages)
                if (sc.id == p) c.matched[p] = sc.match;
        }
    }
    const Stage S = *result.first_divergent;
    if (!init_run(c)) {
        result.no_diagnosis =
            "the catalogue's mistakes are those of the classic pipeline; this run's stages do not have its shapes";
    } else if (!kModelled[S] || S == kQRot || S == kKRot || S == kBias) {
        result.no_diagnosis =
            "the catalogue's mistakes are in the classic stages; " + stage_name(S) + " is not one of them";
    } else {
        check_faithful(c);
        result.diagnosis = diagnose_stage(c, S);
    }
    if (!result.diagnosis.empty()) return;
    const StageView& fs = ref.stage(S);
    const Theirs& t = given.at(S);
    const Dense r = dense_of(fs, ref.batched);
    result.where = describe(ref, fs, t, r, c.refd[kMask] ? *c.refd[kMask] : dense({1, 1, 1}));
    describe_orders(ref, fs, t, r, result.where);
}

}  // namespace attnscope::check_detail
