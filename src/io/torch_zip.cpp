// PyTorch zip state dicts: what torch.save writes since PyTorch 1.6 (`.pt`, `.pth`,
// `pytorch_model.bin`), read without running anything the file names.
//
// The archive (one top folder, named after the file when it was saved):
//   ARCHIVE/data.pkl      a pickle of the state dict; tensors refer to storages by key
//   ARCHIVE/data/KEY      each storage's raw little-endian bytes (stored, 64-byte aligned)
//   ARCHIVE/byteorder     "little" (newer torch; absent means little)
//   ARCHIVE/version       the format version
//
// The pickle is read by a restricted unpickler of our own: a stack machine that knows the
// opcodes a plain state dict uses (protocol 2 as torch.save writes it, and the protocol 4
// additions FRAME, MEMOIZE, STACK_GLOBAL, SHORT_BINUNICODE, BINUNICODE8) and the few
// globals it names: collections.OrderedDict, torch._utils._rebuild_tensor_v2 (and _v3,
// newer torch's form for dtypes without a storage class), torch._utils._rebuild_parameter,
// the storage classes (torch.FloatStorage ...) and torch.UntypedStorage with the dtypes
// (torch.float32 ...). Nothing is imported or called: a global is a name matched against
// that list, REDUCE builds our own records from arguments of the expected shapes, and
// anything else -- another global (builtins.eval, posix.system, __main__.MyModel, a
// pickled nn.Module's classes), another opcode -- is refused with one line naming it.
//
// What the dict holds becomes tensor names: nested dicts are flattened with dots
// ({"model": {"wte.weight": t}} gives "model.wte.weight"), as are lists and tuples (by
// index, as nn.ModuleList names its layers). Leaves that are not tensors (an epoch count,
// a learning rate, a string) are skipped: TensorSource lists tensors only.
//
// Opening reads the zip directory and the pickle, and checks every tensor against its
// storage member (present, long enough, the view within it) from the directory alone; a
// storage's bytes are read only by read(). Limits keep a hostile pickle from exhausting
// memory or stack: objects, memo and stack entries are capped and charged against the
// memory limit, and nesting is bounded.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/text.hpp"
#include "attnscope/io/checkpoint.hpp"
#include "attnscope/io/read.hpp"
#include "bytes.hpp"
#include "zip.hpp"

