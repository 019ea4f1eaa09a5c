// .npz archives: numpy's np.savez (stored) and np.savez_compressed (deflate) zip files,
// zip64 records included. Members "NAME.npy" become arrays named NAME.
#include <zlib.h>

#include "attnscope/base/errors.hpp"
#include "attnscope/io/read.hpp"
#include "attnscope/io/write.hpp"
#include "bytes.hpp"
#include "zip.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace attnscope {
namespace {

// ---- CRC-32 -------------------------------------------------------------------------
// zlib's crc32 runs at ~3 GB/s here; folding with carry-less multiplication (PCLMULQDQ,
// on every x86-64 CPU of the last decade, checked at run time) at ~11 GB/s. Same
// polynomial, same result: tests/test_io.cpp compares the two on every length and offset.
#if defined(__x86_64__) || defined(__i386__)
#define ATTNSCOPE_CRC_FOLD 1
__attribute__((target("pclmul,sse4.1"))) inline __m128i fold128(__m128i acc, __m128i k, __m128i next) {
    const __m128i lo = _mm_clmulepi64_si128(acc, k, 0x00), hi = _mm_clmulepi64_si128(acc, k, 0x11);
    return _mm_xor_si128(_mm_xor_si128(hi, lo), next);
}
// CRC-32 (zlib's polynomial, reflected) of len bytes, len >= 64 and a multiple of 16,
// continuing from `crc` in zlib's convention (pre- and post-inverted).
__attribute__((target("pclmul,sse4.1"))) std::uint32_t crc32_fold(std::uint32_t crc, const unsigned char* buf,
                                                                  std::size_t len) {
    // Folding constants for the reflected polynomial 0x1DB710641 (Intel, "Fast CRC
    // Computation for Generic Polynomials Using PCLMULQDQ"): x^(4*128+32), x^(4*128-32)
    // mod P for folding 512 bits; x^(128+32), x^(128-32) for 128 bits; x^64 mod P; P and mu.
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596, 0x0154442bd4);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009e, 0x01751997d0);
    const __m128i k5k0 = _mm_set_epi64x(0x0000000000, 0x0163cd6124);
    const __m128i poly = _mm_set_epi64x(0x01f7011641, 0x01db710641);
    __m128i x1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf + 0x00));
    __m128i x2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf + 0x10));
    __m128i x3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf + 0x20));
    __m128i x4 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf + 0x30));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128(int(~crc)));
    __m128i k = k1k2;
    buf += 64;
    len -= 64;
    while (len >= 64) {  // four 128-bit lanes, each folded 512 bits ahead
        __m128i y1 = _mm_clmulepi64_si128(x1, k, 0x00), y2 = _mm_clmulepi64_si128(x2, k, 0x00);
        __m128i y3 = _mm_clmulepi64_si128(x3, k, 0x00), y4 = _mm_clmulepi64_si128(x4, k, 0x00);
        x1 = _mm_clmulepi64_si128(x1, k, 0x11);
        x2 = _mm_clmulepi64_si128(x2, k, 0x11);
        x3 = _mm_clmulepi64_si128(x3, k, 0x11);
        x4 = _mm_clmulepi64_si128(x4, k, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, y1), _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf + 0x00)));
        x2 = _mm_xor_si128(_mm_xor_si128(x2, y2), _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf + 0x10)));
        x3 = _mm_xor_si128(_mm_xor_si128(x3, y3), _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf + 0x20)));
        x4 = _mm_xor_si128(_mm_xor_si128(x4, y4), _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf + 0x30)));
        buf += 64;
        len -= 64;
    }
    // Fold the four lanes into one, then any remaining 16-byte blocks into it.
    k = k3k4;
    x1 = fold128(x1, k, x2);
    x1 = fold128(x1, k, x3);
    x1 = fold128(x1, k, x4);
    while (len >= 16) {
        x1 = fold128(x1, k, _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf)));
        buf += 16;
        len -= 16;
    }
    // 128 bits -> 64 -> Barrett reduction to 32.
    const __m128i mask32 = _mm_setr_epi32(~0, 0, ~0, 0);
    x2 = _mm_clmulepi64_si128(x1, k, 0x10);
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2);
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_and_si128(x1, mask32);
    x1 = _mm_clmulepi64_si128(x1, k5k0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    x2 = _mm_and_si128(x1, mask32);
    x2 = _mm_clmulepi64_si128(x2, poly, 0x10);
    x2 = _mm_and_si128(x2, mask32);
    x2 = _mm_clmulepi64_si128(x2, poly, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return ~std::uint32_t(_mm_extract_epi32(x1, 1));
}
#endif

}  // namespace

std::uint32_t crc32_bytes(std::uint32_t crc, const unsigned char* p, std::size_t n) {
#ifdef ATTNSCOPE_CRC_FOLD
    static const bool fold = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
    if (fold && n >= 64) {
        const std::size_t whole = n & ~std::size_t{15};
        crc = crc32_fold(crc, p, whole);
        p += whole;
        n -= whole;
    }
#endif
    while (n > 0) {  // zlib's crc32 takes at most 4 GiB per call
        const std::size_t k = std::min<std::size_t>(n, 1u << 30);
        crc = std::uint32_t(::crc32(crc, p, uInt(k)));
        p += k;
        n -= k;
    }
    return crc;
}

