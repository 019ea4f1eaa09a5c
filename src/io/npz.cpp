// .npz archives: numpy's np.savez (stored) and np.savez_compressed (deflate) zip files,
// zip64 records included. Members "NAME.npy" become arrays named NAME.
#include <zlib.h>

#include "attnscope/base/errors.hpp"
#include "attnscope/io/read.hpp"
#include "attnscope/io/write.hpp"
#include "bytes.hpp"

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

constexpr std::uint32_t kLocalSig = 0x04034b50, kCentralSig = 0x02014b50, kEndSig = 0x06054b50,
                        kZip64EndSig = 0x06064b50, kZip64LocatorSig = 0x07064b50;
constexpr std::uint32_t k32 = 0xffffffffu;

using io_detail::load_le;
using io_detail::shown;
using io_detail::shown_path;

struct Member {
    std::string name;
    std::uint16_t method = 0;
    std::uint32_t crc = 0;
    std::uint64_t comp_size = 0, size = 0, local_offset = 0;
};

class ZipReader {
   public:
    ZipReader(std::string_view b, const std::string& src) : b_(b), src_(src) {}

    [[noreturn]] void fail(const std::string& what) const {
        throw InputError(shown_path(src_) + ": not a valid .npz (zip) archive: " + what);
    }
    void need(std::uint64_t at, std::uint64_t n) const {
        if (at > b_.size() || n > b_.size() - at) fail("a record runs past the end of the file (truncated?)");
    }
    std::uint64_t u(std::uint64_t at, int n) const {
        need(at, std::uint64_t(n));
        return load_le(b_, std::size_t(at), n);
    }

    // The archive's members, as its central directory lists them. The end record's count
    // and the directory's size must agree: entries left over after the count (an end
    // record that says 0 while the directory lists members), or entries running past the
    // size, are refused rather than guessed at (which record is the true one?). Sets
    // `directory_offset`, where the members' bytes must end.
    std::vector<Member> members(std::uint64_t& directory_offset) const {
        const Directory dir = directory();
        need(dir.offset, dir.size);
        std::vector<Member> out;
        std::uint64_t at = dir.offset;
        const std::uint64_t end = dir.offset + dir.size;
        for (std::uint64_t i = 0; i < dir.count; ++i) {
            if (at >= end)
                fail("its end record lists " + std::to_string(dir.count) +
                     " members, but the central directory ends after " + std::to_string(i) +
                     " (records that disagree)");
            out.push_back(central_entry(at, i));
        }
        if (at > end)
            fail("its end record gives the central directory " + std::to_string(dir.size) + " bytes, but its " +
                 std::to_string(dir.count) + " entries take " + std::to_string(at - dir.offset) +
                 " (records that disagree)");
        if (at < end)
            fail("its end record lists " + std::to_string(dir.count) + " members, but the central directory has " +
                 std::to_string(end - at) + " bytes after " + (dir.count == 1 ? "it" : "them") +
                 (at + 4 <= end && u(at, 4) == kCentralSig ? ", starting with another entry" : "") +
                 " (records that disagree)");
        directory_offset = dir.offset;
        return out;
    }

    // Where a member lies in the archive: its local header from `start`, its (compressed)
    // bytes from `data` to `end`.
    struct Span {
        std::uint64_t start, data, end;
    };
    // The member's local header (its signature) and where its bytes lie.
    Span span(const Member& m) const {
        const std::uint64_t at = m.local_offset;
        if (u(at, 4) != kLocalSig) fail("bad local header for member '" + shown(m.name) + "'");
        const std::uint64_t data = at + 30 + u(at + 26, 2) + u(at + 28, 2);
        need(data, m.comp_size);
        return {at, data, data + m.comp_size};
    }
    // The local header names the member as its directory entry does (numpy's zipfile
    // refuses a mismatch too: two names for one member are how one zip reader is shown
    // another file than the next).
    void check_local_name(const Member& m, const Span& where) const {
        const std::string_view local = b_.substr(std::size_t(where.start + 30), std::size_t(u(where.start + 26, 2)));
        if (local != m.name)
            fail("member '" + shown(m.name) + "' is named '" + shown(local) +
                 "' in its local header (the two names must be the same)");
    }

