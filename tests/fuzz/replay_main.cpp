// A stand-alone main() for the fuzz targets: replays each file named on the command
// line through LLVMFuzzerTestOneInput, without libFuzzer, so any compiler (GCC in the
// normal and sanitizer test builds) can run the kept regressions as ordinary tests
// (tests/fuzz/CMakeLists.txt registers one ctest test per file of regressions/TARGET/).
//
// There is no time limit here: a slow input is not a failure, whatever the machine's
// load. A failure is what it is under libFuzzer: an oracle's __builtin_trap, an
// exception the target lets escape (std::terminate), a sanitizer report. An input that
// cannot be read exits with status 2.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

// The targets' custom mutators call libFuzzer's default mutator; only fuzzing reaches
// them, never a replay, but they must link without libFuzzer.
extern "C" std::size_t LLVMFuzzerMutate(std::uint8_t*, std::size_t, std::size_t) {
    std::fprintf(stderr, "fuzz replay: LLVMFuzzerMutate called outside libFuzzer\n");
    std::abort();
}

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s FILE...\n  runs each FILE through the fuzz target once\n", argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; ++i) {
        std::ifstream in(argv[i], std::ios::binary);
        if (!in) {
            std::fprintf(stderr, "fuzz replay: cannot open %s\n", argv[i]);
            return 2;
        }
        const std::vector<char> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
        if (in.bad()) {
            std::fprintf(stderr, "fuzz replay: cannot read %s\n", argv[i]);
            return 2;
        }
        // A heap block of exactly the input's size, as libFuzzer passes it, so that
        // AddressSanitizer sees a read one past the end.
        const std::unique_ptr<std::uint8_t[]> data(new std::uint8_t[bytes.size()]);
        std::copy(bytes.begin(), bytes.end(), data.get());
        std::fprintf(stderr, "fuzz replay: %s (%zu bytes)\n", argv[i], bytes.size());
        LLVMFuzzerTestOneInput(data.get(), bytes.size());
        std::fprintf(stderr, "fuzz replay: %s ok\n", argv[i]);
    }
    return 0;
}
