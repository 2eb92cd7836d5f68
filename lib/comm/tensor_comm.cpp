// Collectives on tensors (chapter 04 onwards): check, then call the raw Communicator API.
// Tensors are contiguous, so a tensor is one buffer and dimension 0 splits it into equal blocks.
// The easy thing to get wrong: an async handle must own its tensors (a Tensor is a handle to
// shared storage), or the buffer could be freed while the worker thread still writes into it.
// Device tensors (chapter 11): threads and nccl read device memory directly, after the compute
// stream has finished writing it; mpi gets a host copy, which is copied back (staging, counted
// as host traffic); nccl gets a device copy of a host tensor (statistics, report rows).
#include "comm/tensor_comm.hpp"

#include "backend/backend.hpp"
#include "core/error.hpp"

#include <numeric>
#include <utility>

namespace tinyscale::comm {

namespace {

/// A Work that keeps `tensors` alive until the inner operation is done. Dropped unfinished (an
/// exception between issue and wait, or a forgotten wait), it waits for the operation before it
/// lets the tensors go: every backend's operation ends by its deadline, so this cannot hang, and
/// no backend writes into freed storage. Errors are not rethrown from a destructor.
class TensorWork final : public Work {
public:
  TensorWork(WorkHandle inner, std::vector<Tensor> tensors)
      : tensors_(std::move(tensors)), inner_(std::move(inner)) {}
  TensorWork(const TensorWork&) = delete;
  TensorWork& operator=(const TensorWork&) = delete;
  ~TensorWork() override {
    if (inner_->is_completed()) return;
    try {
      inner_->wait();
    } catch (...) { // the caller never asked for the result; its own error is already in flight
    }
  }
  void wait() override { inner_->wait(); }
  bool is_completed() override { return inner_->is_completed(); }
  std::optional<WorkTiming> timing() const override { return inner_->timing(); }

private:
  std::vector<Tensor> tensors_; // declared first, destroyed last: after inner_ has finished
  WorkHandle inner_;
};

/// A Work whose wait() also copies a staged result back into its device tensor.
class StagedWork final : public Work {
public:
  StagedWork(WorkHandle inner, Tensor device, Tensor host)
      : inner_(std::move(inner)), device_(std::move(device)), host_(std::move(host)) {}
  void wait() override {
    inner_->wait();
    if (!copied_) device_.copy_(host_);
    copied_ = true;
  }
  bool is_completed() override { return inner_->is_completed(); }
  std::optional<WorkTiming> timing() const override { return inner_->timing(); }

private:
  WorkHandle inner_;
  Tensor device_, host_;
  bool copied_ = false;
};

void check_usable(const Communicator& comm, const Tensor& t, const char* op, const char* arg) {
  TS_CHECK(t.defined(), op, ": expected a defined tensor for '", arg,
           "', found an undefined one (a default-constructed Tensor or a missing gradient)");
  TS_CHECK(comm.reads(t.device().kind) || comm.reads(Device::Kind::CPU) || t.device().is_host(), op,
           ": expected a tensor on ", comm.staging_device().str(), " or the host for '", arg,
           "' on the ", comm.backend(), " backend, found one on ", t.device().str(),
           "; move it with .to(", comm.staging_device().str(), ")");
}

// The buffer the communicator reads: the tensor itself when it reads the tensor's memory, else a
// copy (counted host traffic) on the host, or on the communicator's device for a host tensor
// that it cannot read. A device buffer is handed over only once the compute stream has written
// it.
Tensor staged(const Communicator& comm, const Tensor& t, CallSite where = CallSite::current()) {
  if (!comm.reads(t.device().kind)) {
    Tensor copy = t.to(t.device().is_host() ? comm.staging_device() : Device::cpu(), where);
    if (!copy.device().is_host()) backend_of(copy).synchronize();
    return copy;
  }
  if (!t.device().is_host()) backend_of(t).synchronize();
  return t;
}

// Copies a staged result back into `t` (nothing when `buffer` is `t` itself).
void unstage(Tensor& t, const Tensor& buffer) {
  if (buffer.id() != t.id()) t.copy_(buffer);
}

// A new result on `like`'s device (the communicator wrote it where `buffer` lives).
Tensor on_device_of(const Tensor& like, const Tensor& result) {
  return result.device() == like.device() ? result : result.to(like.device());
}

// Rows are along dimension 0; the elements of one row are the product of the other sizes.
std::int64_t row_elements(const Tensor& t) {
  const auto& dims = t.shape().dims();
  return std::accumulate(dims.begin() + 1, dims.end(), std::int64_t{1}, std::multiplies<>());
}

Shape with_rows(const Tensor& t, std::int64_t rows) {
  std::vector<std::int64_t> dims = t.shape().dims();
  dims[0] = rows;
  return Shape(std::move(dims));
}

void check_rows_divide(const Communicator& comm, const Tensor& t, const char* op) {
  TS_CHECK(t.rank() >= 1, op, ": expected a tensor with at least one dimension, found a scalar");
  TS_CHECK(t.size(0) % comm.size() == 0, op, ": expected dimension 0 of ", t.shape().str(),
           " to divide by the group size ", comm.size(), " of ", describe(comm), ", found ",
           t.size(0), " % ", comm.size(), " = ", t.size(0) % comm.size(),
           ". Pad the tensor or choose a size that divides.");
}

std::int64_t sum(const std::vector<std::int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), std::int64_t{0});
}

} // namespace

