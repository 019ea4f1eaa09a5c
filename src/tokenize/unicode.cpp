// UTF-8, Unicode properties and normalization (utf8proc), and regular expressions (PCRE2
// with UTF and Unicode properties, JIT-compiled, under match, depth and heap limits so
// that a pattern that backtracks catastrophically is refused, not run for hours).
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/text.hpp"
#include "internal.hpp"

namespace attnscope::tok {

char32_t decode_multibyte_at(std::string_view s, std::size_t k, std::size_t& len) {
    char32_t cp = 0;
    len = next_code_point(s, k, cp);
    return cp;
}

std::string utf8_lossy(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    std::size_t run = 0;  // the well-formed bytes [run, k) are appended in one go
    for (std::size_t k = 0; k < s.size();) {
        if (static_cast<unsigned char>(s[k]) < 0x80) {
            ++k;
            continue;
        }
        if (const std::size_t n = utf8_sequence_length(s, k); n > 0) {
            k += n;
            continue;
        }
        out.append(s, run, k - run);
        // The maximal prefix of a well-formed sequence at k (Unicode's "maximal subpart"):
        // the lead byte and the continuation bytes that could still follow it.
        const unsigned char c = static_cast<unsigned char>(s[k]);
        const std::size_t want = c >= 0xC2 && c <= 0xDF   ? 2
                                 : c >= 0xE0 && c <= 0xEF ? 3
                                 : c >= 0xF0 && c <= 0xF4 ? 4
                                                          : 1;
        std::size_t m = 1;
        for (; m < want && k + m < s.size(); ++m) {
            const unsigned char d = static_cast<unsigned char>(s[k + m]);
            unsigned char lo = 0x80, hi = 0xBF;
            if (m == 1 && c == 0xE0) lo = 0xA0;
            if (m == 1 && c == 0xED) hi = 0x9F;
            if (m == 1 && c == 0xF0) lo = 0x90;
            if (m == 1 && c == 0xF4) hi = 0x8F;
            if (d < lo || d > hi) break;
        }
        out += "\xEF\xBF\xBD";
        k += m;
        run = k;
    }
    out.append(s, run, std::string_view::npos);
    return out;
}

namespace {
utf8proc_category_t category(char32_t c) { return utf8proc_category(static_cast<utf8proc_int32_t>(c)); }
}  // namespace

bool is_whitespace(char32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_punctuation(char32_t c) {
    if (c < 0x80)
        return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
               (c >= 0x7B && c <= 0x7E);
    const auto k = category(c);
    return k == UTF8PROC_CATEGORY_PC || k == UTF8PROC_CATEGORY_PD || k == UTF8PROC_CATEGORY_PS ||
           k == UTF8PROC_CATEGORY_PE || k == UTF8PROC_CATEGORY_PI || k == UTF8PROC_CATEGORY_PF ||
           k == UTF8PROC_CATEGORY_PO;
}

bool is_control(char32_t c) {
    if (c == '\t' || c == '\n' || c == '\r') return false;
    const auto k = category(c);
    return k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_CN ||
           k == UTF8PROC_CATEGORY_CO;
}

bool is_mark_nonspacing(char32_t c) { return category(c) == UTF8PROC_CATEGORY_MN; }

bool is_numeric(char32_t c) {
    const auto k = category(c);
    return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

bool is_alphanumeric(char32_t c) {
    const auto k = category(c);
    return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) || is_numeric(c);
}

bool is_chinese(char32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

std::string lowercase(char32_t c) {
    std::string out;
    if (c == 0x130) {  // İ: the one full lower-case mapping of two code points (i + U+0307)
        out = "i\xCC\x87";
        return out;
    }
    append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
    return out;
}

std::string unicode_normalize(std::string_view s, const std::string& form) {
    int options = UTF8PROC_STABLE;
    if (form == "NFC" || form == "NFKC") options |= UTF8PROC_COMPOSE;
    if (form == "NFD" || form == "NFKD") options |= UTF8PROC_DECOMPOSE;
    if (form == "NFKC" || form == "NFKD") options |= UTF8PROC_COMPAT;
    utf8proc_uint8_t* out = nullptr;
    const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                static_cast<utf8proc_ssize_t>(s.size()), &out, static_cast<utf8proc_option_t>(options));
    if (n < 0) throw InputError(std::string("text: cannot normalize to ") + form + ": " + utf8proc_errmsg(n));
    std::string result(reinterpret_cast<const char*>(out), static_cast<std::size_t>(n));
    std::free(out);
    return result;
}

// ---- regular expressions --------------------------------------------------------------

namespace {
// Backtracking steps one match may take, and its heap (KiB): GPT-2's pattern needs a
// few dozen steps per word; (a+)+$ on 30 letters would need 10^9.
constexpr std::uint32_t kMatchLimit = 10'000'000;
constexpr std::uint32_t kHeapLimitKiB = 64 * 1024;
// PCRE2's limits hold for one starting place, and not every step counts against them: a
// look-ahead around nested runs, (?=a*a*a*b), costs n^3 at each of n places. A pattern
// read from a file is therefore compiled with a callout before each of its items, counted
// over the whole subject of a find_all: at most kStepsPerByte (or 8 per byte of the
// pattern, when longer: a long alternation enters each branch) for each of its bytes and
// kStepSlack more. Llama 3's and GPT-2's patterns take 3 to 5 a byte on English, about 1
// on a run of spaces. Bounded per byte, not per call: a text cut into many short pieces
// costs its length, never a floor per piece.
constexpr std::uint64_t kStepsPerByte = 256;
constexpr std::uint64_t kStepSlack = 64;

struct Steps {
    std::uint64_t used = 0, max = 0;
};

int count_step(pcre2_callout_block*, void* data) {
    auto* steps = static_cast<Steps*>(data);
    return ++steps->used > steps->max ? PCRE2_ERROR_CALLOUT : 0;
}

std::string pcre2_message(int code) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(code, buf, sizeof buf);
    return reinterpret_cast<const char*>(buf);
}
}  // namespace

Regex::Regex(const std::string& pattern, std::string where, bool counted)
    : where_(std::move(where)),
      steps_per_byte_(counted ? std::max<std::uint64_t>(kStepsPerByte, 8 * pattern.size()) : 0) {
    int err = 0;
    PCRE2_SIZE at = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     PCRE2_UTF | PCRE2_UCP | (counted ? PCRE2_AUTO_CALLOUT : 0), &err, &at, nullptr);
    if (!code)
        throw InputError(where_ + ": the regular expression \"" + escape_control(clip_fragment(pattern, 60)) +
                         "\" does not compile: " + pcre2_message(err) + " at offset " + std::to_string(at));
    code_ = code;
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // when JIT is unavailable the interpreter runs it
    auto* context = pcre2_match_context_create(nullptr);
    pcre2_set_match_limit(context, kMatchLimit);
    pcre2_set_depth_limit(context, kMatchLimit);
    pcre2_set_heap_limit(context, kHeapLimitKiB);
    auto* stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    if (stack) pcre2_jit_stack_assign(context, nullptr, stack);
    context_ = context;
    stack_ = stack;
}

