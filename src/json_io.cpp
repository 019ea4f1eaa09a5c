// JSON inputs: a bundle object of named nested lists, or a single nested list; and the
// choice of reader by file name. Non-finite numbers, which JSON cannot spell, are read
// from the strings "inf", "-inf" and "nan" — the form attnscope's own --json writes.
#include "attnscope/errors.hpp"
#include "attnscope/io.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <iostream>
#include <iterator>
#include <limits>

namespace attnscope {
namespace {

using nlohmann::json;

constexpr std::size_t kMaxDims = 32;

std::string describe(const json& j) {
    switch (j.type()) {
        case json::value_t::null: return "null";
        case json::value_t::boolean: return j.get<bool>() ? "true" : "false";
        case json::value_t::string: {
            std::string s = j.get<std::string>();
            if (s.size() > 20) s = s.substr(0, 20) + "...";
            return "string \"" + s + "\"";
        }
        case json::value_t::object: return "an object";
        case json::value_t::array: return "a list";
        default: return "number " + j.dump();
    }
}

bool nonfinite_from_string(const std::string& s, double& out) {
    if (s == "inf" || s == "+inf" || s == "Infinity" || s == "+Infinity") out = std::numeric_limits<double>::infinity();
    else if (s == "-inf" || s == "-Infinity") out = -std::numeric_limits<double>::infinity();
    else if (s == "nan" || s == "NaN") out = std::numeric_limits<double>::quiet_NaN();
    else return false;
    return true;
}

// Walks a nested list, checking it is rectangular; leaves go to `a`.
class Flattener {
public:
    Flattener(const std::string& origin, bool text) : origin_(origin), text_(text) {}

    Array run(const json& j, const std::string& name) {
        Array a;
        a.origin = origin_;
        a.dtype = text_ ? "text" : "json";
        // The shape is read off the first element at each depth; every other list must match.
        const json* p = &j;
        while (p->is_array()) {
            if (a.shape.size() == kMaxDims)
                throw InputError(origin_ + ": nested deeper than " + std::to_string(kMaxDims) + " levels");
            a.shape.push_back(p->size());
            if (p->empty()) break;
            p = &(*p)[0];
        }
        walk(j, name, 0, a);
        return a;
    }

private:
    void walk(const json& j, const std::string& path, std::size_t depth, Array& a) {
        if (depth < a.shape.size()) {
            if (!j.is_array())
                throw InputError(origin_ + ": " + path + ": ragged array: expected a list of " +
                                 std::to_string(a.shape[depth]) + " elements, found " + describe(j));
            if (j.size() != a.shape[depth])
                throw InputError(origin_ + ": " + path + ": ragged array: expected " + std::to_string(a.shape[depth]) +
                                 " elements (as in the first list at this depth), found " + std::to_string(j.size()));
            std::size_t i = 0;
            for (const json& e : j) walk(e, path + "[" + std::to_string(i++) + "]", depth + 1, a);
            return;
        }
        if (text_) {
            if (!j.is_string()) throw InputError(origin_ + ": " + path + ": expected a string (token label), found " + describe(j));
            a.strings.push_back(j.get<std::string>());
            return;
        }
        double v;
        if (j.is_number()) v = j.get<double>();
        else if (j.is_boolean()) v = j.get<bool>() ? 1.0 : 0.0;
        else if (j.is_string() && nonfinite_from_string(j.get<std::string>(), v)) {}
        else if (j.is_array())
            throw InputError(origin_ + ": " + path + ": ragged array: expected a number at this depth, found a list");
        else
            throw InputError(origin_ + ": " + path + ": expected a number, found " + describe(j) +
                             (j.is_null() ? " (write non-finite values as \"nan\", \"inf\" or \"-inf\")" : ""));
        a.values.push_back(v);
    }

    const std::string& origin_;
    bool text_;
};

json parse_json(std::string_view text, const std::string& source) {
    try {
        return json::parse(text.begin(), text.end());
    } catch (const json::parse_error& e) {
        throw InputError(source + ": invalid JSON at byte " + std::to_string(e.byte) + ": " +
                         std::string(e.what()).substr(std::string(e.what()).find(']') + 2));
    } catch (const json::exception& e) {
        throw InputError(source + ": invalid JSON: " + std::string(e.what()).substr(std::string(e.what()).find(']') + 2));
    }
}

bool is_token_name(const std::string& name) {
    return name.size() > 7 && name.compare(name.size() - 7, 7, "_tokens") == 0;
}

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string read_stdin() {
    std::string s((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    if (std::cin.bad()) throw InputError("<stdin>: cannot read standard input");
    return s;
}

}  // namespace

Bundle parse_json_bundle(std::string_view text, const std::string& source) {
    json j = parse_json(text, source);
    if (!j.is_object())
        throw InputError(source + ": expected a JSON object of named arrays ({\"x\": [[...]], \"W_Q\": ...}), found " +
                         describe(j));
    Bundle b;
    b.source = source;
    for (auto it = j.begin(); it != j.end(); ++it) {
        std::string origin = source + ": " + it.key();
        b.arrays[it.key()] = Flattener(origin, is_token_name(it.key())).run(it.value(), it.key());
    }
    return b;
}

Array parse_json_array(std::string_view text, const std::string& origin) {
    json j = parse_json(text, origin);
    if (j.is_object()) {
        if (j.size() != 1)
            throw InputError(origin + ": expected a nested list, or an object with one entry; found an object with " +
                             std::to_string(j.size()) + " entries");
        return Flattener(origin, false).run(j.begin().value(), j.begin().key());
    }
    return Flattener(origin, false).run(j, "");
}

Bundle load_bundle(const std::string& path, std::size_t max_bytes) {
    if (path == "-") return parse_json_bundle(read_stdin(), "<stdin>");
    std::string bytes = read_file(path, max_bytes);
    if (ends_with(path, ".npy"))
        throw InputError(path + ": a .npy file holds one array, not a bundle; pass it with its own option (e.g. --x " +
                         path + ")");
    if (ends_with(path, ".npz") || bytes.compare(0, 2, "PK") == 0) return parse_npz(bytes, path, max_bytes);
    return parse_json_bundle(bytes, path);
}

Array load_array(const std::string& path, const std::string& name, std::size_t max_bytes) {
    std::string bytes = read_file(path, max_bytes);
    std::string origin = path + ": " + name;
    if (ends_with(path, ".npy") || bytes.compare(0, 6, "\x93NUMPY") == 0) return parse_npy(bytes, origin, max_bytes);
    if (ends_with(path, ".npz"))
        throw InputError(path + ": an .npz archive is a bundle; pass it as the bundle, or give " + name + " as .npy or .json");
    return parse_json_array(bytes, origin);
}

}  // namespace attnscope
