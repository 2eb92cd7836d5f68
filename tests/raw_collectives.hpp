// Every collective of the raw Communicator API on buffers in one memory (chapters 04 and 11):
// the threads backend's results on host buffers are the oracle for the same calls on device
// buffers (emu in the parallel suite, a GPU in the cuda suite).
#pragma once

#include "parallel/rank_checks.hpp"

#include "comm/communicator.hpp"
#include "core/tensor.hpp"

#include <cstdint>
#include <vector>

namespace tinyscale::comm::testing {

// Every collective of the raw API on rank r's buffers of `dtype` allocated on `device`, each
// result copied to the host afterwards: what the threads backend computes there.
inline std::vector<std::vector<double>> raw_collectives(Communicator& comm, DType dtype,
                                                        Device device) {
  const int n = comm.size(), r = comm.rank();
  const std::int64_t count = 7 * n;
  const Tensor in =
      Tensor::from_vector(rank_data<double>(r, count), Shape{count}, dtype).to(device);
  auto fresh = [&](std::int64_t c) { return Tensor::zeros(Shape{c}, dtype, device); };
  std::vector<std::vector<double>> out;
  std::vector<ReduceOp> ops = {ReduceOp::Sum, ReduceOp::Max};
  if (is_floating(dtype)) ops.push_back(ReduceOp::Avg);
  for (const ReduceOp op : ops) {
    Tensor sum = fresh(count), shard = fresh(count / n);
    comm.all_reduce(in.device_ptr(), sum.device_ptr(), count, dtype, op);
    comm.reduce_scatter(in.device_ptr(), shard.device_ptr(), count / n, dtype, op);
    out.push_back(sum.to_vector());
    out.push_back(shard.to_vector());
  }
  Tensor in_place = in.clone(), async_shard = fresh(count / n), gathered = fresh(count * n),
         async_gathered = fresh(count * n);
  WorkHandle a = comm.all_reduce_async(in_place.device_ptr(), in_place.device_ptr(), count, dtype,
                                       ReduceOp::Sum);
  WorkHandle b = comm.reduce_scatter_async(in.device_ptr(), async_shard.device_ptr(), count / n,
                                           dtype, ReduceOp::Sum);
  WorkHandle c = comm.all_gather_async(in.device_ptr(), async_gathered.device_ptr(), count, dtype);
  comm.all_gather(in.device_ptr(), gathered.device_ptr(), count, dtype);
  a->wait(), b->wait(), c->wait();
  Tensor root = in.clone(), exchanged = fresh(count);
  comm.broadcast(root.device_ptr(), count, dtype, n - 1);
  comm.all_to_all(in.device_ptr(), exchanged.device_ptr(), count / n, dtype);
  // Uneven blocks: rank i sends (i + j) % 3 + 1 elements to rank j.
  std::vector<std::int64_t> send_counts(n), recv_counts(n);
  for (int j = 0; j < n; ++j) send_counts[j] = (r + j) % 3 + 1, recv_counts[j] = (j + r) % 3 + 1;
  std::int64_t received = 0;
  for (const std::int64_t k : recv_counts) received += k;
  Tensor uneven = fresh(received);
  comm.all_to_all_v(in.device_ptr(), send_counts, uneven.device_ptr(), recv_counts, dtype);
  Tensor from_left = fresh(count);
  WorkHandle sent = comm.isend(in.device_ptr(), count, dtype, (r + 1) % n, 3);
  comm.recv(from_left.device_ptr(), count, dtype, (r + n - 1) % n, 3);
  sent->wait();
  comm.barrier();
  for (const Tensor* t : {&in_place, &async_shard, &gathered, &async_gathered, &root, &exchanged,
                          &uneven, &from_left})
    out.push_back(t->to_vector());
  return out;
}

} // namespace tinyscale::comm::testing