void all_reduce(Communicator& comm, Tensor& tensor, ReduceOp op) {
  check_usable(comm, tensor, "all_reduce", "tensor");
  Tensor buffer = staged(comm, tensor);
  comm.all_reduce(buffer.device_ptr(), buffer.device_ptr(), buffer.numel(), buffer.dtype(), op);
  unstage(tensor, buffer);
}

WorkHandle all_reduce_async(Communicator& comm, Tensor& tensor, ReduceOp op) {
  check_usable(comm, tensor, "all_reduce_async", "tensor");
  Tensor buffer = staged(comm, tensor);
  WorkHandle inner = comm.all_reduce_async(buffer.device_ptr(), buffer.device_ptr(), buffer.numel(),
                                           buffer.dtype(), op);
  inner = std::make_unique<TensorWork>(std::move(inner), std::vector<Tensor>{tensor, buffer});
  if (buffer.id() == tensor.id()) return inner;
  return std::make_unique<StagedWork>(std::move(inner), tensor, buffer);
}

Tensor reduce_scatter(Communicator& comm, const Tensor& tensor, ReduceOp op) {
  check_usable(comm, tensor, "reduce_scatter", "tensor");
  check_rows_divide(comm, tensor, "reduce_scatter");
  Tensor buffer = staged(comm, tensor);
  Tensor shard = Tensor::empty(with_rows(tensor, tensor.size(0) / comm.size()), tensor.dtype(),
                               buffer.device());
  comm.reduce_scatter(buffer.device_ptr(), shard.device_ptr(), shard.numel(), tensor.dtype(), op);
  return on_device_of(tensor, shard);
}

Tensor all_gather(Communicator& comm, const Tensor& shard) {
  check_usable(comm, shard, "all_gather", "shard");
  TS_CHECK(shard.rank() >= 1, "all_gather: expected a shard with at least one dimension, found a "
                              "scalar; reshape it to [1]");
  Tensor buffer = staged(comm, shard);
  Tensor full =
      Tensor::empty(with_rows(shard, shard.size(0) * comm.size()), shard.dtype(), buffer.device());
  comm.all_gather(buffer.device_ptr(), full.device_ptr(), shard.numel(), shard.dtype());
  return on_device_of(shard, full);
}

std::vector<double> all_gather_values(Communicator& comm, const std::vector<double>& values) {
  const auto n = static_cast<std::int64_t>(values.size());
  return all_gather(comm, Tensor::from_vector(values, Shape({n}), DType::Float64)).to_vector();
}

std::vector<std::int64_t> all_gather_values(Communicator& comm,
                                            const std::vector<std::int64_t>& values) {
  const auto n = static_cast<std::int64_t>(values.size());
  const Tensor all = all_gather(comm, Tensor::from_ids(values, Shape({n})));
  const std::int64_t* p = all.data<std::int64_t>();
  return {p, p + all.numel()};
}

void broadcast(Communicator& comm, Tensor& tensor, int root) {
  check_usable(comm, tensor, "broadcast", "tensor");
  Tensor buffer = staged(comm, tensor);
  comm.broadcast(buffer.device_ptr(), buffer.numel(), buffer.dtype(), root);
  unstage(tensor, buffer);
}

