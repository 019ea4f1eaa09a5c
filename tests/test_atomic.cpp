// Atomic files: AtomicFile and AtomicTextFile commit or leave nothing (and keep what was
// at the target), and remove_unfinished_outputs removes only what is being written.
#include <doctest/doctest.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <csignal>
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

using namespace attnscope;
using namespace testutil;
namespace fs = std::filesystem;

namespace {

// Runs `write` (writing more than 4 KiB to `target`, then committing) in a child process
// whose files may not grow past 4 KiB, and says how it ended: 0 RuntimeFailure naming
// "TARGET: cannot write", 10 no limit, 11 no error, 12 wrong message, 13 other.
template <typename F>
int write_past_size_limit(const std::string& target, F&& write) {
    return in_child([&]() -> int {
        ::signal(SIGXFSZ, SIG_IGN);  // writes past the limit fail with EFBIG instead
        rlimit r{4096, 4096};
        if (::setrlimit(RLIMIT_FSIZE, &r) != 0) return 10;
        try {
            write();
            return 11;
        } catch (const RuntimeFailure& e) {
            return contains(e.what(), target + ": cannot write") ? 0 : 12;
        } catch (...) {
            return 13;
        }
    });
}
constexpr const char* kSizeLimitOutcomes = "0 RuntimeFailure, 10 no limit, 11 no error, 12 wrong message, 13 other";

}  // namespace

// ---- AtomicFile ------------------------------------------------------------------------

TEST_CASE("io: AtomicFile destroyed uncommitted leaves no file and no temporary") {
    TempDir dir;
    const std::string target = dir / "out.npy";
    {
        AtomicFile f(target);
        f.write("partial");
        CHECK(f.written() == 7);
        CHECK(dir.entries().size() == 1);  // the temporary, beside the target
        CHECK(f.target() == target);
    }
    CHECK(dir.entries().empty());
    {
        AtomicFile f(target);
        f.write("closed, not committed");
        f.close();
    }
    CHECK(dir.entries().empty());
}

TEST_CASE("io: AtomicFile commit replaces the target") {
    TempDir dir;
    const std::string target = dir / "out.json";
    spit(target, "old contents, longer than the new ones");
    {
        AtomicFile f(target);
        f.write("new");
        CHECK(slurp(target) == "old contents, longer than the new ones");  // untouched until commit
        f.commit();
    }
    CHECK(slurp(target) == "new");
    CHECK(dir.entries() == std::set<std::string>{"out.json"});

    // Permissions follow the umask, like any file the user creates.
    mode_t mask = ::umask(0);
    ::umask(mask);
    struct stat st {};
    REQUIRE(::stat(target.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == (0666 & ~mask));

    // A moved AtomicFile commits through its new owner only.
    {
        AtomicFile a(target);
        a.write("moved");
        AtomicFile b(std::move(a));
        b.commit();
    }
    CHECK(slurp(target) == "moved");
    CHECK(dir.entries() == std::set<std::string>{"out.json"});
}

TEST_CASE("io: AtomicFile failures leave what was at the target intact") {
    TempDir dir;

    SUBCASE("the target's directory does not exist: RuntimeFailure on construction") {
        const std::string target = dir / "no/such/dir/out.npy";
        try {
            AtomicFile f(target);
            FAIL("AtomicFile was created in a nonexistent directory");
        } catch (const RuntimeFailure& e) {
            check_message(e.what(), {target + ": cannot create output file"});
        }
        CHECK(dir.entries().empty());
    }

    SUBCASE("an error before commit: the old target stays") {
        const std::string target = dir / "out.npz";
        spit(target, "old");
        try {
            AtomicFile f(target);
            f.write("half of the new archive");
            throw InputError("a later array is bad");
        } catch (const InputError&) {
        }
        CHECK(slurp(target) == "old");
        CHECK(dir.entries() == std::set<std::string>{"out.npz"});
    }

    SUBCASE("the rename fails (the target is a directory): RuntimeFailure, temporary removed") {
        const std::string target = dir / "out";
        fs::create_directory(target);
        spit(target + "/keep", "kept");
        try {
            AtomicFile f(target);
            f.write("data");
            f.commit();
            FAIL("commit over a directory succeeded");
        } catch (const RuntimeFailure& e) {
            check_message(e.what(), {target + ": cannot move output into place"});
        }
        CHECK(dir.entries() == std::set<std::string>{"out"});
        CHECK(slurp(target + "/keep") == "kept");
    }

    SUBCASE("a write fails (file size limit): RuntimeFailure, old target intact") {
        const std::string target = dir / "big.npy";
        spit(target, "old");
        const int rc = write_past_size_limit(target, [&] {
            AtomicFile f(target);
            f.write(std::string(8192, 'x'));
            f.commit();
        });
        INFO("child outcome " << rc << " (" << kSizeLimitOutcomes << ")");
        CHECK(rc == 0);
        CHECK(slurp(target) == "old");
        CHECK(dir.entries() == std::set<std::string>{"big.npy"});
    }
}

// ---- AtomicTextFile --------------------------------------------------------------------

TEST_CASE("io: AtomicTextFile streams text into place on commit, and only then") {
    TempDir dir;
    const std::string target = dir / "view.html";
    // More than the 64 KiB buffer, so the text reaches the file in several writes.
    std::string text;
    for (int i = 0; text.size() < 200000; ++i) text += "<p>row " + std::to_string(i) + "</p>\n";
    {
        AtomicTextFile out(target);
        out << text;
        CHECK(!fs::exists(target));
    }
    CHECK(dir.entries().empty());  // destroyed uncommitted: nothing left
    {
        AtomicTextFile out(target);
        out << text;
        out.commit();
    }
    CHECK(slurp(target) == text);
    CHECK(dir.entries() == std::set<std::string>{"view.html"});
}

TEST_CASE("io: AtomicTextFile reports a write error from commit and keeps the old target") {
    TempDir dir;
    const std::string target = dir / "view.svg";
    spit(target, "old");
    const int rc = write_past_size_limit(target, [&] {
        AtomicTextFile out(target);
        out << std::string(200000, 'x');
        out.commit();  // the error surfaces here, or is lost
    });
    INFO("child outcome " << rc << " (" << kSizeLimitOutcomes << ")");
    CHECK(rc == 0);
    CHECK(slurp(target) == "old");
    CHECK(dir.entries() == std::set<std::string>{"view.svg"});
}

TEST_CASE("dump: remove_unfinished_outputs removes what is being written, and nothing else") {
    TempDir dir;
    const std::string made = dir / "made", full = dir / "full", kept = dir / "kept.npy";
    REQUIRE(::mkdir(made.c_str(), 0777) == 0);
    REQUIRE(::mkdir(full.c_str(), 0777) == 0);
    {
        AtomicFile f(kept);
        f.commit();  // committed: no longer listed
    }
    {
        AtomicFile inside(full + "/other.npy");  // a file in `full` that nobody removes
        inside.commit();
    }
    const int made_slot = register_unfinished(made, true), full_slot = register_unfinished(full, true);
    REQUIRE(made_slot >= 0);
    REQUIRE(full_slot >= 0);
    AtomicFile writing(made + "/scores.npy");  // its temporary, inside `made`
    CHECK(TempDir::entries_of(made).size() == 1);
    remove_unfinished_outputs();  // what a signal handler calls
    CHECK(!exists(made));         // the temporary, then the emptied directory
    CHECK(exists(full));          // not empty: kept
    CHECK(exists(full + "/other.npy"));
    CHECK(exists(kept));
    unregister_unfinished(full_slot);
    unregister_unfinished(made_slot);
}