namespace attnscope {
namespace {

static_assert(std::endian::native == std::endian::little, "the torch zip reader reads little-endian data in place");

using io_detail::Member;
using io_detail::shown;
using io_detail::shown_path;
using io_detail::ZipReader;

// ---- limits ------------------------------------------------------------------------------
// A real state dict's pickle holds about ten objects per tensor; these caps are far above
// any checkpoint's and far below what would exhaust memory.
constexpr std::size_t kMaxObjects = std::size_t{1} << 22;      // nodes, memo entries, stack entries
constexpr std::size_t kMaxDepth = 64;                          // dicts and lists nested inside one another
constexpr std::size_t kMaxRank = 64;                           // a tensor's dimensions
constexpr std::size_t kMaxNameBytes = 4096;                    // one tensor name
constexpr std::size_t kMaxNamesBytes = std::size_t{64} << 20;  // all tensor names together

// ---- element types -------------------------------------------------------------------------
enum class Elem : std::uint8_t { f32, f64, f16, bf16, i64, i32, i16, i8, u8, b1, u16, u32, u64 };

struct ElemInfo {
    const char* numpy;    // numpy's spelling, TensorInfo::dtype
    const char* storage;  // torch's legacy storage class, "" when it has none
    std::size_t size;
};
constexpr ElemInfo kElems[] = {
    {"float32", "FloatStorage", 4},
    {"float64", "DoubleStorage", 8},
    {"float16", "HalfStorage", 2},
    {"bfloat16", "BFloat16Storage", 2},
    {"int64", "LongStorage", 8},
    {"int32", "IntStorage", 4},
    {"int16", "ShortStorage", 2},
    {"int8", "CharStorage", 1},
    {"uint8", "ByteStorage", 1},
    {"bool", "BoolStorage", 1},
    {"uint16", "", 2},
    {"uint32", "", 4},
    {"uint64", "", 8},
};
const ElemInfo& info(Elem e) { return kElems[static_cast<std::size_t>(e)]; }

// torch's dtype names (torch.float32 and its aliases) for _rebuild_tensor_v3's argument.
bool dtype_of(std::string_view name, Elem& out) {
    static const std::pair<const char*, Elem> names[] = {
        {"float32", Elem::f32}, {"float", Elem::f32},  {"float64", Elem::f64},   {"double", Elem::f64},
        {"float16", Elem::f16}, {"half", Elem::f16},   {"bfloat16", Elem::bf16}, {"int64", Elem::i64},
        {"long", Elem::i64},    {"int32", Elem::i32},  {"int", Elem::i32},       {"int16", Elem::i16},
        {"short", Elem::i16},   {"int8", Elem::i8},    {"uint8", Elem::u8},      {"bool", Elem::b1},
        {"uint16", Elem::u16},  {"uint32", Elem::u32}, {"uint64", Elem::u64},
    };
    for (const auto& [n, e] : names)
        if (name == n) return out = e, true;
    return false;
}

template <typename T>
T load(const char* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
}

// How an Array holds the floats of this type in place as stored; none for those widened.
std::optional<Array::Held> held_of(Elem e) {
    switch (e) {
        case Elem::f32:
            return Array::Held::float32;
        case Elem::f64:
            return Array::Held::float64;
        case Elem::f16:
            return Array::Held::float16;
        case Elem::bf16:
            return Array::Held::bfloat16;
        case Elem::i64:
        case Elem::i32:
        case Elem::i16:
        case Elem::i8:
        case Elem::u8:
        case Elem::b1:
        case Elem::u16:
        case Elem::u32:
        case Elem::u64:
            break;
    }
    return std::nullopt;
}

// The element at p as double: exact for every type but 64-bit integers beyond 2^53.
double widen(const char* p, Elem e) {
    switch (e) {
        case Elem::f32:
            return double(load<float>(p));
        case Elem::f64:
            return load<double>(p);
        case Elem::f16:
            return io_detail::half_to_double(load<std::uint16_t>(p));
        case Elem::bf16:
            return io_detail::bf16_to_double(load<std::uint16_t>(p));
        case Elem::i64:
            return double(load<std::int64_t>(p));
        case Elem::i32:
            return load<std::int32_t>(p);
        case Elem::i16:
            return load<std::int16_t>(p);
        case Elem::i8:
            return load<std::int8_t>(p);
        case Elem::u8:
            return load<std::uint8_t>(p);
        case Elem::b1:
            return *p != 0 ? 1.0 : 0.0;
        case Elem::u16:
            return load<std::uint16_t>(p);
        case Elem::u32:
            return load<std::uint32_t>(p);
        case Elem::u64:
            return double(load<std::uint64_t>(p));
    }
    return 0;
}

// ---- the unpickler's objects ----------------------------------------------------------------
// Every object lives in one arena (a vector of nodes) and values refer to nodes by index:
// no reference counting, so a pickle that puts a list inside itself makes a cycle the
// walk refuses, not a leak, and nothing is freed recursively.
enum class Tag : std::uint8_t { none, boolean, integer, real, object };
struct Value {
    Tag tag = Tag::none;
    std::int64_t i = 0;  // boolean, integer; object: the node's index
    double d = 0;        // real
};

enum class Kind : std::uint8_t { text, tuple, list, dict, callable, storage, tensor };
enum class Fn : std::uint8_t {
    none,
    ordered_dict,
    rebuild_v2,
    rebuild_v3,
    rebuild_parameter,
    storage_class,
    untyped,
    dtype
};

struct Node {
    Kind kind = Kind::text;
    Fn fn = Fn::none;          // callable: which one
    Elem elem = Elem::f32;     // callable storage_class/dtype; storage; tensor
    std::uint32_t record = 0;  // storage, tensor: index into Pickle::storages / tensors
    std::string text;          // text; callable: its dotted name
    std::vector<Value> items;  // tuple, list; dict: key, value, key, value...
};

struct StorageRecord {
    std::string key;          // "0": the member ARCHIVE/data/0
    bool untyped = false;     // torch.UntypedStorage: numel counts bytes
    Elem elem = Elem::u8;     // typed storages
    std::uint64_t numel = 0;  // as the persistent id states it
};

struct TensorRecord {
    std::uint32_t storage = 0;
    Elem elem = Elem::f32;
    std::uint64_t offset = 0;  // in elements
    std::vector<std::uint64_t> size, stride;
};

// What the pickle describes: the arena, the storages and tensors, and the root.
struct Pickle {
    std::vector<Node> nodes;
    std::vector<StorageRecord> storages;
    std::vector<TensorRecord> tensors;
    Value root;
    std::size_t used = 0;  // bytes charged against the memory limit while reading it
};

// Names of the pickle opcodes a state dict does not use, for the message refusing one.
const char* opcode_name(unsigned char op) {
    static const std::pair<unsigned char, const char*> names[] = {
        {'0', "POP"},
        {'1', "POP_MARK"},
        {'2', "DUP"},
        {'F', "FLOAT"},
        {'I', "INT"},
        {'L', "LONG"},
        {'P', "PERSID"},
        {'S', "STRING"},
        {'T', "BINSTRING"},
        {'U', "SHORT_BINSTRING"},
        {'V', "UNICODE"},
        {'d', "DICT"},
        {'g', "GET"},
        {'i', "INST"},
        {'l', "LIST"},
        {'o', "OBJ"},
        {'p', "PUT"},
        {'B', "BINBYTES"},
        {'C', "SHORT_BINBYTES"},
        {0x81, "NEWOBJ"},
        {0x82, "EXT1"},
        {0x83, "EXT2"},
        {0x84, "EXT4"},
        {0x8b, "LONG4"},
        {0x8e, "BINBYTES8"},
        {0x8f, "EMPTY_SET"},
        {0x90, "ADDITEMS"},
        {0x91, "FROZENSET"},
        {0x92, "NEWOBJ_EX"},
        {0x96, "BYTEARRAY8"},
        {0x97, "NEXT_BUFFER"},
        {0x98, "READONLY_BUFFER"},
    };
    for (const auto& [code, name] : names)
        if (code == op) return name;
    return nullptr;
}

// ---- the restricted unpickler ----------------------------------------------------------------
class Unpickler {
   public:
    Unpickler(std::string_view pkl, const std::string& source, const std::string& member, std::size_t budget,
              std::size_t max_bytes)
        : p_(pkl), source_(source), member_(member), budget_(budget), max_bytes_(max_bytes) {}

    Pickle run() {
        for (;;) {
            const std::size_t at = pos_;
            const auto op = static_cast<unsigned char>(byte());
            if (!step(op, at)) break;
        }
        out_.used = used_;
        return std::move(out_);
    }

   private:
    // ---- errors
    [[noreturn]] void malformed(const std::string& what) const {
        throw InputError(shown_path(source_) + ": its pickle " + shown(member_) + " is malformed at byte " +
                         std::to_string(op_at_) + ": " + what);
    }
    [[noreturn]] void refuse(const std::string& what) const {
        throw InputError(shown_path(source_) + ": not a plain tensor state dict: " + what);
    }
    void charge(std::size_t n) {
        if (n > budget_ - used_)
            throw MemoryLimitError(shown_path(source_) + ": its pickle needs more than " +
                                   io_detail::memory_limit_of(max_bytes_) + " to read");
        used_ += n;
    }

    // ---- bytes
    void need(std::size_t n) const {
        if (n > p_.size() - pos_) malformed("it ends inside an opcode (truncated?)");
    }
    char byte() {
        need(1);
        return p_[pos_++];
    }
    std::uint64_t le(int n) {
        need(std::size_t(n));
        const std::uint64_t v = io_detail::load_le(p_, pos_, n);
        pos_ += std::size_t(n);
        return v;
    }

    // ---- objects
    Value make(Node&& n) {
        if (out_.nodes.size() >= kMaxObjects)
            refuse("its pickle makes more than " + std::to_string(kMaxObjects) + " objects");
        charge(sizeof(Node) + n.text.size() + n.items.size() * sizeof(Value));
        out_.nodes.push_back(std::move(n));
        return Value{Tag::object, std::int64_t(out_.nodes.size() - 1), 0};
    }
    Node* node(const Value& v) { return v.tag == Tag::object ? &out_.nodes[std::size_t(v.i)] : nullptr; }
    bool is(const Value& v, Kind k) {
        const Node* n = node(v);
        return n && n->kind == k;
    }
    static Value integer(std::int64_t i) { return Value{Tag::integer, i, 0}; }

