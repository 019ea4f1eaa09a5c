// Structure-aware mutation of .npz inputs, for libFuzzer's LLVMFuzzerCustomMutator.
//
// Every .npz member carries a CRC-32 and its sizes, so a byte flipped inside a member is
// almost always refused as corrupt, and plain mutation never gets past the zip layer to
// the .npy headers and arrays inside. This mutator takes the archive apart (walking its
// local headers; stored and deflated members, zip64 sizes), mutates the *content* —
// a member's bytes, its name, the member list, stored vs deflate, zip64 records — and
// writes a well-formed archive again, with correct CRCs and sizes (or, now and then, with
// records that disagree: shared bytes, two names for one member, a miscount; ZipLies).
// One mutation in four stays a plain byte-level one, so the zip records themselves keep
// being fuzzed too.
#pragma once

#include <zlib.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

// libFuzzer's own mutator, for bytes without structure.
extern "C" std::size_t LLVMFuzzerMutate(std::uint8_t* data, std::size_t size, std::size_t max_size);

namespace attnscope::fuzz {

struct ZipMember {
    std::string name;
    std::string data;  // uncompressed
    bool deflate = false;
};

namespace zip_detail {

inline std::uint64_t le(std::string_view b, std::size_t at, int n) {
    std::uint64_t v = 0;
    for (int k = n - 1; k >= 0; --k) v = v << 8 | static_cast<unsigned char>(b[at + std::size_t(k)]);
    return v;
}

inline void put(std::string& s, std::uint64_t v, int n) {
    for (int k = 0; k < n; ++k) s += char(v >> (8 * k) & 0xff);
}

inline std::uint32_t crc(const std::string& s) {
    return std::uint32_t(::crc32(::crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(s.data()), uInt(s.size())));
}

// Raw deflate (no zlib header), as zip members use it.
inline std::string deflate_raw(const std::string& in) {
    z_stream z{};
    if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) return {};
    std::string out(deflateBound(&z, uLong(in.size())), '\0');
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    z.avail_in = uInt(in.size());
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = uInt(out.size());
    ::deflate(&z, Z_FINISH);
    out.resize(z.total_out);
    deflateEnd(&z);
    return out;
}

// Inflates at most `limit` bytes; false when the data is not complete, valid deflate.
inline bool inflate_raw(std::string_view in, std::size_t limit, std::string& out) {
    z_stream z{};
    if (inflateInit2(&z, -MAX_WBITS) != Z_OK) return false;
    out.assign(limit, '\0');
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    z.avail_in = uInt(in.size());
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = uInt(out.size());
    int rc = ::inflate(&z, Z_FINISH);
    out.resize(z.total_out);
    inflateEnd(&z);
    return rc == Z_STREAM_END;
}

}  // namespace zip_detail

// The members of an archive, read from its local headers in order; false when the bytes
// do not start with a readable member (then only byte-level mutation applies).
inline bool split_zip(std::string_view b, std::vector<ZipMember>& out, std::size_t max_member = 1 << 20) {
    using zip_detail::le;
    out.clear();
    std::size_t at = 0;
    while (at + 30 <= b.size() && le(b, at, 4) == 0x04034b50) {
        std::uint64_t flags = le(b, at + 6, 2), method = le(b, at + 8, 2);
        std::uint64_t csize = le(b, at + 18, 4), usize = le(b, at + 22, 4);
        std::size_t name_len = std::size_t(le(b, at + 26, 2)), extra_len = std::size_t(le(b, at + 28, 2));
        if ((flags & 9) || (method != 0 && method != 8)) return false;  // encrypted, data descriptor
        if (at + 30 + name_len + extra_len > b.size()) return false;
        std::size_t e = at + 30 + name_len, e_end = e + extra_len;
        while (e + 4 <= e_end) {  // zip64 extra field: uncompressed, then compressed size
            std::size_t id = std::size_t(le(b, e, 2)), len = std::size_t(le(b, e + 2, 2));
            if (id == 1 && len >= 16 && e + 4 + len <= e_end) {
                usize = le(b, e + 4, 8);
                csize = le(b, e + 12, 8);
            }
            e += 4 + len;
        }
        std::size_t data = at + 30 + name_len + extra_len;
        if (csize > b.size() - data || usize > max_member) return false;
        ZipMember m;
        m.name = std::string(b.substr(at + 30, name_len));
        m.deflate = method == 8;
        std::string_view comp = b.substr(data, std::size_t(csize));
        if (m.deflate) {
            if (!zip_detail::inflate_raw(comp, std::size_t(usize), m.data)) return false;
        } else {
            m.data = std::string(comp);
        }
        out.push_back(std::move(m));
        at = data + std::size_t(csize);
    }
    return !out.empty();
}