namespace {

using io_detail::load_le;
using io_detail::Member;
using io_detail::shown;
using io_detail::shown_path;
using io_detail::ZipReader;

}  // namespace

namespace {

// 1. The names, before anything is inflated: each member is "NAME.npy" and gives the
//    array NAME; a member that is not a .npy file, a name twice, or a name the caller will
//    not use (check_name) is refused here, whatever size it claims.
std::vector<std::string> array_names(const std::vector<Member>& members, const std::string& source,
                                     const NameCheck& check_name) {
    std::vector<std::string> names;
    std::set<std::string> seen;
    for (const Member& m : members) {
        std::string name = m.name;
        if (name.size() > 4 && ends_with(name, ".npy"))
            name.resize(name.size() - 4);
        else
            throw InputError(shown_path(source) + ": member '" + shown(m.name) + "' is not a .npy array");
        if (!seen.insert(name).second)
            throw InputError(shown_path(source) + ": array '" + shown(name) + "' appears twice in the archive");
        if (check_name) check_name(shown_path(source), name);
        names.push_back(std::move(name));
    }
    return names;
}

// 3. Every declared size, before anything is inflated. Deflate cannot expand data more
//    than 1032-fold: a directory claiming more is lying (a decompression bomb or
//    corruption). What the members will hold decompressed, beside the archive itself
//    (in memory as it is read; stored members are read in place in it), must fit the
//    memory limit.
void check_declared_sizes(const std::vector<Member>& members, std::size_t archive, const std::string& source,
                          std::size_t max_bytes) {
    std::size_t inflated = 0;
    for (const Member& m : members) {
        if (m.method == 8 && m.size / 1032 > m.comp_size + 1)
            throw InputError(shown_path(source) + ": member '" + shown(m.name) + "' claims " +
                             format_bytes(std::size_t(m.size)) + " from " + format_bytes(std::size_t(m.comp_size)) +
                             " of deflate data, more than deflate can expand (corrupt, or a decompression bomb)");
        std::size_t total = 0;
        if (m.method != 0 && __builtin_add_overflow(inflated, std::size_t(m.size), &inflated)) inflated = kNoLimit;
        if (__builtin_add_overflow(inflated, archive, &total) || total > max_bytes)
            throw MemoryLimitError(shown_path(source) + ": its members would need " + format_bytes(inflated) +
                                   " decompressed beside the archive's " + format_bytes(archive) + ", over " +
                                   io_detail::memory_limit_of(max_bytes));
    }
}

// 4. The member's array, within what the limit leaves after the `held` bytes of the
//    arrays read before it. A stored member is parsed in place in the archive (kept alive
//    by `keep`), a deflated one in its own inflated buffer.
Array read_member(const ZipReader& zip, const Member& m, const ZipReader::Span& where, const std::string& name,
                  const std::string& source, std::size_t max_bytes, std::size_t held,
                  const std::shared_ptr<const void>& keep) {
    try {
        std::shared_ptr<const void> inflated;
        const std::string_view member = zip.extract(m, where, inflated);
        return parse_npy(member, shown_path(source) + ": " + shown(name), max_bytes - held, inflated ? inflated : keep);
    } catch (const MemoryLimitError&) {
        if (held == 0) throw;  // this array alone is too large: its own message says so
        throw MemoryLimitError(shown_path(source) + ": its arrays together (reaching '" + shown(name) + "') are over " +
                               io_detail::memory_limit_of(max_bytes));
    }
}

}  // namespace

Bundle parse_npz(std::string_view bytes, const std::string& source, std::size_t max_bytes,
                 std::shared_ptr<const void> keep, const NameCheck& check_name) {
    Bundle bundle;
    bundle.source = source;
    ZipReader zip(bytes, source, "a valid .npz (zip) archive");
    std::uint64_t directory_offset = 0;
    const std::vector<Member> members = zip.members(directory_offset);
    // 1.-3. Names, places and sizes of every member; only then 4. inflate and parse each.
    const std::vector<std::string> names = array_names(members, source, check_name);
    const std::vector<ZipReader::Span> spans =
        io_detail::member_spans(zip, members, directory_offset, source, "a valid .npz archive");
    check_declared_sizes(members, bytes.size(), source, max_bytes);
    std::size_t held = 0;  // bytes of the arrays read so far: the limit covers them together
    for (std::size_t i = 0; i < members.size(); ++i) {
        const Array& a = bundle.arrays[names[i]] =
            read_member(zip, members[i], spans[i], names[i], source, max_bytes, held, keep);
        held += io_detail::held_bytes(a);
    }
    return bundle;
}