    // ---- the stack: values above the newest MARK only (as CPython's unpickler)
    void push(const Value& v) {
        if (stack_.size() >= kMaxObjects)
            refuse("its pickle stacks more than " + std::to_string(kMaxObjects) + " values");
        if (stack_.size() == stack_.capacity()) charge(stack_.size() * sizeof(Value) + sizeof(Value));
        stack_.push_back(v);
    }
    std::size_t fence() const { return marks_.empty() ? 0 : marks_.back(); }
    Value pop() {
        if (stack_.size() <= fence()) malformed("an opcode takes a value from an empty stack");
        Value v = stack_.back();
        stack_.pop_back();
        return v;
    }
    Value& top() {
        if (stack_.size() <= fence()) malformed("an opcode needs a value on an empty stack");
        return stack_.back();
    }
    std::vector<Value> pop_mark() {
        if (marks_.empty()) malformed("an opcode needs a MARK that is not there");
        const std::size_t m = marks_.back();
        marks_.pop_back();
        std::vector<Value> items(stack_.begin() + std::ptrdiff_t(m), stack_.end());
        stack_.resize(m);
        return items;
    }

    // ---- the memo
    void put(std::uint64_t index) {
        const Value v = top();
        if (memo_.size() >= kMaxObjects && !memo_.count(index))
            refuse("its pickle memoizes more than " + std::to_string(kMaxObjects) + " values");
        charge(64);
        memo_[index] = v;
    }
    void get(std::uint64_t index) {
        const auto it = memo_.find(index);
        if (it == memo_.end()) malformed("it refers to memo entry " + std::to_string(index) + ", never stored");
        push(it->second);
    }

    // ---- strings
    void text(std::uint64_t n) {
        if (n > p_.size() - pos_) malformed("a string runs past the end of the pickle");
        const std::string_view s = p_.substr(pos_, std::size_t(n));
        pos_ += std::size_t(n);
        for (std::size_t k = 0; k < s.size();) {
            const std::size_t len = utf8_sequence_length(s, k);
            if (len == 0) malformed("a string is not valid UTF-8");
            k += len;
        }
        Node t;
        t.kind = Kind::text;
        t.text = std::string(s);
        push(make(std::move(t)));
    }

    // ---- globals: names matched against the short list, never imported
    void global(std::string module, const std::string& name) {
        // Protocol 2 writes Python 3's modules under their Python 2 names.
        if (module == "__builtin__") module = "builtins";
        if (module == "copy_reg") module = "copyreg";
        const std::string dotted = module + "." + name;
        Node c;
        c.kind = Kind::callable;
        c.text = dotted;
        Elem e{};
        if (module == "collections" && name == "OrderedDict") {
            c.fn = Fn::ordered_dict;
        } else if (module == "torch._utils" && name == "_rebuild_tensor_v2") {
            c.fn = Fn::rebuild_v2;
        } else if (module == "torch._utils" && name == "_rebuild_tensor_v3") {
            c.fn = Fn::rebuild_v3;
        } else if (module == "torch._utils" && name == "_rebuild_parameter") {
            c.fn = Fn::rebuild_parameter;
        } else if (module == "torch" && name == "UntypedStorage") {
            c.fn = Fn::untyped;
        } else if (module == "torch" && storage_class(name, e)) {
            c.fn = Fn::storage_class;
            c.elem = e;
        } else if (module == "torch" && dtype_of(name, e)) {
            c.fn = Fn::dtype;
            c.elem = e;
        } else {
            const bool object = module == "__main__" || module.rfind("torch.nn.", 0) == 0;
            refuse("it references " + shown(dotted) +
                   (object ? " (a whole pickled model? save its state_dict() instead)"
                           : " (attnscope reads tensors only and runs nothing a file names)"));
        }
        push(make(std::move(c)));
    }
    static bool storage_class(std::string_view name, Elem& out) {
        for (std::size_t k = 0; k < std::size(kElems); ++k)
            if (*kElems[k].storage && name == kElems[k].storage) return out = Elem(k), true;
        return false;
    }
    std::string line() {
        const std::size_t nl = p_.find('\n', pos_);
        if (nl == std::string_view::npos) malformed("it ends inside a GLOBAL name (truncated?)");
        if (nl - pos_ > 1024) malformed("a GLOBAL name does not end within 1024 bytes");
        std::string s(p_.substr(pos_, nl - pos_));
        pos_ = nl + 1;
        return s;
    }

    // ---- persistent ids: ('storage', torch.FloatStorage, '0', 'cpu', 12)
    void persistent_load() {
        const Value pid = pop();
        const Node* t = node(pid);
        if (!t || t->kind != Kind::tuple || t->items.size() != 5)
            refuse("a persistent id is not torch's ('storage', type, key, location, numel)");
        const Node* tag = node(t->items[0]);
        const Node* type = node(t->items[1]);
        const Node* key = node(t->items[2]);
        const Node* loc = node(t->items[3]);
        const Value& numel = t->items[4];
        if (!tag || tag->kind != Kind::text || tag->text != "storage")
            refuse("a persistent id is not a storage ('storage', type, key, location, numel)");
        if (!type || type->kind != Kind::callable || (type->fn != Fn::storage_class && type->fn != Fn::untyped))
            refuse("a storage's type is not a torch storage class" +
                   (type && type->kind == Kind::callable ? " (it is " + shown(type->text) + ")" : std::string()));
        if (!key || key->kind != Kind::text || !loc || loc->kind != Kind::text || numel.tag != Tag::integer ||
            numel.i < 0)
            refuse("a storage's persistent id is not (..., key, location, numel)");
        StorageRecord s;
        s.key = key->text;
        s.untyped = type->fn == Fn::untyped;
        s.elem = type->fn == Fn::untyped ? Elem::u8 : type->elem;
        s.numel = std::uint64_t(numel.i);
        charge(sizeof(StorageRecord) + s.key.size());
        out_.storages.push_back(std::move(s));
        Node n;
        n.kind = Kind::storage;
        n.elem = out_.storages.back().elem;
        n.record = std::uint32_t(out_.storages.size() - 1);
        push(make(std::move(n)));
    }

