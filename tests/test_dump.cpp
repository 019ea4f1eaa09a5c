// Dumps whose large stages are computed straight into their .npy files (Dump::place),
// and masked_scores held once when nothing is masked: the files and the stages must be
// exactly what an ordinary computation gives, and a dump never committed leaves nothing.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "attnscope/base/errors.hpp"
#include "attnscope/core/attention.hpp"
#include "attnscope/io/read.hpp"
#include "attnscope/io/write.hpp"
#include "attnscope/model/model.hpp"
#include "attnscope/report/report.hpp"
#include "test_util.hpp"

using namespace attnscope;
using namespace testutil;

namespace {

// Random self-attention weights for (B, T, Dm) inputs and H heads of width D, with the
// last `padded` keys of every batch item masked (none when 0).
Bundle random_bundle(unsigned seed, std::size_t B, std::size_t T, std::size_t Dm, std::size_t H, std::size_t D,
                     std::size_t padded) {
    std::mt19937 rng(seed);
    Bundle b;
    b.source = "test";
    b.arrays["x"] = random_array(rng, {B, T, Dm});
    b.arrays["W_Q"] = random_array(rng, {Dm, H * D}, 0.5);
    b.arrays["W_K"] = random_array(rng, {Dm, H * D}, 0.5);
    b.arrays["W_V"] = random_array(rng, {Dm, H * D}, 0.5);
    b.arrays["W_O"] = random_array(rng, {H * D, Dm}, 0.5);
    b.arrays["b_Q"] = random_array(rng, {H * D});
    if (padded > 0) {
        std::vector<double> pad(B * T, 0.0);
        for (std::size_t k = 0; k < B * T; ++k) pad[k] = k % T >= T - padded ? 1.0 : 0.0;
        b.arrays["key_padding_mask"] = arr({B, T}, pad);
    }
    return b;
}

// Self-attention with T = 256 and 4 heads, so a (B, H, T, T) stage is 1 MiB in float32
// and 2 MiB in float64 (placed), while Q, K, V, context and output stay small.
Bundle problem_bundle(bool padded) { return random_bundle(7, 1, 256, 16, 4, 4, padded ? 40 : 0); }

Spec spec4() {
    Spec s;
    s.heads = 4;
    return s;
}

// The data offset written in a .npy file's header.
std::size_t data_offset(const std::string& bytes) {
    REQUIRE(bytes.size() >= 10);
    return 10 +
           (std::size_t(static_cast<unsigned char>(bytes[8])) | std::size_t(static_cast<unsigned char>(bytes[9])) << 8);
}

// The file holds exactly the tensor's bytes, under a header giving its shape; the data
// start at byte 4096 for a stage placed in its file, else where np.save puts them (the
// first multiple of 64 after the header).
constexpr std::size_t kPlaced = 4096, kSaved = 64;
template <typename T, typename Tensor>
void check_file_equals(const std::string& path, const Tensor& expected, std::size_t align) {
    CAPTURE(path);
    const std::string bytes = read_file(path);
    const std::size_t offset = data_offset(bytes);
    CHECK(offset % align == 0);
    CHECK(offset < align + 128);
    const Array a = parse_npy(bytes, path);
    CHECK(std::vector<std::size_t>(expected.shape().begin(), expected.shape().end()) == a.shape);
    const std::size_t n = expected.size() * sizeof(*expected.data());
    REQUIRE(bytes.size() == offset + n);
    CHECK(std::memcmp(bytes.data() + offset, expected.data(), n) == 0);
}

template <typename T>
void dump_and_compare(bool padded) {
    const Bundle b = problem_bundle(padded);
    const Problem<T> p = make_problem<T>(b, spec4());
    const Trace<T> plain = attend(p);
    TempDir dir;
    const std::string out = dir / "dump";
    const auto stages = parse_stage_list("all");
    {
        Dump dump(out, stages);
        Compute how;
        std::vector<std::string> asked;
        how.place = [&](Stage s, std::size_t bytes) {
            asked.push_back(stage_name(s));
            return dump.place(stage_name(s), bytes);
        };
        const Trace<T> placed = attend(p, how);
        CHECK(asked.size() == stages.size());  // every kept stage is offered a place once
        // In the files already, under temporary names, before the commit.
        // scores, masked_scores, weights (≥ 1 MiB), as temporaries in a temporary
        // directory beside the dump's path
        const auto beside = dir.entries();
        REQUIRE(beside.size() == 1);
        CHECK(beside.begin()->rfind("dump.tmp-", 0) == 0);
        CHECK(TempDir::entries_of(dir / *beside.begin()).size() == 3);
        CHECK(!placed.masked_is_scores);  // masked_scores has its own file
        CHECK(maxdiff(placed.scores, plain.scores) == 0.0);
        CHECK(maxdiff(placed.weights, plain.weights) == 0.0);
        CHECK(maxdiff(placed.output, plain.output) == 0.0);
        dump.commit(view_of("test", p, placed));
    }
    CHECK(TempDir::entries_of(out) == std::set<std::string>{"K.npy", "Q.npy", "V.npy", "context.npy", "mask.npy",
                                                            "masked_scores.npy", "output.npy", "scores.npy",
                                                            "weights.npy"});
    check_file_equals<T>(out + "/scores.npy", plain.scores, kPlaced);
    check_file_equals<T>(out + "/masked_scores.npy", plain.masked(), kPlaced);
    check_file_equals<T>(out + "/weights.npy", plain.weights, kPlaced);
    check_file_equals<T>(out + "/Q.npy", plain.Q, kSaved);
    check_file_equals<T>(out + "/output.npy", plain.output, kSaved);
}

}  // namespace

