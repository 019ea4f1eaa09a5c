// attnscope — io layer, private: reading zip archives (the .npz reader's and the PyTorch
// zip reader's shared part). The central directory (zip64 records included), where each
// member lies, and each member's bytes: stored ones in place, deflated ones inflated
// within their declared size, every one checked against its CRC-32. Not installed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "attnscope/base/errors.hpp"
#include "attnscope/io/read.hpp"
#include "bytes.hpp"

namespace attnscope::io_detail {

inline constexpr std::uint32_t kLocalSig = 0x04034b50, kCentralSig = 0x02014b50, kEndSig = 0x06054b50,
                               kZip64EndSig = 0x06064b50, kZip64LocatorSig = 0x07064b50;
inline constexpr std::uint32_t k32 = 0xffffffffu;

// One member as the central directory lists it.
struct Member {
    std::string name;
    std::uint16_t method = 0;
    std::uint32_t crc = 0;
    std::uint64_t comp_size = 0, size = 0, local_offset = 0;
};

class ZipReader {
   public:
    // `kind` completes "not KIND: ..." in messages: "a valid .npz (zip) archive".
    ZipReader(std::string_view b, const std::string& src, std::string kind)
        : b_(b), src_(src), kind_(std::move(kind)) {}

    [[noreturn]] void fail(const std::string& what) const {
        throw InputError(shown_path(src_) + ": not " + kind_ + ": " + what);
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
    // The deflated member inflated into a buffer of its declared size (zip.cpp).
    std::shared_ptr<char[]> inflate_member(std::string_view comp, const Member& m) const;

    std::string_view b_;
    const std::string& src_;
    std::string kind_;
};

// Where each member lies: its local header and its bytes. No two members may share or
// overlap bytes, nor run into the central directory; each local header names its member
// as the directory does. `kind` completes "not KIND" ("a valid .npz archive").
std::vector<ZipReader::Span> member_spans(const ZipReader& zip, const std::vector<Member>& members,
                                          std::uint64_t directory_offset, const std::string& source,
                                          const std::string& kind);

}  // namespace attnscope::io_detail