    // ---- REDUCE: only the known callables, only with the expected arguments
    std::vector<std::uint64_t> ints_of(const Value& v, const char* fn, const char* what) {
        const Node* t = node(v);
        if (!t || t->kind != Kind::tuple) refuse(std::string(fn) + "'s " + what + " is not a tuple of integers");
        if (t->items.size() > kMaxRank)
            refuse(std::string(fn) + "'s " + what + " has " + std::to_string(t->items.size()) +
                   " dimensions (at most " + std::to_string(kMaxRank) + ")");
        std::vector<std::uint64_t> out;
        for (const Value& x : t->items) {
            if (x.tag != Tag::integer || x.i < 0)
                refuse(std::string(fn) + "'s " + what + " is not a tuple of non-negative integers");
            out.push_back(std::uint64_t(x.i));
        }
        charge(out.size() * 8);
        return out;
    }
    Value rebuild_tensor(const Node& fn, const std::vector<Value>& a) {
        const bool v3 = fn.fn == Fn::rebuild_v3;
        const char* name = v3 ? "_rebuild_tensor_v3" : "_rebuild_tensor_v2";
        const std::size_t base = v3 ? 7 : 6;  // v3 adds the dtype; either may add metadata
        if (a.size() != base && a.size() != base + 1)
            refuse(std::string(name) + " is called with " + std::to_string(a.size()) + " arguments (expected " +
                   (v3 ? "storage, offset, size, stride, requires_grad, hooks, dtype"
                       : "storage, offset, size, "
                         "stride, requires_grad, hooks") +
                   ")");
        const Node* storage = node(a[0]);
        if (!storage || storage->kind != Kind::storage)
            refuse(std::string(name) + "'s first argument is not a storage");
        const StorageRecord& s = out_.storages[storage->record];
        if (a[1].tag != Tag::integer || a[1].i < 0)
            refuse(std::string(name) + "'s storage offset is not a non-negative integer");
        TensorRecord t;
        t.storage = storage->record;
        t.offset = std::uint64_t(a[1].i);
        t.size = ints_of(a[2], name, "size");
        t.stride = ints_of(a[3], name, "stride");
        if (t.size.size() != t.stride.size())
            refuse(std::string(name) + "'s size and stride differ in length (" + std::to_string(t.size.size()) +
                   " and " + std::to_string(t.stride.size()) + ")");
        if (a[4].tag != Tag::boolean) refuse(std::string(name) + "'s requires_grad is not True or False");
        if (!is(a[5], Kind::dict)) refuse(std::string(name) + "'s backward hooks are not a dict");
        if (v3) {
            const Node* d = node(a[6]);
            if (!d || d->kind != Kind::callable || d->fn != Fn::dtype)
                refuse("_rebuild_tensor_v3's dtype is not a torch dtype" +
                       (d && d->kind == Kind::callable ? " (it is " + shown(d->text) + ")" : std::string()));
            if (!s.untyped) refuse("_rebuild_tensor_v3 is given a typed storage (torch writes an UntypedStorage)");
            t.elem = d->elem;
        } else {
            if (s.untyped) refuse("_rebuild_tensor_v2 is given an UntypedStorage without a dtype");
            t.elem = s.elem;
        }
        if (a.size() == base + 1) {  // metadata: torch writes it only when it says something
            const Node* m = node(a[base]);
            if (!(a[base].tag == Tag::none || (m && m->kind == Kind::dict && m->items.empty())))
                refuse("a tensor carries metadata (a negated or conjugated view, say), which attnscope does not apply");
        }
        charge(sizeof(TensorRecord));
        out_.tensors.push_back(std::move(t));
        Node n;
        n.kind = Kind::tensor;
        n.elem = out_.tensors.back().elem;
        n.record = std::uint32_t(out_.tensors.size() - 1);
        return make(std::move(n));
    }
    void reduce() {
        const Value args = pop();
        const Value callee = pop();
        const Node* fn = node(callee);
        if (!fn || fn->kind != Kind::callable) refuse("its pickle calls something that is not a known function");
        const Node* t = node(args);
        if (!t || t->kind != Kind::tuple) malformed("REDUCE's arguments are not a tuple");
        const std::vector<Value> a = t->items;  // copied: make() may move the arena
        switch (fn->fn) {
            case Fn::ordered_dict: {
                if (!a.empty()) refuse("collections.OrderedDict is called with arguments");
                Node d;
                d.kind = Kind::dict;
                push(make(std::move(d)));
                return;
            }
            case Fn::rebuild_v2:
            case Fn::rebuild_v3: {
                const Node copy = *fn;
                push(rebuild_tensor(copy, a));
                return;
            }
            case Fn::rebuild_parameter:
                if (a.size() != 3 || !is(a[0], Kind::tensor) || a[1].tag != Tag::boolean || !is(a[2], Kind::dict))
                    refuse("_rebuild_parameter is not called with (tensor, requires_grad, hooks)");
                push(a[0]);
                return;
            case Fn::none:
            case Fn::storage_class:
            case Fn::untyped:
            case Fn::dtype:
                break;
        }
        refuse("its pickle calls " + shown(fn->text) + ", which a state dict does not call");
    }

