// Reading zip archives: the parts of zip.hpp that need zlib or are long.
#include "zip.hpp"

#include <zlib.h>

#include <algorithm>

namespace attnscope::io_detail {

std::shared_ptr<char[]> ZipReader::inflate_member(std::string_view comp, const Member& m) const {
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

// 2. Where each member lies: its local header and its bytes. No two members may share or
//    overlap bytes, nor run into the central directory: an archive of a dozen entries
//    pointing at one deflated gigabyte is refused here, naming two of them, before
//    anything is inflated. Then each local header must name its member as the directory does.
std::vector<ZipReader::Span> member_spans(const ZipReader& zip, const std::vector<Member>& members,
                                          std::uint64_t directory_offset, const std::string& source,
                                          const std::string& kind) {
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
                             "): not " + kind);
        if (k == 0 || spans[i].end > spans[furthest].end) furthest = i;
    }
    if (!order.empty() && spans[furthest].end > directory_offset)
        throw InputError(shown_path(source) + ": member '" + shown(members[furthest].name) +
                         "' runs into the central directory (at " + std::to_string(directory_offset) + "): not " +
                         kind);
    for (std::size_t i = 0; i < members.size(); ++i) zip.check_local_name(members[i], spans[i]);
    return spans;
}

}  // namespace attnscope::io_detail
