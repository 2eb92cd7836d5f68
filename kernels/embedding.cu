// Token embedding: gather rows of table [vocab, dim] by id, and scatter-add the gradient back
// (chapter 11). Roofline floor: forward moves 2 n_ids dim sizeof(T) bytes (plus the ids) and
// computes nothing; backward reads n_ids dim sizeof(T) bytes and does as many float32 atomic adds
// (in L2). The easy thing to get wrong: a bad id must never become an out-of-bounds read; it
// raises a device flag (the backend turns it into an Error) and its row is written as zeros.
// The backward's atomics make the order of additions, hence the last bits, vary between runs.
#include "kernels/cuda_check.hpp"
#include "kernels/kernels.hpp"
#include "kernels/rows.cuh"

namespace tinyscale::kernels {

namespace {

constexpr unsigned kThreads = 256;

/// out[i, u] = table[ids[i], u] over rows of `row_units` copy units U (16-byte packs when the
/// rows allow, else single elements); a row with a bad id is zeros and sets *bad_id_flag.
template <typename U>
__global__ void embedding_kernel(const std::int64_t* ids, const U* table, U* out,
                                 std::int64_t n_ids, std::int64_t vocab, std::int64_t row_units,
                                 int* bad_id_flag) {
  const std::int64_t total = n_ids * row_units;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += stride) {
    const std::int64_t i = e / row_units, u = e - i * row_units;
    const std::int64_t id = ids[i];
    if (id >= 0 && id < vocab) {
      out[e] = table[id * row_units + u];
    } else {
      out[e] = U{};
      if (u == 0) *bad_id_flag = 1;
    }
  }
}

/// grad_table[ids[i], j] += grad_out[i, j]; bad ids (already flagged by the forward) are skipped.
template <typename T>
__global__ void embedding_backward_kernel(const std::int64_t* ids, const T* grad_out,
                                          float* grad_table, std::int64_t n_ids, std::int64_t vocab,
                                          std::int64_t dim) {
  const std::int64_t total = n_ids * dim;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += stride) {
    const std::int64_t i = e / dim, j = e - i * dim;
    const std::int64_t id = ids[i];
    if (id >= 0 && id < vocab) atomicAdd(grad_table + id * dim + j, to_float(grad_out[e]));
  }
}

template <typename U>
void launch_embedding(const std::int64_t* ids, const void* table, void* out, std::int64_t n_ids,
                      std::int64_t vocab, std::int64_t row_units, int* bad_id_flag,
                      cudaStream_t stream) {
  embedding_kernel<U><<<blocks_for(n_ids * row_units, kThreads), kThreads, 0, stream>>>(
      ids, static_cast<const U*>(table), static_cast<U*>(out), n_ids, vocab, row_units,
      bad_id_flag);
  TS_CUDA_LAUNCH_CHECK("embedding", stream);
}

} // namespace

void embedding(const std::int64_t* ids, const void* table, void* out, DType dtype,
               std::int64_t n_ids, std::int64_t vocab, std::int64_t dim, int* bad_id_flag,
               cudaStream_t stream) {
  if (n_ids <= 0 || dim <= 0) return;
  dispatch_row_dtype(dtype, "embedding", [&](auto tag) {
    using T = decltype(tag);
    // A gather is a byte copy: copy 16-byte packs where every row starts 16-byte aligned.
    if (pack_width<T>(dim, {table, out}) == kPack<T>)
      launch_embedding<uint4>(ids, table, out, n_ids, vocab, dim / kPack<T>, bad_id_flag, stream);
    else if constexpr (sizeof(T) == 4)
      launch_embedding<unsigned>(ids, table, out, n_ids, vocab, dim, bad_id_flag, stream);
    else
      launch_embedding<unsigned short>(ids, table, out, n_ids, vocab, dim, bad_id_flag, stream);
  });
}

void embedding_backward(const std::int64_t* ids, const void* grad_out, float* grad_table,
                        DType dtype, std::int64_t n_ids, std::int64_t vocab, std::int64_t dim,
                        cudaStream_t stream) {
  if (n_ids <= 0 || dim <= 0) return;
  dispatch_row_dtype(dtype, "embedding_backward", [&](auto tag) {
    using T = decltype(tag);
    embedding_backward_kernel<T><<<blocks_for(n_ids * dim, kThreads), kThreads, 0, stream>>>(
        ids, static_cast<const T*>(grad_out), grad_table, n_ids, vocab, dim);
    TS_CUDA_LAUNCH_CHECK("embedding_backward", stream);
  });
}

} // namespace tinyscale::kernels
