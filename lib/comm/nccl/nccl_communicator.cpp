// NcclCommunicator: setup, identity, split and checking mode (chapter 11); the operations are in
// nccl_operations.cpp. Setup follows NCCL's recipe: pick a GPU, rank 0 calls ncclGetUniqueId, the
// id travels to every rank over a host communicator, each rank calls ncclCommInitRank.
// The easy thing to get wrong: several processes on one machine must pick different GPUs; we use
// the launcher's local rank, modulo the GPUs this process can see.
#include "comm/nccl/nccl_communicator.hpp"

#include "comm/launcher.hpp"
#include "comm/nccl/nccl_work.hpp"
#include "comm/size_check.hpp"
#include "core/error.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>

namespace tinyscale::comm {

NcclCommunicator::NcclCommunicator(Communicator* bootstrap, std::string name,
                                   const CommOptions& options)
    : name_(std::move(name)), options_(options) {
  int devices = 0;
  check_cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  TS_CHECK(devices > 0, "nccl backend: expected at least one visible GPU, found none; check "
                        "nvidia-smi and CUDA_VISIBLE_DEVICES, or use --backend mpi or threads");
  device_ = read_launch_info().local_rank % devices;
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  const int rank = bootstrap ? bootstrap->rank() : 0;
  const int size = bootstrap ? bootstrap->size() : 1;
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (rank == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  static_assert(sizeof(ncclUniqueId) % sizeof(std::int64_t) == 0);
  if (bootstrap)
    bootstrap->broadcast(&id, sizeof(ncclUniqueId) / sizeof(std::int64_t), DType::Int64, 0);
  check_nccl(ncclCommInitRank(&comm_, size, id, rank), "ncclCommInitRank");
  for (int r = 0; r < size; ++r) world_ranks_.push_back(bootstrap ? bootstrap->world_rank(r) : 0);
  finish_setup();
}

NcclCommunicator::NcclCommunicator(ncclComm_t comm, int device, std::string name,
                                   const CommOptions& options)
    : comm_(comm), device_(device), name_(std::move(name)), options_(options) {
  finish_setup();
}

void NcclCommunicator::finish_setup() {
  check_nccl(ncclCommUserRank(comm_, &rank_), "ncclCommUserRank", comm_);
  check_nccl(ncclCommCount(comm_, &size_), "ncclCommCount", comm_);
  check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  // Room for the largest gather_host (one call signature per rank) and the barrier's element.
  scratch_count_ = signature_length(size_) * static_cast<std::size_t>(size_);
  const std::size_t bytes = scratch_count_ * sizeof(std::int64_t);
  check_cuda(cudaMalloc(reinterpret_cast<void**>(&scratch_), bytes), "cudaMalloc");
  check_cuda(cudaMallocHost(reinterpret_cast<void**>(&staging_), bytes), "cudaMallocHost");
}

NcclCommunicator::~NcclCommunicator() {
  cudaSetDevice(device_);
  if (!aborted_ && comm_) {
    if (std::uncaught_exceptions() > 0) {
      abort(); // unwinding from a failure (often a timeout): do not wait a second deadline
    } else {
      // ncclCommDestroy flushes the work still on the stream with no deadline; wait for it here
      // with one (NcclWork::wait aborts the communicator when it passes).
      try {
        NcclWork(*this, "destroying the communicator", -1, -1).wait();
      } catch (...) {
        // A destructor must not throw; the communicator is aborted and goes away regardless.
      }
    }
  }
  if (!aborted_ && comm_) ncclCommDestroy(comm_); // finalises (flushes) first, then frees
  // The stream is idle now, or its NCCL kernels were stopped by the abort, so the frees below
  // (which wait for the GPU) do not wait for a missing rank.
  if (staging_) cudaFreeHost(staging_);
  if (scratch_) cudaFree(scratch_);
  if (stream_) cudaStreamDestroy(stream_);
}

int NcclCommunicator::world_rank(int group_rank) const {
  TS_CHECK(group_rank >= 0 && group_rank < size_, "world_rank: expected a rank in [0, ", size_,
           ") of ", name_, ", found ", group_rank);
  return world_ranks_.empty() ? group_rank : world_ranks_[static_cast<std::size_t>(group_rank)];
}

void NcclCommunicator::abort() {
  if (aborted_) return;
  aborted_ = true;
  ncclCommAbort(comm_); // also frees the communicator
}

void NcclCommunicator::enter(const char* op) {
  TS_CHECK(!aborted_, op, " on ", describe(*this),
           ": the NCCL communicator was aborted after an "
           "earlier error or timeout; create a new one");
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
}

std::vector<std::int64_t> NcclCommunicator::gather_host(const std::vector<std::int64_t>& mine,
                                                        const char* op) {
  enter(op);
  const std::size_t per_rank = mine.size();
  const std::size_t total = per_rank * static_cast<std::size_t>(size_);
  TS_CHECK(total <= scratch_count_, op, " on ", describe(*this), ": expected at most ",
           scratch_count_, " values to all-gather (one call signature per rank), found ", total,
           "; gather_host's buffers are sized in finish_setup, enlarge them there");
  // In place: this rank's values go to block `rank` of the gathered buffer. Both copies use
  // pinned host memory, so neither blocks the host: a device-to-pageable copy would wait for the
  // all-gather with no deadline, and a pageable-to-device one may wait for earlier work on the
  // stream. The only wait is NcclWork's, which has the deadline.
  const std::size_t offset = per_rank * static_cast<std::size_t>(rank_);
  std::copy(mine.begin(), mine.end(), staging_ + offset);
  check_cuda(cudaMemcpyAsync(scratch_ + offset, staging_ + offset, per_rank * sizeof(std::int64_t),
                             cudaMemcpyHostToDevice, stream_),
             "cudaMemcpyAsync");
  check_nccl(ncclAllGather(scratch_ + offset, scratch_, per_rank, ncclInt64, comm_, stream_),
             "ncclAllGather", comm_);
  check_cuda(cudaMemcpyAsync(staging_, scratch_, total * sizeof(std::int64_t),
                             cudaMemcpyDeviceToHost, stream_),
             "cudaMemcpyAsync");
  NcclWork(*this, op, -1, -1).wait();
  return std::vector<std::int64_t>(staging_, staging_ + total);
}

void NcclCommunicator::check_call(const std::string& op, std::vector<std::int64_t> signature,
                                  const std::function<void()>& validate) {
  check_group_call(*this, options_.check_sizes, op, std::move(signature), validate,
                   [&](const std::vector<std::int64_t>& mine) {
                     return gather_host(mine, (op + " (checking sizes)").c_str());
                   });
}

std::unique_ptr<Communicator> NcclCommunicator::split(int color, int key, const std::string& name) {
  barrier();
  enter("split");
  ncclComm_t comm = nullptr;
  check_nccl(ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &comm, nullptr),
             "ncclCommSplit", comm_);
  if (comm == nullptr) return nullptr;
  auto group =
      std::unique_ptr<NcclCommunicator>(new NcclCommunicator(comm, device_, name, options_));
  // The new group learns its members' world ranks by gathering them over itself.
  const std::vector<std::int64_t> ranks =
      group->gather_host({world_rank(rank_)}, "split (gathering world ranks)");
  group->world_ranks_.assign(ranks.begin(), ranks.end());
  return group;
}

} // namespace tinyscale::comm
