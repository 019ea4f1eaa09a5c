// attnscope_peak [N] [threads]: the machine's matrix-multiply peak through the BLAS attnscope
// links (OpenBLAS), for scripts/bench.
//
// Times C = A · B for N×N row-major matrices with cblas_sgemm (float32) and cblas_dgemm
// (float64): one warm-up product (it also faults in every page of A, B and C), then the best
// of three timed products. Prints one line on stdout:
//
//     sgemm_gflops=G dgemm_gflops=G n=N threads=T sgemm_s=S dgemm_s=S core=NAME
//
// N defaults to 4096 (2·N³ = 137 GFLOP per product: ~0.7 s in float32 and ~1.5 s in float64
// with two threads on the reference machine). threads defaults to OpenBLAS's own choice
// (OPENBLAS_NUM_THREADS, or every core). Exit code 2 on a bad argument.
#include <cblas.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <vector>

namespace {

bool parse_positive(const char* text, long max, long& out) {
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v <= 0 || v > max) return false;
    out = v;
    return true;
}

// Deterministic values in [-0.5, 0.5): no denormals, no NaN, nothing the BLAS can skip.
template <typename T>
void fill(std::vector<T>& v, std::uint32_t seed) {
    std::uint32_t s = seed;
    for (auto& x : v) {
        s = s * 1664525u + 1013904223u;
        x = static_cast<T>(static_cast<double>(s >> 8) / 16777216.0 - 0.5);
    }
}

void gemm(int n, const float* a, const float* b, float* c) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
}

void gemm(int n, const double* a, const double* b, double* c) {
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, a, n, b, n, 0.0, c, n);
}

// Best wall time (seconds) of `reps` products after one warm-up product.
template <typename T>
double best_seconds(int n, int reps) {
    const auto count = static_cast<std::size_t>(n) * static_cast<std::size_t>(n);
    std::vector<T> a(count), b(count), c(count);
    fill(a, 12345u);
    fill(b, 67890u);
    gemm(n, a.data(), b.data(), c.data());
    double best = std::numeric_limits<double>::infinity();
    for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        gemm(n, a.data(), b.data(), c.data());
        const auto t1 = std::chrono::steady_clock::now();
        best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
    }
    // Use the result, so no part of the work can be considered dead.
    volatile T sink = c[count / 2];
    (void)sink;
    return best;
}

}  // namespace

int main(int argc, char** argv) {
    long n = 4096;
    long threads = 0;
    if (argc > 3 || (argc > 1 && (std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0))) {
        std::fprintf(stderr, "usage: attnscope_peak [N] [threads]  (N×N sgemm and dgemm; default N=4096)\n");
        return argc > 3 ? 2 : 0;
    }
    if (argc > 1 && !parse_positive(argv[1], 46340, n)) {  // N² must fit a 32-bit BLAS index
        std::fprintf(stderr, "attnscope_peak: N: expected an integer in 1..46340, found '%s'\n", argv[1]);
        return 2;
    }
    if (argc > 2 && !parse_positive(argv[2], 4096, threads)) {
        std::fprintf(stderr, "attnscope_peak: threads: expected an integer in 1..4096, found '%s'\n", argv[2]);
        return 2;
    }
    if (threads > 0) openblas_set_num_threads(static_cast<int>(threads));

    const int size = static_cast<int>(n);
    const int reps = 3;
    double s_sec = 0.0, d_sec = 0.0;
    try {
        s_sec = best_seconds<float>(size, reps);
        d_sec = best_seconds<double>(size, reps);
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "attnscope_peak: out of memory for three %ld×%ld matrices\n", n, n);
        return 1;
    }
    const double flop = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
    const char* core = openblas_get_corename();
    std::printf("sgemm_gflops=%.2f dgemm_gflops=%.2f n=%ld threads=%d sgemm_s=%.4f dgemm_s=%.4f core=%s\n",
                flop / s_sec * 1e-9, flop / d_sec * 1e-9, n, openblas_get_num_threads(), s_sec, d_sec,
                core ? core : "unknown");
    return 0;
}