Tensor all_to_all(Communicator& comm, const Tensor& tensor) {
  check_usable(comm, tensor, "all_to_all", "tensor");
  check_rows_divide(comm, tensor, "all_to_all");
  Tensor buffer = staged(comm, tensor);
  Tensor out = Tensor::empty(tensor.shape(), tensor.dtype(), buffer.device());
  comm.all_to_all(buffer.device_ptr(), out.device_ptr(), tensor.numel() / comm.size(),
                  tensor.dtype());
  return on_device_of(tensor, out);
}

Tensor all_to_all_v(Communicator& comm, const Tensor& tensor,
                    const std::vector<std::int64_t>& send_rows,
                    const std::vector<std::int64_t>& recv_rows) {
  check_usable(comm, tensor, "all_to_all_v", "tensor");
  TS_CHECK(tensor.rank() >= 1, "all_to_all_v: expected a tensor with at least one dimension, "
                               "found a scalar");
  const auto n = static_cast<std::size_t>(comm.size());
  TS_CHECK(send_rows.size() == n && recv_rows.size() == n, "all_to_all_v: expected ", n,
           " send_rows and ", n, " recv_rows (one per rank of ", describe(comm), "), found ",
           send_rows.size(), " and ", recv_rows.size());
  TS_CHECK(sum(send_rows) == tensor.size(0), "all_to_all_v: expected send_rows to sum to ",
           "dimension 0 of ", tensor.shape().str(), " (", tensor.size(0), "), found ",
           sum(send_rows));
  const std::int64_t row = row_elements(tensor);
  std::vector<std::int64_t> send_counts(n), recv_counts(n);
  for (std::size_t j = 0; j < n; ++j) {
    TS_CHECK(send_rows[j] >= 0 && recv_rows[j] >= 0, "all_to_all_v: expected row counts >= 0, ",
             "found send_rows[", j, "] = ", send_rows[j], ", recv_rows[", j, "] = ", recv_rows[j]);
    send_counts[j] = send_rows[j] * row;
    recv_counts[j] = recv_rows[j] * row;
  }
  Tensor buffer = staged(comm, tensor);
  Tensor out = Tensor::empty(with_rows(tensor, sum(recv_rows)), tensor.dtype(), buffer.device());
  comm.all_to_all_v(buffer.device_ptr(), send_counts, out.device_ptr(), recv_counts,
                    tensor.dtype());
  return on_device_of(tensor, out);
}

void send(Communicator& comm, const Tensor& tensor, int peer, int tag) {
  check_usable(comm, tensor, "send", "tensor");
  Tensor buffer = staged(comm, tensor);
  comm.send(buffer.device_ptr(), buffer.numel(), buffer.dtype(), peer, tag);
}

void recv(Communicator& comm, Tensor& tensor, int peer, int tag) {
  check_usable(comm, tensor, "recv", "tensor");
  Tensor buffer = staged(comm, tensor);
  comm.recv(buffer.device_ptr(), buffer.numel(), buffer.dtype(), peer, tag);
  unstage(tensor, buffer);
}

WorkHandle isend(Communicator& comm, const Tensor& tensor, int peer, int tag) {
  check_usable(comm, tensor, "isend", "tensor");
  Tensor buffer = staged(comm, tensor);
  WorkHandle inner = comm.isend(buffer.device_ptr(), buffer.numel(), buffer.dtype(), peer, tag);
  return std::make_unique<TensorWork>(std::move(inner), std::vector<Tensor>{tensor, buffer});
}

WorkHandle irecv(Communicator& comm, Tensor& tensor, int peer, int tag) {
  check_usable(comm, tensor, "irecv", "tensor");
  Tensor buffer = staged(comm, tensor);
  WorkHandle inner = comm.irecv(buffer.device_ptr(), buffer.numel(), buffer.dtype(), peer, tag);
  inner = std::make_unique<TensorWork>(std::move(inner), std::vector<Tensor>{tensor, buffer});
  if (buffer.id() == tensor.id()) return inner;
  return std::make_unique<StagedWork>(std::move(inner), tensor, buffer);
}

} // namespace tinyscale::comm
