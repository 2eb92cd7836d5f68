#include "tp/gradients.hpp"

#include "autograd/grad_mode.hpp"
#include "backend/backend.hpp"
#include "comm/tensor_comm.hpp"
#include "core/error.hpp"
#include "ops/ops.hpp"
#include "tp/sharding.hpp"

#include <cmath>

namespace tinyscale::tp {

void all_reduce_sequence_parallel_grads(const nn::ParameterList& params, comm::Communicator& tp) {
  if (params.empty() || tp.size() == 1) return;
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const auto& p : params) {
    TS_CHECK(p.tensor.grad().defined(), "tp: expected a gradient for the sequence-parallel ",
             "parameter '", p.name, "' after backward, found none; run backward first");
    grads.push_back(reshape(p.tensor.grad(), {-1}));
  }
  // EXERCISE 5.3 begin: sum the sequence-parallel parameters' gradients over tp
  // One all-reduce for all of them: flatten, sum over the ranks, write each slice back.
  Tensor flat = concat(grads, 0);
  comm::all_reduce(tp, flat);
  std::int64_t offset = 0;
  for (const auto& p : params) {
    Tensor g = p.tensor.grad();
    g.copy_(reshape(slice(flat, 0, offset, offset + g.numel()), g.shape().dims()));
    offset += g.numel();
  }
  // EXERCISE 5.3 end
}

double global_grad_norm(const nn::ParameterList& params, comm::Communicator& tp) {
  // The squares stay on the gradients' device: each rank's shards summed over tp, then the
  // replicated parameters (equal on every rank) counted once; the host reads the total once.
  const Device device = params.empty() ? Device::cpu() : params.front().tensor.device();
  Tensor squares = Tensor::zeros(Shape{1}, DType::Float64, device);
  const auto add_squares = [&](bool replicated) {
    for (const auto& p : params) {
      const Tensor g = p.tensor.grad();
      if (g.defined() && shard_spec(p.name).replicated() == replicated)
        backend_of(g).sum_of_squares(g, squares);
    }
  };
  add_squares(false);
  comm::all_reduce(tp, squares);
  add_squares(true);
  return std::sqrt(squares.item());
}

} // namespace tinyscale::tp
