#include "tp/gradients.hpp"

#include "autograd/grad_mode.hpp"
#include "backend/backend.hpp"
#include "comm/tensor_comm.hpp"
#include "core/error.hpp"
#include "ops/ops.hpp"
#include "tp/sharding.hpp"

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

} // namespace tinyscale::tp