TEST_CASE("dump: large stages computed in their files equal an ordinary run, float32 and float64") {
    for (bool padded : {false, true}) {
        CAPTURE(padded);
        SUBCASE("float32") { dump_and_compare<float>(padded); }
        SUBCASE("float64") { dump_and_compare<double>(padded); }
    }
}

TEST_CASE("dump: place() offers a file only to a large chosen stage, and once") {
    // 256 x 256 booleans are 64 KiB: below the placement size, written at commit.
    TempDir dir;
    Dump dump(dir / "d", {"mask", "scores"});
    CHECK(dump.place("mask", 64 * 1024) == nullptr);
    CHECK(dump.place("weights", 4 << 20) == nullptr);  // not a chosen stage
    auto s = dump.place("scores", 1 << 20);
    REQUIRE(s != nullptr);
    CHECK(s->bytes() == std::size_t(1) << 20);
    CHECK(dump.place("scores", 1 << 20) == nullptr);  // one place per stage
}

TEST_CASE("dump: with nothing masked, masked_scores is scores held once") {
    const Bundle b = problem_bundle(false);
    const Problem<double> p = make_problem<double>(b, spec4());
    const Trace<double> tr = attend(p);
    CHECK(tr.masked_is_scores);
    CHECK(tr.masked_scores.size() == 0);
    CHECK(&tr.masked() == &tr.scores);
    const TraceView v = view_of("test", p, tr);
    CHECK(v.stage("masked_scores").data == v.stage("scores").data);
    // ...and the memory check counts it once.
    const Dims& d = p.dims;
    CHECK(planned_bytes(d, sizeof(double), Compute{}, true) - planned_bytes(d, sizeof(double), Compute{}, false) ==
          d.B * d.H * d.Tq * d.Tk * sizeof(double));
    // Kept alone, it is its own tensor.
    Compute only;
    only.keep = stage_set({"masked_scores"});
    const Trace<double> alone = attend(p, only);
    CHECK(!alone.masked_is_scores);
    CHECK(maxdiff(alone.masked(), tr.scores) == 0.0);
    // With a mask, it never is.
    const Bundle padded = problem_bundle(true);
    const Problem<double> pp = make_problem<double>(padded, spec4());
    const Trace<double> masked = attend(pp);
    CHECK(!masked.masked_is_scores);
    CHECK(masked.masked_scores.size() == masked.scores.size());
}

TEST_CASE("dump: a stage computed elsewhere is copied into its placed file") {
    const Bundle b = problem_bundle(true);
    const Problem<float> p = make_problem<float>(b, spec4());
    const Trace<float> tr = attend(p);  // in ordinary memory
    TempDir dir;
    const std::string out = dir / "d";
    {
        Dump dump(out, {"weights"});
        REQUIRE(dump.place("weights", tr.weights.size() * sizeof(float)) != nullptr);
        dump.commit(view_of("test", p, tr));
    }
    check_file_equals<float>(out + "/weights.npy", tr.weights, kPlaced);
}