// ---- writer -------------------------------------------------------------------------
namespace {

using io_detail::k32;
using io_detail::kCentralSig;
using io_detail::kEndSig;
using io_detail::kLocalSig;
using io_detail::kZip64EndSig;
using io_detail::kZip64LocatorSig;
using io_detail::put_le;

std::uint32_t crc_of(const std::string& head, const void* data, std::size_t n) {
    const std::uint32_t crc = crc32_bytes(0, reinterpret_cast<const unsigned char*>(head.data()), head.size());
    return crc32_bytes(crc, static_cast<const unsigned char*>(data), n);
}

// One stored member as the records describe it: its name in the archive ("x.npy"), the
// CRC-32 and size of its bytes (.npy header + data), where its local header starts.
struct MemberRecord {
    std::string name;
    std::uint32_t crc;
    std::uint64_t size, offset;
};

// The local file header, before the member's bytes; its sizes are in the zip64 extra field.
std::string local_header(const MemberRecord& m) {
    std::string local;
    put_le(local, kLocalSig, 4);
    put_le(local, 45, 2);    // version needed: 4.5 (zip64)
    put_le(local, 0, 2);     // flags
    put_le(local, 0, 2);     // stored
    put_le(local, 0, 2);     // time
    put_le(local, 0x21, 2);  // date 1980-01-01
    put_le(local, m.crc, 4);
    put_le(local, k32, 4);  // sizes are in the zip64 extra field
    put_le(local, k32, 4);
    put_le(local, m.name.size(), 2);
    put_le(local, 20, 2);  // extra field length
    local += m.name;
    put_le(local, 1, 2);  // zip64 extra: uncompressed, compressed size
    put_le(local, 16, 2);
    put_le(local, m.size, 8);
    put_le(local, m.size, 8);
    return local;
}

// Appends the member's central directory entry; sizes and offset in the zip64 extra field.
void put_central_entry(std::string& central, const MemberRecord& m) {
    put_le(central, kCentralSig, 4);
    put_le(central, 45, 2);  // made by
    put_le(central, 45, 2);  // needed
    put_le(central, 0, 2);
    put_le(central, 0, 2);
    put_le(central, 0, 2);
    put_le(central, 0x21, 2);
    put_le(central, m.crc, 4);
    put_le(central, k32, 4);
    put_le(central, k32, 4);
    put_le(central, m.name.size(), 2);
    put_le(central, 28, 2);             // extra length
    put_le(central, 0, 2);              // comment length
    put_le(central, 0, 2);              // disk
    put_le(central, 0, 2);              // internal attributes
    put_le(central, 0x81a4u << 16, 4);  // external: regular file, rw-r--r--
    put_le(central, k32, 4);            // offset in the zip64 extra field
    central += m.name;
    put_le(central, 1, 2);
    put_le(central, 24, 2);
    put_le(central, m.size, 8);
    put_le(central, m.size, 8);
    put_le(central, m.offset, 8);
}

// The records after the central directory (`count` entries, `dir_size` bytes from
// `dir_offset`): the zip64 end record at `z64`, its locator, and the classic end record
// with every field saturated so that readers look for zip64.
std::string end_records(std::uint64_t count, std::uint64_t dir_size, std::uint64_t dir_offset, std::uint64_t z64) {
    std::string tail;
    put_le(tail, kZip64EndSig, 4);
    put_le(tail, 44, 8);  // size of the rest of this record
    put_le(tail, 45, 2);
    put_le(tail, 45, 2);
    put_le(tail, 0, 4);
    put_le(tail, 0, 4);
    put_le(tail, count, 8);
    put_le(tail, count, 8);
    put_le(tail, dir_size, 8);
    put_le(tail, dir_offset, 8);
    put_le(tail, kZip64LocatorSig, 4);
    put_le(tail, 0, 4);
    put_le(tail, z64, 8);
    put_le(tail, 1, 4);
    put_le(tail, kEndSig, 4);
    put_le(tail, 0, 2);
    put_le(tail, 0, 2);
    put_le(tail, 0xffff, 2);
    put_le(tail, 0xffff, 2);
    put_le(tail, k32, 4);
    put_le(tail, k32, 4);
    put_le(tail, 0, 2);
    return tail;
}

}  // namespace

void write_npz(AtomicFile& file, const std::vector<OutArray>& arrays) {
    // Members are stored (no compression), as np.savez writes them. Every record carries
    // zip64 fields, so sizes and offsets past 4 GiB need no second pass.
    // 1. Each member: local header, .npy header, data (written from the caller's buffer).
    std::string central;
    for (const OutArray& a : arrays) {
        const std::string head = npy_header(a);
        const std::size_t nbytes = data_bytes(a);
        const MemberRecord m{a.name + ".npy", crc_of(head, a.data, nbytes), head.size() + nbytes, file.written()};
        file.write(local_header(m));
        file.write(head);
        file.write(a.data, nbytes);
        put_central_entry(central, m);
    }
    // 2. The central directory, then the end records that point to it.
    const std::uint64_t dir_offset = file.written();
    file.write(central);
    file.write(end_records(arrays.size(), central.size(), dir_offset, file.written()));
}

}  // namespace attnscope