Regex::~Regex() {
    pcre2_jit_stack_free(static_cast<pcre2_jit_stack*>(stack_));
    pcre2_match_context_free(static_cast<pcre2_match_context*>(context_));
    pcre2_code_free(static_cast<pcre2_code*>(code_));
}

std::vector<std::pair<std::size_t, std::size_t>> Regex::find_all(std::string_view s) const {
    auto* code = static_cast<pcre2_code*>(code_);
    std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> data(
        pcre2_match_data_create_from_pattern(code, nullptr), pcre2_match_data_free);
    // Counted steps (a pattern read from a file): a context of this call's own.
    Steps steps{0, steps_per_byte_ * (s.size() + kStepSlack)};
    std::unique_ptr<pcre2_match_context, void (*)(pcre2_match_context*)> counting(
        steps_per_byte_ ? pcre2_match_context_copy(static_cast<pcre2_match_context*>(context_)) : nullptr,
        pcre2_match_context_free);
    if (counting) pcre2_set_callout(counting.get(), count_step, &steps);
    auto* context = counting ? counting.get() : static_cast<pcre2_match_context*>(context_);
    std::vector<std::pair<std::size_t, std::size_t>> out;
    // The subject's UTF-8 is checked on the first call only; the later ones go straight to
    // the compiled code when there is some (pcre2_match's own checks cost as much as a
    // match of GPT-2's pattern, and a megabyte has 250,000 matches).
    std::size_t jit_size = 0;
    pcre2_pattern_info(code, PCRE2_INFO_JITSIZE, &jit_size);
    const auto match = jit_size > 0 ? pcre2_jit_match : pcre2_match;
    for (std::size_t pos = 0; pos <= s.size();) {
        const int rc = (pos == 0 ? pcre2_match : match)(code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), pos,
                                                        pos == 0 ? 0 : PCRE2_NO_UTF_CHECK, data.get(), context);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc == PCRE2_ERROR_CALLOUT)
            throw InputError(where_ + ": the regular expression takes more than " + std::to_string(steps.max) +
                             " steps on a text of " + std::to_string(s.size()) + " bytes (stopped at byte " +
                             std::to_string(pos) + "; it backtracks without bound)");
        if (rc < 0)
            throw InputError(where_ + ": the regular expression failed on the text at byte " + std::to_string(pos) +
                             ": " + pcre2_message(rc) +
                             (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT ||
                                      rc == PCRE2_ERROR_HEAPLIMIT || rc == PCRE2_ERROR_JIT_STACKLIMIT
                                  ? " (it backtracks without bound)"
                                  : ""));
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data.get());
        std::size_t b = ov[0], e = ov[1];
        if (e < b) e = b;  // \K in a look-ahead can end a match before its start
        if (e > b) out.emplace_back(b, e);
        if (e > pos) {
            pos = e;
        } else {  // an empty match: move on by one character
            if (pos >= s.size()) break;
            const std::size_t n = utf8_sequence_length(s, pos);
            pos += n ? n : 1;
        }
    }
    return out;
}

std::string regex_escape(std::string_view literal) {
    // \Q...\E quotes everything but "\E" itself.
    std::string out = "\\Q";
    for (std::size_t k = 0; k < literal.size(); ++k) {
        if (literal.compare(k, 2, "\\E") == 0) {
            out += "\\E\\\\E\\Q";
            ++k;
        } else {
            out += literal[k];
        }
    }
    return out + "\\E";
}

std::shared_ptr<const Regex> pattern_of(const Node& n) {
    n.expect_object();
    const std::string where = escape_control(n.file()) + ": " + n.path();
    if (auto s = n.find("String")) return std::make_shared<const Regex>(regex_escape(s->str()), where);
    if (auto r = n.find("Regex")) return std::make_shared<const Regex>(r->str(), where + ".Regex", true);
    n.fail("expected {\"String\": ...} or {\"Regex\": ...}");
}

}  // namespace attnscope::tok