TEST_CASE("dump: a dump never committed leaves nothing behind") {
    TempDir dir;
    SUBCASE("a directory it created is removed") {
        const std::string out = dir / "new";
        {
            Dump dump(out, {"scores", "weights"});
            REQUIRE(dump.place("scores", 2 << 20) != nullptr);
            CHECK(!exists(out));  // built beside it, as a whole
            const auto beside = dir.entries();
            REQUIRE(beside.size() == 1);
            CHECK(TempDir::entries_of(dir / *beside.begin()).size() == 1);  // the temporary
        }
        CHECK(dir.entries().empty());
    }
    SUBCASE("an existing directory keeps exactly what it had") {
        const std::string keep = dir / "scores.npy";
        {
            AtomicFile f(keep);
            f.write("old", 3);
            f.commit();
        }
        {
            Dump dump(dir.path.string(), {"scores"});
            REQUIRE(dump.place("scores", 2 << 20) != nullptr);
        }
        CHECK(dir.entries() == std::set<std::string>{"scores.npy"});
        CHECK(read_file(keep) == "old");
    }
    SUBCASE("a computation that fails midway") {
        const std::string out = dir / "failed";
        Bundle b = problem_bundle(false);
        const Problem<double> p = make_problem<double>(b, spec4());
        try {
            Dump dump(out, {"scores", "weights"});
            Compute how;
            how.place = [&](Stage s, std::size_t bytes) {
                if (s == kWeights) throw RuntimeFailure("simulated failure");
                return dump.place(stage_name(s), bytes);
            };
            (void)attend(p, how);
            FAIL("expected the failure");
        } catch (const RuntimeFailure& e) {
            CHECK(std::string(e.what()) == "simulated failure");
        }
        CHECK(!exists(out));
    }
}

TEST_CASE("dump: an .npz dump places nothing and a file in the way is refused first") {
    TempDir dir;
    Dump npz(dir / "all.npz", {"scores"});
    CHECK(npz.place("scores", 4 << 20) == nullptr);
    CHECK(dir.entries().empty());
    const std::string blocker = dir / "blocked";
    {
        AtomicFile f(blocker);
        f.commit();
    }
    CHECK_THROWS_AS(Dump(blocker, {"scores"}), UsageError);
    REQUIRE(::mkdir((dir / "d").c_str(), 0777) == 0);
    REQUIRE(::mkdir((dir / "d/scores.npy").c_str(), 0777) == 0);
    CHECK_THROWS_WITH_AS(Dump(dir / "d", {"scores"}, false), doctest::Contains("not a regular file"), RuntimeFailure);
    // --force replaces a dump directory as a whole, and refuses one that holds anything
    // a dump would not.
    CHECK_THROWS_WITH_AS(Dump(dir / "d", {"scores"}), doctest::Contains("holds other files (scores.npy)"), UsageError);
    CHECK(TempDir::entries_of(dir / "d") == std::set<std::string>{"scores.npy"});
}

TEST_CASE("threads: the same stages, bit for bit, on one thread and on several") {
    // parallel_min_flop = 0 makes even these small runs use every thread: row blocks of
    // the projections (B*T = 300 rows) and tiles of query rows per (batch, head).
    for (unsigned seed : {1u, 2u, 3u}) {
        CAPTURE(seed);
        const std::size_t H = 3;
        const Bundle b = random_bundle(seed, 3, 100, 12, H, 4, seed == 1 ? 0 : 10 * seed);
        Spec s;
        s.heads = H;
        s.causal = seed == 3;
        const Problem<float> p = make_problem<float>(b, s);
        Compute one, many;
        one.threads = 1;
        many.threads = 4;
        many.parallel_min_flop = 0;
        const Trace<float> a = attend(p, one), c = attend(p, many);
        CHECK(maxdiff(a.Q, c.Q) == 0.0);
        CHECK(maxdiff(a.K, c.K) == 0.0);
        CHECK(maxdiff(a.scores, c.scores) == 0.0);
        CHECK(maxdiff(a.masked(), c.masked()) == 0.0);
        CHECK(maxdiff(a.weights, c.weights) == 0.0);
        CHECK(maxdiff(a.context, c.context) == 0.0);
        CHECK(maxdiff(a.output, c.output) == 0.0);
    }
}