    // ---- one opcode; false at STOP
    // This switch stays whole, over the 80 lines a function may have elsewhere: it is the
    // unpickler's table of opcodes, a case each of a few lines, read as pickletools lists
    // them; split, the opcodes would be spread over functions that share the stack and the
    // memo, and a reader checking which opcodes are accepted would have to collect them.
    bool step(unsigned char op, std::size_t at) {
        op_at_ = at;
        switch (op) {
            case 0x80: {  // PROTO
                const auto v = static_cast<unsigned char>(byte());
                if (v < 2 || v > 5) refuse("its pickle uses protocol " + std::to_string(v) + " (expected 2 to 5)");
                return true;
            }
            case 0x95: {  // FRAME: a length only; the opcodes follow as usual
                const std::uint64_t n = le(8);
                if (n > p_.size() - pos_) malformed("a FRAME runs past the end of the pickle");
                return true;
            }
            case 'c': {  // GLOBAL
                std::string module = line();
                const std::string name = line();
                global(std::move(module), name);
                return true;
            }
            case 0x93: {  // STACK_GLOBAL
                const Value name = pop(), module = pop();
                if (!is(name, Kind::text) || !is(module, Kind::text)) malformed("STACK_GLOBAL's names are not strings");
                global(node(module)->text, node(name)->text);
                return true;
            }
            case 'q':  // BINPUT
                put(le(1));
                return true;
            case 'r':  // LONG_BINPUT
                put(le(4));
                return true;
            case 0x94:  // MEMOIZE
                put(memo_.size());
                return true;
            case 'h':  // BINGET
                get(le(1));
                return true;
            case 'j':  // LONG_BINGET
                get(le(4));
                return true;
            case '(':  // MARK
                if (marks_.size() >= kMaxObjects)
                    refuse("its pickle nests more than " + std::to_string(kMaxObjects) + " MARKs");
                if (marks_.size() == marks_.capacity()) charge(marks_.size() * sizeof(std::size_t) + 8);
                marks_.push_back(stack_.size());
                return true;
            case '}':    // EMPTY_DICT
            case ']':    // EMPTY_LIST
            case ')': {  // EMPTY_TUPLE
                Node n;
                n.kind = op == '}' ? Kind::dict : op == ']' ? Kind::list : Kind::tuple;
                push(make(std::move(n)));
                return true;
            }
            case 't': {  // TUPLE
                Node n;
                n.kind = Kind::tuple;
                n.items = pop_mark();
                push(make(std::move(n)));
                return true;
            }
            case 0x85:    // TUPLE1
            case 0x86:    // TUPLE2
            case 0x87: {  // TUPLE3
                const std::size_t k = std::size_t(op - 0x84);
                Node n;
                n.kind = Kind::tuple;
                n.items.resize(k);
                for (std::size_t i = k; i-- > 0;) n.items[i] = pop();
                push(make(std::move(n)));
                return true;
            }
            case 'X':  // BINUNICODE
                text(le(4));
                return true;
            case 0x8c:  // SHORT_BINUNICODE
                text(le(1));
                return true;
            case 0x8d:  // BINUNICODE8
                text(le(8));
                return true;
            case 'J':  // BININT
                push(integer(std::int32_t(std::uint32_t(le(4)))));
                return true;
            case 'K':  // BININT1
                push(integer(std::int64_t(le(1))));
                return true;
            case 'M':  // BININT2
                push(integer(std::int64_t(le(2))));
                return true;
            case 0x8a: {  // LONG1: n bytes, little-endian two's complement
                const std::size_t n = std::size_t(le(1));
                if (n > 8) refuse("its pickle holds an integer of " + std::to_string(n) + " bytes (at most 8)");
                std::uint64_t v = n ? le(int(n)) : 0;
                if (n > 0 && n < 8 && (v >> (8 * n - 1)) & 1) v |= ~std::uint64_t{0} << (8 * n);  // sign-extend
                push(integer(std::int64_t(v)));
                return true;
            }
            case 'G': {  // BINFLOAT: big-endian double
                need(8);
                std::uint64_t bits = 0;
                for (int k = 0; k < 8; ++k) bits = bits << 8 | static_cast<unsigned char>(p_[pos_ + std::size_t(k)]);
                pos_ += 8;
                push(Value{Tag::real, 0, std::bit_cast<double>(bits)});
                return true;
            }
            case 0x88:  // NEWTRUE
            case 0x89:  // NEWFALSE
                push(Value{Tag::boolean, op == 0x88 ? 1 : 0, 0});
                return true;
            case 'N':  // NONE
                push(Value{});
                return true;
            case 'Q':  // BINPERSID
                persistent_load();
                return true;
            case 'R':  // REDUCE
                reduce();
                return true;
            case 'b': {  // BUILD: only an OrderedDict's attributes (a state dict's _metadata), ignored
                const Value state = pop();
                if (!is(top(), Kind::dict) || !is(state, Kind::dict))
                    refuse("its pickle sets the state of an object (BUILD on something other than a state dict)");
                return true;
            }
            case 's': {  // SETITEM
                const Value v = pop(), k = pop();
                Node* d = node(top());
                if (!d || d->kind != Kind::dict) malformed("SETITEM on something that is not a dict");
                charge(2 * sizeof(Value));
                d->items.push_back(k);
                d->items.push_back(v);
                return true;
            }
            case 'u': {  // SETITEMS
                std::vector<Value> items = pop_mark();
                Node* d = node(top());
                if (!d || d->kind != Kind::dict) malformed("SETITEMS on something that is not a dict");
                if (items.size() % 2) malformed("SETITEMS with a key and no value");
                charge(items.size() * sizeof(Value));
                d->items.insert(d->items.end(), items.begin(), items.end());
                return true;
            }
            case 'a': {  // APPEND
                const Value v = pop();
                Node* l = node(top());
                if (!l || l->kind != Kind::list) malformed("APPEND to something that is not a list");
                charge(sizeof(Value));
                l->items.push_back(v);
                return true;
            }
            case 'e': {  // APPENDS
                std::vector<Value> items = pop_mark();
                Node* l = node(top());
                if (!l || l->kind != Kind::list) malformed("APPENDS to something that is not a list");
                charge(items.size() * sizeof(Value));
                l->items.insert(l->items.end(), items.begin(), items.end());
                return true;
            }
            case '.':  // STOP
                out_.root = pop();
                return false;
            default: {
                const char* name = opcode_name(op);
                static constexpr char kHex[] = "0123456789abcdef";
                const std::string code = std::string("0x") + kHex[op >> 4] + kHex[op & 15];
                refuse("its pickle uses opcode " + (name ? std::string(name) + " (" + code + ")" : code) +
                       ", which a state dict does not need");
            }
        }
    }

    std::string_view p_;
    const std::string& source_;
    const std::string& member_;
    std::size_t budget_, max_bytes_, used_ = 0;
    std::size_t pos_ = 0, op_at_ = 0;
    std::vector<Value> stack_;
    std::vector<std::size_t> marks_;
    std::unordered_map<std::uint64_t, Value> memo_;
    Pickle out_;
};

// ---- from the pickle's root to named tensors ------------------------------------------------
struct Named {
    std::string name;
    std::uint32_t tensor;  // TensorRecord index
};

class Flattener {
   public:
    // `budget`: what the memory limit (`max_bytes`) leaves for the names and their records.
    Flattener(const Pickle& p, const std::string& source, std::size_t budget, std::size_t max_bytes)
        : p_(p),
          source_(source),
          budget_(budget),
          max_bytes_(max_bytes),
          state_(p.nodes.size(), 0),
          emitted_(p.nodes.size(), 0) {}

    std::vector<Named> run() {
        const Node* root = p_.root.tag == Tag::object ? &p_.nodes[std::size_t(p_.root.i)] : nullptr;
        if (!root || root->kind != Kind::dict)
            refuse(std::string("it holds ") + describe(p_.root) + ", not a dict of named tensors");
        std::string name;
        walk(p_.root, name, 0);
        return std::move(out_);
    }

