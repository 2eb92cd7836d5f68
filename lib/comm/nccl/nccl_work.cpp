// NCCL and CUDA return codes, type mapping, and NcclWork's poll loop (chapter 11).
// See nccl_work.hpp. Like the MPI wait loop, it spins for the first 50 us, then sleeps 50 us
// between polls so that a host with more ranks than cores stays responsive.
#include "comm/nccl/nccl_work.hpp"

#include "comm/nccl/nccl_communicator.hpp"
#include "core/error.hpp"

#include <chrono>
#include <thread>

namespace tinyscale::comm {

void check_cuda(cudaError_t rc, const char* call) {
  if (rc == cudaSuccess) return;
  throw Error(
      detail::concat(call, " failed: ", cudaGetErrorName(rc), ": ", cudaGetErrorString(rc)));
}

void check_nccl(ncclResult_t rc, const char* call, ncclComm_t comm) {
  if (rc == ncclSuccess) return;
  const char* last = ncclGetLastError(comm);
  throw Error(detail::concat(call, " failed: ", ncclGetErrorString(rc),
                             last && *last ? detail::concat(" (", last, ")") : std::string(),
                             "; NCCL_DEBUG=INFO prints NCCL's own account"));
}

ncclDataType_t nccl_datatype(DType dtype) {
  switch (dtype) {
  case DType::Float32: return ncclFloat32;
  case DType::Float64: return ncclFloat64;
  case DType::Int64: return ncclInt64;
  case DType::BFloat16: return ncclBfloat16;
  }
  throw Error("nccl_datatype: unknown dtype");
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
  case ReduceOp::Sum: return ncclSum;
  case ReduceOp::Avg: return ncclAvg;
  case ReduceOp::Max: return ncclMax;
  }
  throw Error("nccl_op: unknown reduce op");
}

NcclWork::NcclWork(NcclCommunicator& comm, std::string op, int peer, int tag)
    : comm_(comm), op_(std::move(op)), peer_(peer), tag_(tag) {
  check_cuda(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreate");
  const cudaError_t rc = cudaEventRecord(event_, comm_.stream());
  if (rc != cudaSuccess) cudaEventDestroy(event_);
  check_cuda(rc, "cudaEventRecord");
}

NcclWork::~NcclWork() {
  // Destroying a pending event is allowed: CUDA frees it once the event completes.
  cudaEventDestroy(event_);
}

bool NcclWork::poll() {
  if (done_) return true;
  TS_CHECK(
      !comm_.aborted(), op_, " on ", describe(comm_),
      ": the NCCL communicator was aborted after an earlier error or timeout; create a new one");
  const cudaError_t rc = cudaEventQuery(event_);
  if (rc == cudaSuccess) return done_ = true;
  if (rc != cudaErrorNotReady) check_cuda(rc, "cudaEventQuery");
  ncclResult_t async_error = ncclSuccess;
  check_nccl(ncclCommGetAsyncError(comm_.handle(), &async_error), "ncclCommGetAsyncError",
             comm_.handle());
  if (async_error != ncclSuccess && async_error != ncclInProgress) {
    const std::string message =
        detail::concat(op_, " on ", describe(comm_), ": NCCL reported an asynchronous error");
    comm_.abort();
    check_nccl(async_error, message.c_str());
  }
  return false;
}

bool NcclWork::is_completed() { return poll(); }

void NcclWork::wait() {
  using std::chrono::microseconds;
  const auto started = std::chrono::steady_clock::now();
  const auto deadline = started + comm_.timeout();
  const auto spin_until = started + microseconds(50);
  while (!poll()) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      comm_.abort();
      throw_timeout(comm_, op_, peer_, tag_, now - started);
    }
    if (now >= spin_until) std::this_thread::sleep_for(microseconds(50));
  }
}

} // namespace tinyscale::comm
