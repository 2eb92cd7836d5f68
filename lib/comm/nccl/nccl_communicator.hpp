// NcclCommunicator: the Communicator of GPU buffers, one rank per GPU (chapter 11).
// Every pointer passed to it is device memory on this rank's GPU. Operations are enqueued on the
// communicator's own CUDA stream; the blocking ones then wait for that stream's event up to the
// deadline. NCCL has no tags: point-to-point messages between two ranks match in call order, and
// two ranks that both isend to each other before their irecv deadlock (use send_recv, which
// groups the pair). The easy thing to get wrong: after a timeout the communicator is aborted
// (ncclCommAbort) and every later call on it is an Error; and no call before the deadline-aware
// wait may block the host on the stream (pageable copies, cudaFree do), or a missing rank hangs.
#pragma once

#include "comm/communicator.hpp"

#include <cstdint>
#include <cuda_runtime_api.h>
#include <functional>
#include <memory>
#include <nccl.h>
#include <string>
#include <vector>

namespace tinyscale::comm {

/// A group of GPUs, one per rank, talking through NCCL.
class NcclCommunicator final : public Communicator {
public:
  /// Joins the ranks of `bootstrap` (a host communicator, e.g. the MPI world; nullptr: a world of
  /// one rank) into an NCCL world: this rank uses GPU (local rank mod visible GPUs), rank 0
  /// creates NCCL's unique id and broadcasts it over `bootstrap`.
  NcclCommunicator(Communicator* bootstrap, std::string name, const CommOptions& options);
  /// Waits (up to the deadline) for the work still on the stream, then destroys the NCCL
  /// communicator; aborts it instead after that deadline, or at once while an exception unwinds.
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  const char* backend() const override { return "nccl"; }
  bool reads(Device::Kind memory) const override { return memory == Device::Kind::CUDA; }
  Device staging_device() const override { return Device::cuda(); }
  int world_rank(int group_rank) const override;
  std::chrono::milliseconds timeout() const override { return options_.timeout; }
  void set_timeout(std::chrono::milliseconds timeout) override { options_.timeout = timeout; }
  /// Turns checking mode (CommOptions::check_sizes) on or off.
  void set_check_sizes(bool check) { options_.check_sizes = check; }

  void broadcast(void* buffer, std::int64_t count, DType dtype, int root) override;
  void all_to_all(const void* send, void* recv, std::int64_t count_per_rank, DType dtype) override;
  void all_to_all_v(const void* send, const std::vector<std::int64_t>& send_counts, void* recv,
                    const std::vector<std::int64_t>& recv_counts, DType dtype) override;
  /// A one-element all-reduce, waited for.
  void barrier() override;

  /// ncclSend and ncclRecv in one group, so a ring step cannot deadlock.
  void send_recv(const void* send, std::int64_t send_count, int dst, void* recv,
                 std::int64_t recv_count, int src, DType dtype, int tag) override;
  WorkHandle isend(const void* buffer, std::int64_t count, DType dtype, int peer, int tag) override;
  /// NCCL cannot see the sender's count: a different size is undefined behaviour, not an Error.
  WorkHandle irecv(void* buffer, std::int64_t count, DType dtype, int peer, int tag) override;

  WorkHandle all_reduce_async(const void* send, void* recv, std::int64_t count, DType dtype,
                              ReduceOp op) override;
  WorkHandle reduce_scatter_async(const void* send, void* recv, std::int64_t recv_count,
                                  DType dtype, ReduceOp op) override;
  WorkHandle all_gather_async(const void* send, void* recv, std::int64_t send_count,
                              DType dtype) override;

  /// ncclCommSplit (a barrier first, so a missing rank is a timeout, not a hang).
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override;

  /// The GPU of this rank.
  int device() const { return device_; }
  /// The stream every operation is enqueued on.
  cudaStream_t stream() const { return stream_; }
  /// The NCCL communicator.
  ncclComm_t handle() const { return comm_; }
  /// Aborts the NCCL communicator (stops its kernels); every later call is an Error.
  void abort();
  /// True after abort().
  bool aborted() const { return aborted_; }

private:
  /// A group made by split(): takes ownership of `comm`.
  NcclCommunicator(ncclComm_t comm, int device, std::string name, const CommOptions& options);
  /// Makes this rank's GPU current and refuses an aborted communicator.
  void enter(const char* op);
  /// Fills rank_, size_; creates the stream and the scratch buffers (device and pinned host),
  /// once, while nothing is in flight: allocating or freeing later can wait for the whole GPU.
  void finish_setup();
  /// All-gathers `mine` (the same length on every rank) through the scratch buffers. It waits
  /// only in NcclWork::wait, with the deadline: every copy is async, to or from pinned memory.
  std::vector<std::int64_t> gather_host(const std::vector<std::int64_t>& mine, const char* op);
  /// The grouped ncclSend/ncclRecv of all_to_all(v), waited for.
  void exchange(const char* op, const void* send, const std::vector<std::int64_t>& send_counts,
                void* recv, const std::vector<std::int64_t>& recv_counts, DType dtype);
  /// check_group_call (size_check.hpp) with this group's all-gather.
  void check_call(const std::string& op, std::vector<std::int64_t> signature,
                  const std::function<void()>& validate = {});

  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  int device_ = 0;
  std::string name_;
  int rank_ = 0;
  int size_ = 1;
  std::vector<int> world_ranks_;
  CommOptions options_;
  bool aborted_ = false;
  std::int64_t* scratch_ = nullptr; ///< device memory for barrier and signatures
  std::int64_t* staging_ = nullptr; ///< pinned host memory, the host side of gather_host
  std::size_t scratch_count_ = 0;   ///< elements of scratch_ and of staging_
};

} // namespace tinyscale::comm
