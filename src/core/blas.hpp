// Row-major matrix products through CBLAS (OpenBLAS), into preallocated outputs.
// Internal to the core; <cblas.h> stays out of public headers.
#pragma once

#include <cblas.h>

#include <cstddef>

namespace attnscope {

// C (M, N) = alpha · op(A) (M, K) · op(B) (K, N) + beta · C; op = transpose when asked.
template <typename T>
void gemm(bool trans_a, bool trans_b, std::size_t M, std::size_t N, std::size_t K, T alpha, const T* A, std::size_t lda,
          const T* B, std::size_t ldb, T beta, T* C, std::size_t ldc);

template <>
inline void gemm<float>(bool ta, bool tb, std::size_t M, std::size_t N, std::size_t K, float alpha, const float* A,
                        std::size_t lda, const float* B, std::size_t ldb, float beta, float* C, std::size_t ldc) {
    if (M == 0 || N == 0) return;
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, blasint(M), blasint(N),
                blasint(K), alpha, A, blasint(lda), B, blasint(ldb), beta, C, blasint(ldc));
}

template <>
inline void gemm<double>(bool ta, bool tb, std::size_t M, std::size_t N, std::size_t K, double alpha, const double* A,
                         std::size_t lda, const double* B, std::size_t ldb, double beta, double* C, std::size_t ldc) {
    if (M == 0 || N == 0) return;
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, blasint(M), blasint(N),
                blasint(K), alpha, A, blasint(lda), B, blasint(ldb), beta, C, blasint(ldc));
}

}  // namespace attnscope

namespace attnscope {

// OpenBLAS's own thread count: all of ours for the large projections, one while our
// threads each run their own heads.
inline void blas_threads(std::size_t n) { openblas_set_num_threads(int(n)); }

}  // namespace attnscope