// Ways for an archive's records to disagree, which a well-formed archive never reaches
// and the reader must refuse: directory entries sharing one member's bytes, a local
// header naming its member otherwise than the directory, an end record miscounting.
struct ZipLies {
    std::vector<std::pair<std::string, std::size_t>> aliases;  // more entries: (name, member whose bytes they name)
    std::size_t renamed = std::size_t(-1);                     // this member's local header is named...
    std::string local_name;                                    // ... this
    std::uint64_t count_delta = 0;                             // added to the end records' entry count
};

// An archive of `members`: local headers, central directory, end record; with zip64 set,
// sizes and offsets in zip64 extra fields and a zip64 end record (as attnscope's own
// write_npz does), otherwise plain 32-bit records (as np.savez does). Well-formed unless
// `lies` says otherwise.
inline std::string build_zip(const std::vector<ZipMember>& members, bool zip64, const ZipLies& lies = {}) {
    using zip_detail::put;
    constexpr std::uint64_t k32 = 0xffffffffu;
    std::string out, central;
    // One record of a member: its local header or its directory entry.
    auto record = [&](std::string& s, bool is_central, const std::string& name, const ZipMember& m,
                      const std::string& comp, std::uint32_t crc, std::uint64_t offset) {
        put(s, is_central ? 0x02014b50 : 0x04034b50, 4);
        if (is_central) put(s, zip64 ? 45 : 20, 2);  // made by
        put(s, zip64 ? 45 : 20, 2);                  // needed
        put(s, 0, 2);                                // flags
        put(s, m.deflate ? 8 : 0, 2);
        put(s, 0, 2);     // time
        put(s, 0x21, 2);  // date 1980-01-01
        put(s, crc, 4);
        put(s, zip64 ? k32 : comp.size(), 4);
        put(s, zip64 ? k32 : m.data.size(), 4);
        put(s, name.size(), 2);
        put(s, zip64 ? (is_central ? 28 : 20) : 0, 2);  // extra length
        if (is_central) {
            put(s, 0, 2);  // comment
            put(s, 0, 2);  // disk
            put(s, 0, 2);  // internal attributes
            put(s, 0, 4);  // external attributes
            put(s, zip64 ? k32 : offset, 4);
        }
        s += name;
        if (zip64) {
            put(s, 1, 2);
            put(s, is_central ? 24 : 16, 2);
            put(s, m.data.size(), 8);
            put(s, comp.size(), 8);
            if (is_central) put(s, offset, 8);
        }
    };
    struct Written {
        std::string comp;
        std::uint32_t crc;
        std::uint64_t offset;
    };
    std::vector<Written> written;
    for (std::size_t i = 0; i < members.size(); ++i) {
        const ZipMember& m = members[i];
        Written w{m.deflate ? zip_detail::deflate_raw(m.data) : m.data, zip_detail::crc(m.data), out.size()};
        record(out, false, i == lies.renamed ? lies.local_name : m.name, m, w.comp, w.crc, w.offset);
        record(central, true, m.name, m, w.comp, w.crc, w.offset);
        out += w.comp;
        written.push_back(std::move(w));
    }
    for (const auto& [name, i] : lies.aliases)
        if (i < members.size())
            record(central, true, name, members[i], written[i].comp, written[i].crc, written[i].offset);
    const std::uint64_t entries = members.size() + lies.aliases.size() + lies.count_delta;
    const std::uint64_t dir_offset = out.size();
    out += central;
    if (zip64) {
        const std::uint64_t z64 = out.size();
        put(out, 0x06064b50, 4);
        put(out, 44, 8);
        put(out, 45, 2);
        put(out, 45, 2);
        put(out, 0, 4);
        put(out, 0, 4);
        put(out, entries, 8);
        put(out, entries, 8);
        put(out, central.size(), 8);
        put(out, dir_offset, 8);
        put(out, 0x07064b50, 4);
        put(out, 0, 4);
        put(out, z64, 8);
        put(out, 1, 4);
    }
    put(out, 0x06054b50, 4);
    put(out, 0, 2);
    put(out, 0, 2);
    put(out, zip64 ? 0xffff : entries & 0xffff, 2);
    put(out, zip64 ? 0xffff : entries & 0xffff, 2);
    put(out, zip64 ? k32 : central.size(), 4);
    put(out, zip64 ? k32 : dir_offset, 4);
    put(out, 0, 2);
    return out;
}

