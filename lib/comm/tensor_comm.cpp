// Collectives on tensors (chapter 04 onwards): check, then call the raw Communicator API.
// Tensors are contiguous, so a tensor is one buffer and dimension 0 splits it into equal blocks.
// The easy thing to get wrong: an async handle must own its tensors (a Tensor is a handle to
// shared storage), or the buffer could be freed while the worker thread still writes into it.
#include "comm/tensor_comm.hpp"

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

void check_usable(const Communicator& comm, const Tensor& t, const char* op, const char* arg) {
  TS_CHECK(t.defined(), op, ": expected a defined tensor for '", arg,
           "', found an undefined one (a default-constructed Tensor or a missing gradient)");
  TS_CHECK(t.device() == Device::cpu(), op, ": expected a CPU tensor for '", arg, "' on the ",
           comm.backend(), " backend, found one on ", t.device().str(),
           ". CUDA tensors come with the GPU issue; copy with .to(Device::cpu()) for now.");
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
  comm.all_reduce(tensor.raw_data(), tensor.raw_data(), tensor.numel(), tensor.dtype(), op);
}

WorkHandle all_reduce_async(Communicator& comm, Tensor& tensor, ReduceOp op) {
  check_usable(comm, tensor, "all_reduce_async", "tensor");
  WorkHandle inner = comm.all_reduce_async(tensor.raw_data(), tensor.raw_data(), tensor.numel(),
                                           tensor.dtype(), op);
  return std::make_unique<TensorWork>(std::move(inner), std::vector<Tensor>{tensor});
}

Tensor reduce_scatter(Communicator& comm, const Tensor& tensor, ReduceOp op) {
  check_usable(comm, tensor, "reduce_scatter", "tensor");
  check_rows_divide(comm, tensor, "reduce_scatter");
  Tensor shard = Tensor::empty(with_rows(tensor, tensor.size(0) / comm.size()), tensor.dtype());
  comm.reduce_scatter(tensor.raw_data(), shard.raw_data(), shard.numel(), tensor.dtype(), op);
  return shard;
}

Tensor all_gather(Communicator& comm, const Tensor& shard) {
  check_usable(comm, shard, "all_gather", "shard");
  TS_CHECK(shard.rank() >= 1, "all_gather: expected a shard with at least one dimension, found a "
                              "scalar; reshape it to [1]");
  Tensor full = Tensor::empty(with_rows(shard, shard.size(0) * comm.size()), shard.dtype());
  comm.all_gather(shard.raw_data(), full.raw_data(), shard.numel(), shard.dtype());
  return full;
}

void broadcast(Communicator& comm, Tensor& tensor, int root) {
  check_usable(comm, tensor, "broadcast", "tensor");
  comm.broadcast(tensor.raw_data(), tensor.numel(), tensor.dtype(), root);
}

Tensor all_to_all(Communicator& comm, const Tensor& tensor) {
  check_usable(comm, tensor, "all_to_all", "tensor");
  check_rows_divide(comm, tensor, "all_to_all");
  Tensor out = Tensor::empty(tensor.shape(), tensor.dtype());
  comm.all_to_all(tensor.raw_data(), out.raw_data(), tensor.numel() / comm.size(), tensor.dtype());
  return out;
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
  Tensor out = Tensor::empty(with_rows(tensor, sum(recv_rows)), tensor.dtype());
  comm.all_to_all_v(tensor.raw_data(), send_counts, out.raw_data(), recv_counts, tensor.dtype());
  return out;
}

void send(Communicator& comm, const Tensor& tensor, int peer, int tag) {
  check_usable(comm, tensor, "send", "tensor");
  comm.send(tensor.raw_data(), tensor.numel(), tensor.dtype(), peer, tag);
}

void recv(Communicator& comm, Tensor& tensor, int peer, int tag) {
  check_usable(comm, tensor, "recv", "tensor");
  comm.recv(tensor.raw_data(), tensor.numel(), tensor.dtype(), peer, tag);
}

WorkHandle isend(Communicator& comm, const Tensor& tensor, int peer, int tag) {
  check_usable(comm, tensor, "isend", "tensor");
  WorkHandle inner = comm.isend(tensor.raw_data(), tensor.numel(), tensor.dtype(), peer, tag);
  return std::make_unique<TensorWork>(std::move(inner), std::vector<Tensor>{tensor});
}

WorkHandle irecv(Communicator& comm, Tensor& tensor, int peer, int tag) {
  check_usable(comm, tensor, "irecv", "tensor");
  WorkHandle inner = comm.irecv(tensor.raw_data(), tensor.numel(), tensor.dtype(), peer, tag);
  return std::make_unique<TensorWork>(std::move(inner), std::vector<Tensor>{tensor});
}

} // namespace tinyscale::comm