    // The member's bytes, checked against its CRC-32: a view into the archive for a
    // stored member (no copy), else inflated into a buffer that `storage` then owns.
    std::string_view extract(const Member& m, const Span& where, std::shared_ptr<const void>& storage) const {
        std::string_view comp = b_.substr(std::size_t(where.data), std::size_t(m.comp_size));
        std::string_view out;
        if (m.method == 0) {
            if (m.comp_size != m.size) fail("stored member '" + shown(m.name) + "' has inconsistent sizes");
            out = comp;
        } else if (m.method == 8) {
            std::shared_ptr<char[]> inflated = inflate_member(comp, m);
            out = std::string_view(inflated.get(), std::size_t(m.size));
            storage = std::move(inflated);
        } else {
            fail("member '" + shown(m.name) + "' uses compression method " + std::to_string(m.method) +
                 " (expected 0 stored or 8 deflate)");
        }
        const std::uint32_t crc = crc32_bytes(0, reinterpret_cast<const unsigned char*>(out.data()), out.size());
        if (crc != m.crc) fail("member '" + shown(m.name) + "' is corrupt (CRC-32 mismatch)");
        return out;
    }

   private:
    // Where the central directory lies and how many entries it holds.
    struct Directory {
        std::uint64_t count, size, offset;
    };

    // 1. The end-of-central-directory record: the last one in the file, followed by at
    //    most a 64 KiB comment. 2. When a field there is saturated, the zip64 locator just
    //    before it points to the zip64 end record, which holds the 8-byte values.
    Directory directory() const {
        if (b_.size() < 22) fail("too short to hold a zip directory");
        std::size_t end = std::string::npos;
        std::size_t lowest = b_.size() > 22 + 65535 ? b_.size() - 22 - 65535 : 0;
        for (std::size_t at = b_.size() - 22 + 1; at-- > lowest;)
            if (load_le(b_, at, 4) == kEndSig) {
                end = at;
                break;
            }
        if (end == std::string::npos) fail("no end-of-directory record");
        Directory d{u(end + 10, 2), u(end + 12, 4), u(end + 16, 4)};
        if ((d.count == 0xffff || d.size == k32 || d.offset == k32) && end >= 20 &&
            u(end - 20, 4) == kZip64LocatorSig) {
            std::uint64_t z = u(end - 20 + 8, 8);
            if (u(z, 4) != kZip64EndSig) fail("bad zip64 end record");
            d.count = u(z + 32, 8);
            d.size = u(z + 40, 8);
            d.offset = u(z + 48, 8);
        }
        return d;
    }

    // 3. Central directory entry i, at `at` (moved past it): signature, sizes, CRC, name
    //    within the file, not encrypted; zip64 values from its extra field.
    Member central_entry(std::uint64_t& at, std::uint64_t i) const {
        if (u(at, 4) != kCentralSig) fail("bad central directory entry " + std::to_string(i));
        Member m;
        std::uint64_t flags = u(at + 8, 2);
        m.method = std::uint16_t(u(at + 10, 2));
        m.crc = std::uint32_t(u(at + 16, 4));
        m.comp_size = u(at + 20, 4);
        m.size = u(at + 24, 4);
        std::uint64_t name_len = u(at + 28, 2), extra_len = u(at + 30, 2), comment_len = u(at + 32, 2);
        m.local_offset = u(at + 42, 4);
        need(at + 46, name_len + extra_len + comment_len);
        m.name = std::string(b_.substr(std::size_t(at + 46), std::size_t(name_len)));
        if (flags & 1) fail("member '" + shown(m.name) + "' is encrypted");
        read_zip64_extra(m, at + 46 + name_len, at + 46 + name_len + extra_len);
        at += 46 + name_len + extra_len + comment_len;
        return m;
    }