   private:
    [[noreturn]] void refuse(const std::string& what) const {
        throw InputError(shown_path(source_) + ": not a plain tensor state dict: " + what);
    }
    std::string describe(const Value& v) const {
        switch (v.tag) {
            case Tag::none:
                return "None";
            case Tag::boolean:
                return "a bool";
            case Tag::integer:
                return "an integer";
            case Tag::real:
                return "a float";
            case Tag::object:
                break;
        }
        switch (p_.nodes[std::size_t(v.i)].kind) {
            case Kind::text:
                return "a string";
            case Kind::tuple:
                return "a tuple";
            case Kind::list:
                return "a list";
            case Kind::dict:
                return "a dict";
            case Kind::callable:
                return "a function";
            case Kind::storage:
                return "a bare storage";
            case Kind::tensor:
                return "a single tensor";
        }
        return "something else";
    }
    static bool walked(Kind k) { return k == Kind::dict || k == Kind::list || k == Kind::tuple; }

    // The child `key` of the container named `name`: "name.key", or "key" at the top.
    std::string child(const std::string& name, const std::string& key) {
        std::string out = name.empty() ? key : name + "." + key;
        if (out.size() > kMaxNameBytes)
            refuse("a tensor name is longer than " + std::to_string(kMaxNameBytes) + " bytes ('" + shown(out) + "')");
        return out;
    }

    void visit(const Value& v, const std::string& name, std::size_t depth) {
        if (v.tag != Tag::object) return;  // numbers, bools, None: not tensors
        const std::size_t i = std::size_t(v.i);
        const Node& n = p_.nodes[i];
        if (n.kind == Kind::tensor) {
            names_bytes_ += name.size();
            if (names_bytes_ > kMaxNamesBytes)
                refuse("its tensor names take more than " + format_bytes(kMaxNamesBytes));
            // What listing it costs: the name (three copies), its record, shape and stride.
            const std::size_t cost = 3 * name.size() + 4 * sizeof(std::uint64_t) * p_.tensors[n.record].size.size() +
                                     sizeof(TensorInfo) + sizeof(Named) + 256;
            if (cost > budget_)
                throw MemoryLimitError(shown_path(source_) + ": listing its tensors (" + std::to_string(out_.size()) +
                                       " so far) needs more than " + io_detail::memory_limit_of(max_bytes_));
            budget_ -= cost;
            out_.push_back({name, n.record});
            return;
        }
        if (walked(n.kind)) walk(v, name, depth + 1);
        // strings, functions, bare storages: not tensors, skipped
    }

    void walk(const Value& v, const std::string& name, std::size_t depth) {
        const std::size_t i = std::size_t(v.i);
        const Node& n = p_.nodes[i];
        const std::string where = name.empty() ? "the top" : "'" + shown(name) + "'";
        if (state_[i] == 1) refuse(describe(v) + " contains itself (reached again at " + where + ")");
        if (state_[i] == 2) {
            if (emitted_[i] == 0) return;  // shared, but holds no tensor: nothing to name twice
            refuse(describe(v) + " holding tensors is reached twice (again at " + where + "): a shared container");
        }
        if (depth > kMaxDepth)
            refuse("dicts and lists nested more than " + std::to_string(kMaxDepth) + " deep (at " + where + ")");
        state_[i] = 1;
        const std::size_t before = out_.size();
        if (n.kind == Kind::dict) {
            for (std::size_t k = 0; k + 1 < n.items.size(); k += 2) {
                const Value& key = n.items[k];
                const Value& value = n.items[k + 1];
                std::string key_text;
                const Node* kn = key.tag == Tag::object ? &p_.nodes[std::size_t(key.i)] : nullptr;
                if (kn && kn->kind == Kind::text) {
                    key_text = kn->text;
                } else if (key.tag == Tag::integer) {
                    key_text = std::to_string(key.i);
                } else {
                    if (!holds_maybe_tensor(value)) continue;
                    refuse("a dict key at " + where + " is " + describe(key) + ", not a string or integer");
                }
                visit(value, child(name, key_text), depth);
            }
        } else {
            for (std::size_t k = 0; k < n.items.size(); ++k) {
                visit(n.items[k], child(name, std::to_string(k)), depth);
            }
        }
        state_[i] = 2;
        emitted_[i] = out_.size() - before;
    }
    bool holds_maybe_tensor(const Value& v) const {
        if (v.tag != Tag::object) return false;
        const Kind k = p_.nodes[std::size_t(v.i)].kind;
        return k == Kind::tensor || walked(k);
    }

    const Pickle& p_;
    const std::string& source_;
    std::size_t budget_, max_bytes_;
    std::vector<unsigned char> state_;  // 0 not seen, 1 being walked, 2 walked
    std::vector<std::size_t> emitted_;  // tensors named inside each walked container
    std::vector<Named> out_;
    std::size_t names_bytes_ = 0;
};

// ---- the source ---------------------------------------------------------------------------
struct Entry {
    Elem elem;
    std::uint64_t offset;
    std::vector<std::uint64_t> size, stride;
    std::size_t count;    // elements
    std::size_t member;   // index into members_
    std::string storage;  // "data/0", for messages
};

// Calls put(k, position) for each element k of the view in C order, with its position
// in the storage (in elements). The positions were checked against the storage at open.
template <typename Put>
void gather(const Entry& en, Put put) {
    if (en.count == 0) return;
    const std::size_t rank = en.size.size();
    const std::uint64_t inner = rank ? en.size[rank - 1] : 1, step = rank ? en.stride[rank - 1] : 0;
    std::vector<std::uint64_t> index(rank ? rank - 1 : 0, 0);  // the outer axes
    std::uint64_t base = en.offset;
    for (std::size_t k = 0; k < en.count; k += std::size_t(inner)) {
        for (std::uint64_t j = 0; j < inner; ++j) put(k + std::size_t(j), base + j * step);
        for (std::size_t d = index.size(); d-- > 0;) {
            base += en.stride[d];
            if (++index[d] < en.size[d]) break;
            base -= en.stride[d] * en.size[d];
            index[d] = 0;
        }
    }
}

// Whether the tensor's elements lie in C order, one after the other, in its storage.
bool is_contiguous(const Entry& en) {
    for (std::size_t d = en.size.size(), want = 1; d-- > 0;) {
        if (en.size[d] != 1 && en.stride[d] != want) return false;
        want *= std::size_t(en.size[d]);
    }
    return true;
}

class TorchZipSource final : public TensorSource {
   public:
    // `mapped`: `bytes` are a read-only mapping of the file (FileBytes::mapped).
    TorchZipSource(std::string_view bytes, const std::string& source, std::size_t max_bytes,
                   std::shared_ptr<const void> keep, bool mapped = false)
        : bytes_(bytes),
          source_(source),
          keep_(std::move(keep)),
          mapped_(mapped && keep_),
          zip_(bytes_, source_, "a valid PyTorch zip archive") {
        open(max_bytes);
    }
    TorchZipSource(const TorchZipSource&) = delete;
    TorchZipSource& operator=(const TorchZipSource&) = delete;

