#include "tp/gradients.hpp"

#include "autograd/grad_mode.hpp"
#include "comm/tensor_comm.hpp"
#include "core/error.hpp"
#include "ops/ops.hpp"
#include "optim/clip.hpp"
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
  ::tinyscale::exercise_not_done("5.3", "ex05", __FILE__);
  // EXERCISE 5.3 end
}

double global_grad_norm(const nn::ParameterList& params, comm::Communicator& tp) {
  nn::ParameterList sharded, replicated;
  for (const auto& p : params)
    (shard_spec(p.name).replicated() ? replicated : sharded).push_back(p);
  const double shard_norm = optim::global_grad_norm(sharded);
  // A tensor (not a host double), so an nccl group gets a device buffer as it requires.
  const Device device = params.empty() ? Device::cpu() : params.front().tensor.device();
  Tensor squares = Tensor::full(Shape{1}, shard_norm * shard_norm, DType::Float64, device);
  comm::all_reduce(tp, squares);
  const double replicated_norm = optim::global_grad_norm(replicated);
  return std::sqrt(squares.item() + replicated_norm * replicated_norm);
}

} // namespace tinyscale::tp
