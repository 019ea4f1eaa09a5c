// Bad files: every bad fixture's InputError, and headers claiming more elements than
// could ever be allocated.
// Expected values are written here or come from numpy: the fixtures under tests/fixtures/
// are written by scripts/make_fixtures.py, and good/expected.json holds numpy's own
// reading of every good .npy and .npz file. Nothing is compared with the code under test.
#include <doctest/doctest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "attnscope/base/errors.hpp"
#include "attnscope/io/read.hpp"
#include "attnscope/io/write.hpp"
#include "attnscope/model/model.hpp"
#include "test_util.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define ATTNSCOPE_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ATTNSCOPE_TEST_ASAN 1
#endif
#endif

using namespace attnscope;
using namespace testutil;
namespace fs = std::filesystem;

// ---- bad files -------------------------------------------------------------------------

TEST_CASE("io: every bad fixture throws an InputError naming the file and the problem") {
    enum class Via { array, bundle };
    struct Bad {
        std::string file;
        Via via;
        std::vector<std::string> phrases;
    };
    const std::vector<Bad> cases = {
        {"complex_c16.npy", Via::array, {"unsupported dtype '<c16'"}},
        {"object.npy", Via::array, {"unsupported dtype '|O'", "object arrays hold Python objects, not numbers"}},
        {"structured.npy", Via::array, {"structured (record) dtypes are not supported"}},
        {"datetime.npy", Via::array, {"unsupported dtype '<M8[D]'"}},
        {"truncated.npy", Via::array, {"shape (2, 3) of float64 needs 48 data bytes, file has 43 (truncated)"}},
        {"trailing.npy", Via::array, {"needs 48 data bytes, file has 56 (trailing bytes)"}},
        {"header_past_end.npy", Via::array, {"truncated .npy file: header claims", "file has 50 after the preamble"}},
        {"short.npy", Via::array, {"not a .npy file"}},
        {"huge_claim.npy",
         Via::array,
         {"shape (1000000000,) of float64 needs 8000000000 data bytes, file has 16 (truncated)"}},
        {"overflow_shape.npy",
         Via::array,
         {"shape (1099511627776, 1099511627776) has more elements than can be addressed"}},
        {"bad_shape_text.npy", Via::array, {"not a valid .npy header: shape must be a tuple of non-negative integers"}},
        {"negative_shape.npy", Via::array, {"not a valid .npy header: shape must be a tuple of non-negative integers"}},
        {"bad_magic.npy", Via::array, {"not a .npy file (no \\x93NUMPY magic at the start)"}},
        {"version9.npy", Via::array, {"unsupported .npy format version 9.0 (expected 1.0, 2.0 or 3.0)"}},
        {"not_npy.npy", Via::array, {"not a .npy file"}},
        {"npz_bad_crc.npz",
         Via::bundle,
         {"not a valid .npz (zip) archive: member 'y.npy' is corrupt (CRC-32 mismatch)"}},
        {"npz_bad_deflate.npz",
         Via::bundle,
         {"not a valid .npz (zip) archive: member 'x.npy' has corrupt deflate data"}},
        {"npz_bomb_claim.npz", Via::bundle, {"member 'x.npy' claims 2.0 GiB from", "more than deflate can expand"}},
        {"npz_size_understated.npz",
         Via::bundle,
         {"member 'x.npy' has corrupt deflate data or a size that does not match its directory entry"}},
        {"npz_stored_sizes.npz", Via::bundle, {"stored member 'x.npy' has inconsistent sizes"}},
        {"npz_not_npy_member.npz", Via::bundle, {"member 'notes.txt' is not a .npy array"}},
        {"npz_duplicate.npz", Via::bundle, {"array 'x' appears twice in the archive"}},
        {"npz_member_not_npy.npz", Via::bundle, {": x: not a .npy file"}},
        {"npz_truncated.npz", Via::bundle, {"not a valid .npz (zip) archive: no end-of-directory record"}},
        {"npz_member_truncated.npz",
         Via::bundle,
         {": x: shape (2, 3) of float64 needs 48 data bytes, file has 43 (truncated)"}},
        {"json_ragged.json", Via::bundle, {"W_Q[1]", "ragged array", "expected 3 elements", "found 2"}},
        {"json_ragged_deeper.json", Via::bundle, {"x[1][1]", "expected a number at this depth, found a list"}},
        {"json_ragged_shallower.json", Via::bundle, {"x[1][0]", "expected a list of 1 elements, found number 2"}},
        {"json_nonnumeric.json", Via::bundle, {"y[0][2]", "expected a number, found string \"a\""}},
        {"json_null.json", Via::bundle, {"x[1]", "found null"}},
        {"json_invalid.json", Via::bundle, {"invalid JSON"}},
        {"json_not_object.json", Via::bundle, {"expected a JSON object of named arrays", "found a list"}},
        {"json_huge_number.json", Via::bundle, {"invalid JSON", "1e400"}},
        {"json_token_number.json", Via::bundle, {"query_tokens[1]", "expected a string (token label), found number 3"}},
        {"json_bad_string.json", Via::bundle, {"x[0]", "expected a number, found string \"infinity\""}},
    };
    // Every file in bad/ is listed above, and every listed file exists.
    std::set<std::string> listed, present;
    for (const Bad& c : cases) listed.insert(c.file);
    for (const auto& e : fs::directory_iterator(kFixtures + "bad")) present.insert(e.path().filename().string());
    CHECK(listed == present);

    for (const Bad& c : cases) {
        CAPTURE(c.file);
        const std::string path = bad(c.file);
        std::string message = c.via == Via::array ? input_error([&] { load_array(path, "W_Q"); })
                                                  : input_error([&] { load_bundle(path); });
        std::string origin = c.via == Via::array ? path + ": W_Q: " : path + ": ";
        CHECK_MESSAGE(message.rfind(origin, 0) == 0, "message: " << message << "\ndoes not start with: " << origin);
        check_message(message, c.phrases);
        CHECK(message.find('\n') == std::string::npos);  // one line
    }
}