    const std::vector<TensorInfo>& tensors() const override { return infos_; }
    Array read(const std::string& name, std::size_t max_bytes) const override;

   private:
    [[noreturn]] void fail(const std::string& what) const { throw InputError(shown_path(source_) + ": " + what); }
    void open(std::size_t max_bytes);
    std::string_view member_bytes(std::size_t i, std::shared_ptr<const void>& inflated) const;
    void add_tensor(const Named& named, const Pickle& p, const std::string& prefix,
                    const std::map<std::string, std::size_t>& by_member);

    std::string_view bytes_;
    std::string source_;
    SharedText file_{source_};  // every tensor's TensorInfo::file
    std::shared_ptr<const void> keep_;
    bool mapped_ = false;
    ZipReader zip_;
    std::vector<Member> members_;
    std::vector<ZipReader::Span> spans_;
    mutable std::vector<unsigned char> crc_checked_;  // stored members whose CRC-32 a read has checked
    std::vector<TensorInfo> infos_;
    std::vector<Entry> entries_;
    std::map<std::string, std::size_t> by_name_;
};

// The archive's members and the pickle, then every tensor checked against its storage.
void TorchZipSource::open(std::size_t max_bytes) {
    // 1. The directory; the members' places (no overlaps, names as the directory says).
    std::uint64_t directory_offset = 0;
    members_ = zip_.members(directory_offset);
    spans_ = io_detail::member_spans(zip_, members_, directory_offset, source_, "a valid PyTorch zip archive");
    crc_checked_.assign(members_.size(), 0);
    std::map<std::string, std::size_t> by_member;
    for (std::size_t i = 0; i < members_.size(); ++i)
        if (!by_member.emplace(members_[i].name, i).second)
            fail("member '" + shown(members_[i].name) + "' appears twice in the archive");

    // 2. ARCHIVE/data.pkl: the one member named so, in a top folder of any name.
    std::string prefix;
    std::size_t pkl = members_.size();
    for (std::size_t i = 0; i < members_.size(); ++i) {
        const std::string& n = members_[i].name;
        const std::size_t slash = n.find('/');
        if (slash != std::string::npos && slash > 0 && n.compare(slash, std::string::npos, "/data.pkl") == 0) {
            if (pkl != members_.size())
                fail("holds two pickles ('" + shown(members_[pkl].name) + "' and '" + shown(n) +
                     "'): not a PyTorch zip archive");
            pkl = i;
            prefix = n.substr(0, slash);
        }
    }
    if (pkl == members_.size()) fail("a zip archive without ARCHIVE/data.pkl: not a PyTorch file (torch.save)");

    // 3. ARCHIVE/byteorder: little-endian data only.
    if (const auto it = by_member.find(prefix + "/byteorder"); it != by_member.end()) {
        if (members_[it->second].size > 16) fail("its byteorder member is not \"little\" or \"big\"");
        std::shared_ptr<const void> inflated;
        const std::string_view order = member_bytes(it->second, inflated);
        if (order == "big")
            fail("written on a big-endian machine (byteorder \"big\"); attnscope reads little-endian checkpoints");
        if (order != "little") fail("its byteorder member says \"" + shown(order) + "\", expected \"little\"");
    }

    // 4. The pickle, within the memory limit with what it holds.
    const Member& pm = members_[pkl];
    const std::size_t inflated_size = pm.method == 0 ? 0 : std::size_t(pm.size);
    if (inflated_size > max_bytes)
        throw MemoryLimitError(shown_path(source_) + ": its pickle is " + format_bytes(inflated_size) +
                               " decompressed, over " + io_detail::memory_limit_of(max_bytes));
    if (pm.method == 8 && pm.size / 1032 > pm.comp_size + 1)
        fail("its pickle claims more bytes than deflate can expand from its size (corrupt?)");
    std::shared_ptr<const void> pkl_buffer;
    const std::string_view pickle = member_bytes(pkl, pkl_buffer);
    const Pickle p = Unpickler(pickle, source_, pm.name, max_bytes - inflated_size, max_bytes).run();
    pkl_buffer.reset();

    // 5. The names, then each tensor against its storage member.
    const std::vector<Named> named = Flattener(p, source_, max_bytes - p.used, max_bytes).run();
    for (const Named& n : named) add_tensor(n, p, prefix, by_member);
}

void TorchZipSource::add_tensor(const Named& named, const Pickle& p, const std::string& prefix,
                                const std::map<std::string, std::size_t>& by_member) {
    const TensorRecord& t = p.tensors[named.tensor];
    const StorageRecord& s = p.storages[t.storage];
    const std::string shown_name = "'" + shown(named.name) + "'";
    if (by_name_.count(named.name))
        fail("tensor name " + shown_name + " appears twice (a key with a dot beside a nested dict?)");
    const ElemInfo& e = info(t.elem);
    const std::string storage = "data/" + s.key;
    // The storage member: present, and as long as the persistent id says.
    const auto it = by_member.find(prefix + "/" + storage);
    if (it == by_member.end())
        fail("tensor " + shown_name + " needs storage member '" + shown(prefix + "/" + storage) +
             "', which the archive does not have");
    const Member& m = members_[it->second];
    const std::uint64_t storage_elems = s.untyped ? s.numel / e.size : s.numel;
    std::uint64_t storage_bytes = 0;
    if (__builtin_mul_overflow(storage_elems, std::uint64_t(e.size), &storage_bytes) || storage_bytes > m.size)
        fail("storage '" + shown(storage) + "' holds " + std::to_string(m.size) + " bytes, but the pickle gives it " +
             std::to_string(storage_elems) + " " + e.numpy + " elements" +
             (storage_bytes ? " (" + std::to_string(storage_bytes) + " bytes)" : std::string()) +
             " (truncated or corrupt)");
    // The view: every element it reaches lies within the storage.
    std::vector<std::size_t> shape(t.size.begin(), t.size.end());
    std::uint64_t count = 1, last = t.offset;
    bool overflow = false;
    for (std::size_t d = 0; d < t.size.size(); ++d) overflow |= __builtin_mul_overflow(count, t.size[d], &count);
    if (overflow || count > std::numeric_limits<std::size_t>::max() / 8)
        fail("tensor " + shown_name + " has shape " + shape_str(shape) + ", more elements than can be addressed");
    if (count > 0) {
        for (std::size_t d = 0; d < t.size.size(); ++d) {
            std::uint64_t reach = 0;
            overflow |= __builtin_mul_overflow(t.size[d] - 1, t.stride[d], &reach) ||
                        __builtin_add_overflow(last, reach, &last);
        }
    }
    if (overflow || (count > 0 ? last >= storage_elems : t.offset > storage_elems)) {
        std::vector<std::size_t> stride(t.stride.begin(), t.stride.end());
        fail("tensor " + shown_name + " of shape " + shape_str(shape) + ", stride " + shape_str(stride) +
             " at offset " + std::to_string(t.offset) + " reaches past the end of storage '" + shown(storage) +
             "', which holds " + std::to_string(storage_elems) + " " + e.numpy + " elements");
    }
    TensorInfo ti;
    ti.name = named.name;
    ti.dtype = e.numpy;
    ti.shape = std::move(shape);
    ti.bytes = std::size_t(count) * e.size;
    ti.file = file_;
    by_name_.emplace(named.name, infos_.size());
    infos_.push_back(std::move(ti));
    entries_.push_back({t.elem, t.offset, t.size, t.stride, std::size_t(count), it->second, storage});
}

// Member i's bytes: stored ones in place (their CRC-32 checked once), deflated ones
// inflated into `inflated` (checked every time: nothing is kept).
std::string_view TorchZipSource::member_bytes(std::size_t i, std::shared_ptr<const void>& inflated) const {
    const Member& m = members_[i];
    if (m.method == 0 && crc_checked_[i]) return bytes_.substr(std::size_t(spans_[i].data), std::size_t(m.size));
    const std::string_view out = zip_.extract(m, spans_[i], inflated);
    if (m.method == 0) crc_checked_[i] = 1;
    return out;
}

Array TorchZipSource::read(const std::string& name, std::size_t max_bytes) const {
    const auto found = by_name_.find(name);
    if (found == by_name_.end())
        fail("no tensor '" + shown(name) + "' in it (" + std::to_string(infos_.size()) + " tensors)");
    const TensorInfo& ti = infos_[found->second];
    const Entry& en = entries_[found->second];
    const ElemInfo& e = info(en.elem);
    const Member& m = members_[en.member];
    const std::string origin = shown_path(source_) + ": " + shown(name);

    // 1. The memory limit: the numbers as doubles (what a float64 run holds of them, kept
    //    as stored or not), and a deflated storage's inflated bytes beside them.
    std::size_t need = en.count * sizeof(double), total = 0;
    if (__builtin_add_overflow(need, m.method == 0 ? std::size_t{0} : std::size_t(m.size), &total) || total > max_bytes)
        throw MemoryLimitError(origin + ": shape " + shape_str(ti.shape) + " needs " +
                               format_bytes(total ? total : need) + " in memory, over " +
                               io_detail::memory_limit_of(max_bytes));
    if (m.method == 8 && m.size / 1032 > m.comp_size + 1)
        fail("storage '" + shown(en.storage) + "' claims more bytes than deflate can expand from its size (corrupt?)");

    // 2. The storage's bytes (CRC-32 checked), and where the tensor starts in them.
    std::shared_ptr<const void> inflated;
    const std::string_view storage = member_bytes(en.member, inflated);
    const char* base = storage.data() + en.offset * e.size;

    Array a;
    a.shape = ti.shape;
    a.dtype = e.numpy;
    a.origin = origin;
    const std::optional<Array::Held> held = held_of(en.elem);
    if (held) a.held = *held;
    // Read from the mapped file: its pages leave the process's memory once they are copied,
    // or once the last copy of an array read in place is gone (one layer's at a time).
    const bool give_back = mapped_ && !inflated;

    // 3a. Contiguous floats: kept as stored, in place when the bytes stay alive and the
    //     start is aligned for its type; else one copy.
    const std::size_t nbytes = en.count * e.size;
    if (held && is_contiguous(en)) {
        if (reinterpret_cast<std::uintptr_t>(base) % e.size == 0 && (inflated || keep_)) {
            a.stored = std::string_view(base, nbytes);
            a.keep = inflated ? inflated : give_back ? keep_until_dropped(keep_, storage) : keep_;
        } else {
            auto copy = std::make_shared<const std::string>(base, nbytes);
            a.stored = *copy;
            a.keep = std::move(copy);
            if (give_back) drop_mapped_pages(storage);
        }
        return a;
    }

    // 3b. Anything else gathered into C order: floats into a buffer of their own stored
    //     type, every other type widened to double. Each position was checked at open.
    //     The last axis is walked by its stride; the outer axes by an odometer.
    const char* start = storage.data();
    if (held) {
        auto buffer = std::make_shared<std::string>(nbytes, '\0');
        char* out = buffer->data();
        gather(en,
               [&](std::size_t k, std::uint64_t pos) { std::memcpy(out + k * e.size, start + pos * e.size, e.size); });
        a.stored = *buffer;
        a.keep = std::move(buffer);
    } else {
        a.values.resize(en.count);
        gather(en, [&](std::size_t k, std::uint64_t pos) { a.values[k] = widen(start + pos * e.size, en.elem); });
    }
    if (give_back) drop_mapped_pages(storage);
    return a;
}

}  // namespace

std::unique_ptr<TensorSource> open_torch_zip(const std::string& path, std::size_t max_bytes) {
    FileBytes file = map_file_lazily(path, max_bytes);
    return std::make_unique<TorchZipSource>(file.bytes, path, max_bytes, std::move(file.keep), file.mapped);
}

std::unique_ptr<TensorSource> parse_torch_zip(std::string_view bytes, const std::string& source, std::size_t max_bytes,
                                              std::shared_ptr<const void> keep) {
    return std::make_unique<TorchZipSource>(bytes, source, max_bytes, std::move(keep));
}

}  // namespace attnscope