// Mutates `data` (an .npz archive, or anything) in place; returns the new size.
inline std::size_t mutate_npz(std::uint8_t* data, std::size_t size, std::size_t max_size, unsigned seed) {
    std::minstd_rand rng(seed);
    std::vector<ZipMember> members;
    const std::string_view bytes(reinterpret_cast<const char*>(data), size);
    if (rng() % 4 == 0 || !split_zip(bytes, members)) return LLVMFuzzerMutate(data, size, max_size);

    // Whether the input used zip64 records: keep that unless the mutation toggles it.
    bool zip64 = bytes.find(std::string_view("PK\x06\x06", 4)) != std::string_view::npos;
    ZipMember& m = members[rng() % members.size()];
    auto mutate_string = [&](std::string& s, std::size_t cap) {
        std::size_t n = s.size();
        s.resize(std::max(cap, n + 1));
        s.resize(LLVMFuzzerMutate(reinterpret_cast<std::uint8_t*>(s.data()), n, s.size()));
    };
    ZipLies lies;
    switch (rng() % 13) {
        case 0:
        case 1:
        case 2:
        case 3:
        case 4:  // a member's bytes: its .npy header and data
            mutate_string(m.data, std::min<std::size_t>(max_size, m.data.size() * 2 + 64));
            break;
        case 5:  // a member's name ("x.npy", "expected/W_Q.npy", ...)
            mutate_string(m.name, 64);
            break;
        case 6:  // a member twice
            members.push_back(m);
            break;
        case 7:  // a member fewer
            members.erase(members.begin() + (&m - members.data()));
            break;
        case 8:  // stored <-> deflate
            m.deflate = !m.deflate;
            break;
        case 9:  // another entry sharing this member's bytes (a dozen names for one deflated gigabyte)
            lies.aliases.push_back({rng() % 2 ? "W_Q.npy" : m.name + "2", std::size_t(&m - members.data())});
            break;
        case 10:  // the local header names the member otherwise
            lies.renamed = std::size_t(&m - members.data());
            lies.local_name = rng() % 2 ? "W_K.npy" : m.name + "x";
            break;
        case 11:  // an end record counting one entry fewer (0 for one member) or more
            lies.count_delta = rng() % 2 ? std::uint64_t(-1) : 1;
            break;
        default:
            zip64 = !zip64;
            break;
    }
    const std::string out = build_zip(members, zip64, lies);
    if (out.size() > max_size) return LLVMFuzzerMutate(data, size, max_size);
    std::memcpy(data, out.data(), out.size());
    return out.size();
}

}  // namespace attnscope::fuzz