TEST_CASE("io: a header claiming 1e9 elements is refused before anything is allocated") {
#ifdef ATTNSCOPE_TEST_ASAN
    MESSAGE("skipped under AddressSanitizer (it needs more address space than the limit allows)");
#else
    // In a child process whose address space may grow by 1 GiB at most, parsing must
    // still end in the size check's InputError: the 8 GB the header claims (64 GB as
    // doubles) are never asked for. A control allocation shows the limit bites.
    const std::string bytes = slurp(bad("huge_claim.npy"));
    enum Outcome { refused = 0, no_limit = 10, bad_alloc = 11, other_error = 12, accepted = 13, wrong_message = 14 };
    int rc = in_child([&]() -> int {
        std::ifstream statm("/proc/self/statm");
        unsigned long pages = 0;
        statm >> pages;
        rlim_t limit = rlim_t(pages) * rlim_t(::sysconf(_SC_PAGESIZE)) + (rlim_t(1) << 30);
        rlimit r{limit, limit};
        if (::setrlimit(RLIMIT_AS, &r) != 0) return no_limit;
        try {
            static char* volatile control;  // volatile: the allocation cannot be elided
            control = new char[std::size_t(8) << 30];
            delete[] control;
            return no_limit;
        } catch (const std::bad_alloc&) {
        }
        try {
            parse_npy(bytes, "huge_claim.npy");
            return accepted;
        } catch (const InputError& e) {
            return contains(e.what(), "needs 8000000000 data bytes, file has 16") ? refused : wrong_message;
        } catch (const std::bad_alloc&) {
            return bad_alloc;
        } catch (...) {
            return other_error;
        }
    });
    INFO("child outcome " << rc
                          << " (0 refused, 10 no limit, 11 bad_alloc, 12 other error, 13 accepted, "
                             "14 wrong message, >128 signal)");
    CHECK(rc == refused);
#endif
}
