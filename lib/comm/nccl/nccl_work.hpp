// The CUDA/NCCL plumbing under NcclCommunicator (chapter 11): return codes to Errors, tinyscale
// types to NCCL types, and the Work of an enqueued operation. NCCL calls return as soon as the
// work is on the stream; a cudaEvent recorded after it says when the GPU has finished.
// The easy thing to get wrong: a peer that never joins leaves NCCL's kernel spinning forever on
// the GPU; only ncclCommAbort stops it, so a deadline aborts the whole communicator.
#pragma once

#include "comm/communicator.hpp"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <string>

namespace tinyscale::comm {

class NcclCommunicator;

/// Throws an Error naming `call` and CUDA's error string unless `rc` is cudaSuccess.
void check_cuda(cudaError_t rc, const char* call);
/// Throws an Error naming `call`, NCCL's error string and its last message for `comm` (may be
/// null) unless `rc` is ncclSuccess.
void check_nccl(ncclResult_t rc, const char* call, ncclComm_t comm = nullptr);
/// The NCCL datatype of `dtype` (ncclFloat32, ncclFloat64, ncclInt64).
ncclDataType_t nccl_datatype(DType dtype);
/// The NCCL reduction of `op` (ncclSum, ncclAvg, ncclMax).
ncclRedOp_t nccl_op(ReduceOp op);

/// An operation enqueued on a communicator's stream, finished when its event is.
class NcclWork final : public Work {
public:
  /// Records an event on `comm`'s stream now, after operation `op` (peer, tag: -1 for none).
  NcclWork(NcclCommunicator& comm, std::string op, int peer, int tag);
  ~NcclWork() override;
  NcclWork(const NcclWork&) = delete;
  NcclWork& operator=(const NcclWork&) = delete;

  /// Polls the event and NCCL's asynchronous error up to the deadline; at the deadline it aborts
  /// the communicator (the only way to stop a waiting NCCL kernel) and throws the timeout Error.
  void wait() override;
  bool is_completed() override;

private:
  /// True once the event has completed; throws if NCCL reported an asynchronous error.
  bool poll();

  NcclCommunicator& comm_;
  std::string op_;
  int peer_;
  int tag_;
  cudaEvent_t event_ = nullptr;
  bool done_ = false;
};

} // namespace tinyscale::comm
