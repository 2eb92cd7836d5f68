// Matrix products on the GPU through cuBLASLt (chapter 11). Roofline floor: 2 batch m n k FLOPs
// over (m k + k n + m n) batch sizeof(T) bytes (twice m n with beta != 0): compute-bound at
// GPT-2's sizes, so the work is cuBLASLt's and ours is to call it cheaply: descriptors and the
// heuristic's algorithm are cached per shape. The easy thing to get wrong: cuBLASLt is
// column-major. A row-major [r, c] matrix is a column-major [c, r] one, so row-major
// C = op(A) op(B) is handed over as the column-major C^T = op(B)^T op(A)^T: operands swapped.
#include "kernels/cublaslt.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/kernels.hpp"
#include "kernels/stream_scratch.hpp"

#include <compare>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>

namespace tinyscale::kernels {

namespace {

constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20; // per stream, see stream_scratch

void check_cublaslt(cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw Error(detail::concat(call, " failed: ", cublaslt().get_status_name(status), " (",
                             cublaslt().get_status_string(status), ")"));
}
#define TS_CUBLASLT_CHECK(call) check_cublaslt((call), #call)

struct DestroyDesc {
  void operator()(cublasLtMatmulDesc_t p) const {
    static_cast<void>(cublaslt().matmul_desc_destroy(p));
  }
};
struct DestroyLayout {
  void operator()(cublasLtMatrixLayout_t p) const {
    static_cast<void>(cublaslt().matrix_layout_destroy(p));
  }
};
struct DestroyPreference {
  void operator()(cublasLtMatmulPreference_t p) const {
    static_cast<void>(cublaslt().matmul_preference_destroy(p));
  }
};
using MatmulDesc = std::unique_ptr<cublasLtMatmulDescOpaque_t, DestroyDesc>;
using Layout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, DestroyLayout>;
using Preference = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, DestroyPreference>;

/// The process's cuBLASLt handle (thread-safe; created on first use and never destroyed, so no
/// static destructor runs after the CUDA runtime has shut down).
cublasLtHandle_t handle() {
  static const cublasLtHandle_t h = [] {
    cublasLtHandle_t created = nullptr;
    TS_CUBLASLT_CHECK(cublaslt().create(&created));
    return created;
  }();
  return h;
}

/// Everything the algorithm choice depends on; pointer alignments included, since an algorithm
/// picked for 256-byte aligned buffers may not run on an offset view.
struct GemmKey {
  int device = 0;
  DType dtype = DType::Float32;
  bool trans_a = false, trans_b = false;
  std::int64_t batch = 1, m = 0, n = 0, k = 0, stride_a = 0, stride_b = 0, stride_c = 0;
  unsigned align_a = 256, align_b = 256, align_c = 256;
  auto operator<=>(const GemmKey&) const = default;
};

/// Descriptors and algorithm for one GemmKey. In cuBLASLt's terms its A is our B and its B is
/// our A (see the file comment).
struct GemmPlan {
  MatmulDesc op;
  Layout first, second, out; // our B, our A, C (also D: the product is written in place)
  cublasLtMatmulAlgo_t algo{};
};

/// The largest power of two up to 256 that divides the address of every batch's matrix.
unsigned alignment(const void* p, std::int64_t batch, std::int64_t stride, std::size_t element) {
  std::uintptr_t bits = reinterpret_cast<std::uintptr_t>(p);
  if (batch > 1) bits |= static_cast<std::uintptr_t>(stride) * element;
  unsigned a = 256;
  while (a > 1 && bits % a != 0) a /= 2;
  return a;
}

/// A row-major [rows, cols] matrix (batch of them, `stride` elements apart) as cuBLASLt's
/// column-major [cols, rows] with leading dimension cols.
Layout row_major(cudaDataType_t type, std::int64_t rows, std::int64_t cols, std::int64_t batch,
                 std::int64_t stride) {
  cublasLtMatrixLayout_t raw = nullptr;
  TS_CUBLASLT_CHECK(cublaslt().matrix_layout_create(&raw, type, static_cast<std::uint64_t>(cols),
                                                    static_cast<std::uint64_t>(rows), cols));
  Layout layout(raw);
  if (batch > 1) {
    const auto count = static_cast<std::int32_t>(batch);
    TS_CUBLASLT_CHECK(cublaslt().matrix_layout_set_attribute(
        raw, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
    TS_CUBLASLT_CHECK(cublaslt().matrix_layout_set_attribute(
        raw, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
  }
  return layout;
}

std::unique_ptr<GemmPlan> make_plan(const GemmKey& key) {
  auto plan = std::make_unique<GemmPlan>();
  const cudaDataType_t type = key.dtype == DType::Float32 ? CUDA_R_32F : CUDA_R_16BF;
  // CUBLAS_COMPUTE_32F is full float32 (TF32 needs CUBLAS_COMPUTE_32F_FAST_TF32); for bfloat16
  // operands it is float32 accumulation on tensor cores.
  cublasLtMatmulDesc_t raw = nullptr;
  TS_CUBLASLT_CHECK(cublaslt().matmul_desc_create(&raw, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  plan->op.reset(raw);
  const cublasOperation_t op_first = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  TS_CUBLASLT_CHECK(cublaslt().matmul_desc_set_attribute(raw, CUBLASLT_MATMUL_DESC_TRANSA,
                                                         &op_first, sizeof op_first));
  TS_CUBLASLT_CHECK(cublaslt().matmul_desc_set_attribute(raw, CUBLASLT_MATMUL_DESC_TRANSB,
                                                         &op_second, sizeof op_second));
  // As stored: B is [k, n] ([n, k] transposed), A is [m, k] ([k, m] transposed), C is [m, n].
  plan->first = key.trans_b ? row_major(type, key.n, key.k, key.batch, key.stride_b)
                            : row_major(type, key.k, key.n, key.batch, key.stride_b);
  plan->second = key.trans_a ? row_major(type, key.k, key.m, key.batch, key.stride_a)
                             : row_major(type, key.m, key.k, key.batch, key.stride_a);
  plan->out = row_major(type, key.m, key.n, key.batch, key.stride_c);

  cublasLtMatmulPreference_t raw_pref = nullptr;
  TS_CUBLASLT_CHECK(cublaslt().matmul_preference_create(&raw_pref));
  const Preference pref(raw_pref);
  const std::uint64_t workspace = kWorkspaceBytes;
  TS_CUBLASLT_CHECK(cublaslt().matmul_preference_set_attribute(
      raw_pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace));
  const std::uint32_t aligns[4] = {key.align_b, key.align_a, key.align_c, key.align_c};
  const cublasLtMatmulPreferenceAttributes_t align_attrs[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i)
    TS_CUBLASLT_CHECK(cublaslt().matmul_preference_set_attribute(raw_pref, align_attrs[i],
                                                                 &aligns[i], sizeof(aligns[i])));

  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  TS_CUBLASLT_CHECK(cublaslt().matmul_algo_get_heuristic(
      handle(), raw, plan->first.get(), plan->second.get(), plan->out.get(), plan->out.get(),
      raw_pref, 1, &result, &found));
  TS_CHECK(found > 0, "gemm: cuBLASLt found no algorithm for ", dtype_name(key.dtype), " batch ",
           key.batch, " of [", key.m, ", ", key.k, "] x [", key.k, ", ", key.n, "] (trans_a ",
           key.trans_a, ", trans_b ", key.trans_b, ")");
  plan->algo = result.algo;
  return plan;
}

/// The cached plan for `key`, made on first use (the heuristic is too slow to ask every call).
/// Plans are never evicted: a training run uses a few dozen shapes.
const GemmPlan& plan_for(const GemmKey& key) {
  static std::mutex mutex;
  static std::map<GemmKey, std::unique_ptr<GemmPlan>> plans;
  const std::lock_guard<std::mutex> lock(mutex);
  auto& plan = plans[key];
  if (!plan) plan = make_plan(key); // on a throw the empty entry is retried next time
  return *plan;
}

/// k == 0: the product is empty, so C = beta C (beta 0 overwrites, as in BLAS, even NaN).
void scale_c(const GemmArgs& g, void* c, DType dtype, cudaStream_t stream) {
  if (g.beta == 1.0) return;
  const std::int64_t size = g.m * g.n;
  const bool contiguous = g.batch == 1 || g.stride_c == size;
  const std::int64_t pieces = contiguous ? 1 : g.batch, piece = contiguous ? g.batch * size : size;
  for (std::int64_t i = 0; i < pieces; ++i) {
    void* ci =
        static_cast<char*>(c) + i * g.stride_c * static_cast<std::int64_t>(dtype_size(dtype));
    if (g.beta == 0.0)
      fill(ci, dtype, piece, 0.0, stream);
    else
      unary(UnaryOp::MulScalar, ci, g.beta, ci, dtype, piece, stream);
  }
}

} // namespace

void gemm(const GemmArgs& args, const void* a, const void* b, void* c, DType dtype,
          cudaStream_t stream) {
  TS_CHECK(dtype == DType::Float32 || dtype == DType::BFloat16,
           "gemm: expected float32 or bfloat16 on the GPU, found ", dtype_name(dtype),
           "; the GPU backend does not compute in float64 (run float64 checks on the CPU)");
  TS_CHECK(args.batch >= 0 && args.m >= 0 && args.n >= 0 && args.k >= 0,
           "gemm: expected non-negative sizes, found batch ", args.batch, ", m ", args.m, ", n ",
           args.n, ", k ", args.k);
  if (args.batch == 0 || args.m == 0 || args.n == 0) return;
  TS_CHECK(args.batch <= std::numeric_limits<std::int32_t>::max(),
           "gemm: cuBLASLt takes at most 2^31 - 1 batches, found ", args.batch);
  TS_CHECK(args.batch == 1 || args.stride_c >= args.m * args.n,
           "gemm: batches of C must not overlap (stride_c >= m n), found stride_c ", args.stride_c,
           " for [", args.m, ", ", args.n, "]");
  if (args.k == 0) {
    scale_c(args, c, dtype, stream);
    return;
  }
  const std::size_t element = dtype_size(dtype);
  GemmKey key;
  TS_CUDA_CHECK(cudaGetDevice(&key.device));
  key.dtype = dtype;
  key.trans_a = args.trans_a;
  key.trans_b = args.trans_b;
  key.batch = args.batch;
  key.m = args.m;
  key.n = args.n;
  key.k = args.k;
  // Strides only matter with more than one batch; zero them otherwise so equal shapes share a plan.
  key.stride_a = args.batch > 1 ? args.stride_a : 0;
  key.stride_b = args.batch > 1 ? args.stride_b : 0;
  key.stride_c = args.batch > 1 ? args.stride_c : 0;
  key.align_a = alignment(a, args.batch, args.stride_a, element);
  key.align_b = alignment(b, args.batch, args.stride_b, element);
  key.align_c = alignment(c, args.batch, args.stride_c, element);
  const GemmPlan& plan = plan_for(key);

  void* workspace = stream_scratch(stream, kWorkspaceBytes);
  const float alpha = static_cast<float>(args.alpha), beta = static_cast<float>(args.beta);
  TS_CUBLASLT_CHECK(cublaslt().matmul(
      handle(), plan.op.get(), &alpha, b, plan.first.get(), a, plan.second.get(), &beta, c,
      plan.out.get(), c, plan.out.get(), &plan.algo, workspace, kWorkspaceBytes, stream));
}

} // namespace tinyscale::kernels