    // The extra fields in [e, e_end): each within the range; the zip64 one (id 1) holds
    // 8-byte values for the fields that hold 0xffffffff, in order, and must hold them all.
    void read_zip64_extra(Member& m, std::uint64_t e, std::uint64_t e_end) const {
        while (e + 4 <= e_end) {
            std::uint64_t id = u(e, 2), len = u(e + 2, 2), p = e + 4;
            if (p + len > e_end) fail("bad extra field in member '" + shown(m.name) + "'");
            if (id == 1) {
                for (std::uint64_t* f : {&m.size, &m.comp_size, &m.local_offset})
                    if (*f == k32) {
                        if (p + 8 > e + 4 + len) fail("short zip64 field in member '" + shown(m.name) + "'");
                        *f = u(p, 8);
                        p += 8;
                    }
            }
            e += 4 + len;
        }
    }
    std::shared_ptr<char[]> inflate_member(std::string_view comp, const Member& m) const {
        // The declared size bounds the output: a member that inflates past it is refused
        // (no decompression bomb can grow memory beyond what the directory states). The
        // buffer is not zero-filled: inflate writes every byte of it, or the member is refused.
        const std::size_t size = std::size_t(m.size);
        std::shared_ptr<char[]> buffer = std::make_shared_for_overwrite<char[]>(size);
        const std::string_view out(buffer.get(), size);
        z_stream z{};
        if (inflateInit2(&z, -MAX_WBITS) != Z_OK) fail("cannot start zlib");
        std::size_t in_done = 0, out_done = 0;
        int rc = Z_OK;
        while (rc == Z_OK) {
            std::size_t in_chunk = std::min<std::size_t>(comp.size() - in_done, 1u << 30);
            std::size_t out_chunk = std::min<std::size_t>(out.size() - out_done, 1u << 30);
            z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(comp.data() + in_done));
            z.avail_in = uInt(in_chunk);
            char spare;
            z.next_out = reinterpret_cast<Bytef*>(out_chunk ? buffer.get() + out_done : &spare);
            z.avail_out = out_chunk ? uInt(out_chunk) : 1u;
            rc = ::inflate(&z, Z_NO_FLUSH);
            in_done += in_chunk - z.avail_in;
            if (out_chunk)
                out_done += out_chunk - z.avail_out;
            else if (z.avail_out == 0) {
                rc = Z_BUF_ERROR;
                break;
            }  // wrote into the spare byte
            if (rc == Z_BUF_ERROR && in_done < comp.size() && out_done < out.size()) rc = Z_OK;
        }
        ::inflateEnd(&z);
        if (rc != Z_STREAM_END || out_done != out.size())
            fail("member '" + shown(m.name) +
                 "' has corrupt deflate data or a size that does not match its directory entry");
        return buffer;
    }

    std::string_view b_;
    const std::string& src_;
};

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
        if (name.size() > 4 && io_detail::ends_with(name, ".npy"))
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

// 2. Where each member lies: its local header and its bytes. No two members may share or
//    overlap bytes, nor run into the central directory: an archive of a dozen entries
//    pointing at one deflated gigabyte is refused here, naming two of them, before
//    anything is inflated. Then each local header must name its member as the directory does.
std::vector<ZipReader::Span> member_spans(const ZipReader& zip, const std::vector<Member>& members,
                                          std::uint64_t directory_offset, const std::string& source) {
    std::vector<ZipReader::Span> spans;
    for (const Member& m : members) spans.push_back(zip.span(m));
    std::vector<std::size_t> order(members.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](std::size_t a, std::size_t b) { return spans[a].start < spans[b].start; });
    std::size_t furthest = 0;  // of the members before, the one reaching furthest
    for (std::size_t k = 0; k < order.size(); ++k) {
        const std::size_t i = order[k];
        if (k > 0 && spans[i].start < spans[furthest].end)
            throw InputError(shown_path(source) + ": members '" + shown(members[furthest].name) + "' and '" +
                             shown(members[i].name) + "' share or overlap bytes of the archive (at " +
                             std::to_string(spans[furthest].start) + " and " + std::to_string(spans[i].start) +
                             "): not a valid .npz archive");
        if (k == 0 || spans[i].end > spans[furthest].end) furthest = i;
    }
    if (!order.empty() && spans[furthest].end > directory_offset)
        throw InputError(shown_path(source) + ": member '" + shown(members[furthest].name) +
                         "' runs into the central directory (at " + std::to_string(directory_offset) +
                         "): not a valid .npz archive");
    for (std::size_t i = 0; i < members.size(); ++i) zip.check_local_name(members[i], spans[i]);
    return spans;
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
    ZipReader zip(bytes, source);
    std::uint64_t directory_offset = 0;
    const std::vector<Member> members = zip.members(directory_offset);
    // 1.-3. Names, places and sizes of every member; only then 4. inflate and parse each.
    const std::vector<std::string> names = array_names(members, source, check_name);
    const std::vector<ZipReader::Span> spans = member_spans(zip, members, directory_offset, source);
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
        const std::size_t nbytes = element_count(a.shape) * dtype_size(a.dtype);
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
