#include "tp/operators.hpp"

#include "autograd/record.hpp"
#include "comm/counting.hpp"
#include "comm/tensor_comm.hpp"
#include "core/error.hpp"
#include "ops/ops.hpp"

#include <string>

namespace tinyscale::tp {

namespace {
void check_sequence_input(const Tensor& x, const char* op) {
  TS_CHECK(x.rank() == 3, "tp::", op, ": expected activations [B, T, C], found ", x.shape().str());
}
} // namespace

Tensor all_gather_dim1(comm::Communicator& tp, const Tensor& x) {
  check_sequence_input(x, "all_gather_dim1");
  // comm::all_gather joins along dimension 0: move the sequence there and back.
  Tensor joined = comm::all_gather(tp, permute(x, {1, 0, 2})); // [T, B, C]
  return permute(joined, {1, 0, 2});
}

Tensor reduce_scatter_dim1(comm::Communicator& tp, const Tensor& x) {
  check_sequence_input(x, "reduce_scatter_dim1");
  TS_CHECK(x.size(1) % tp.size() == 0, "tp::reduce_scatter_dim1: expected a sequence length ",
           "divisible by tp = ", tp.size(), ", found ", x.size(1),
           "; choose train.seq_len as a multiple of tp");
  Tensor shard = comm::reduce_scatter(tp, permute(x, {1, 0, 2})); // [T/t, B, C]
  return permute(shard, {1, 0, 2});
}

Tensor shard_dim1(comm::Communicator& tp, const Tensor& x) {
  check_sequence_input(x, "shard_dim1");
  TS_CHECK(x.size(1) % tp.size() == 0, "tp::shard_dim1: expected a sequence length divisible ",
           "by tp = ", tp.size(), ", found ", x.size(1),
           "; choose train.seq_len as a multiple of tp");
  const std::int64_t n = x.size(1) / tp.size();
  return slice(x, 1, tp.rank() * n, (tp.rank() + 1) * n);
}

// Every operator captures the counting region of its forward, so that a CountingCommunicator
// counts the backward's collective under the same region (comm/counting.hpp).

Tensor copy_to_tp(const Tensor& x, comm::Communicator& tp) {
  auto forward = [](const std::vector<Tensor>& in) { return in[0]; };
  auto backward = [&tp, region = comm::counting_region(tp)](const Tensor& grad) {
    comm::CountingRegion scope(tp, region);
    Tensor sum;
    // EXERCISE 5.1 begin: f's backward and g's forward (Megatron's conjugate operators)
    ::tinyscale::exercise_not_done("5.1", "ex05", __FILE__);
    // EXERCISE 5.1 end
    return autograd::Grads{sum};
  };
  return custom_function("tp.f", {x}, forward, backward);
}

Tensor reduce_from_tp(const Tensor& x, comm::Communicator& tp) {
  auto forward = [&tp](const std::vector<Tensor>& in) {
    Tensor sum;
    // EXERCISE 5.1 begin: f's backward and g's forward (Megatron's conjugate operators)
    ::tinyscale::exercise_not_done("5.1", "ex05", __FILE__);
    // EXERCISE 5.1 end
    return sum;
  };
  auto backward = [](const Tensor& grad) { return autograd::Grads{grad}; };
  return custom_function("tp.g", {x}, forward, backward);
}

Tensor gather_from_sequence(const Tensor& x, comm::Communicator& tp) {
  return custom_function(
      "tp.sp_gather", {x},
      [&tp](const std::vector<Tensor>& in) { return all_gather_dim1(tp, in[0]); },
      [&tp, region = comm::counting_region(tp)](const Tensor& grad) {
        comm::CountingRegion scope(tp, region);
        return autograd::Grads{reduce_scatter_dim1(tp, grad)};
      });
}

Tensor reduce_scatter_to_sequence(const Tensor& x, comm::Communicator& tp) {
  return custom_function(
      "tp.sp_reduce_scatter", {x},
      [&tp](const std::vector<Tensor>& in) { return reduce_scatter_dim1(tp, in[0]); },
      [&tp, region = comm::counting_region(tp)](const Tensor& grad) {
        comm::CountingRegion scope(tp, region);
        return autograd::Grads{all_gather_dim1(tp, grad)};
      });
}

Tensor gather_from_sequence_replicated(const Tensor& x, comm::Communicator& tp) {
  return custom_function(
      "tp.sp_gather_replicated", {x},
      [&tp](const std::vector<Tensor>& in) { return all_gather_dim1(tp, in[0]); },
      [&tp](const Tensor& grad) { return autograd::Grads{shard_dim1(tp, grad)}; });
}

Tensor scatter_to_sequence(const Tensor& x, comm::Communicator& tp) {
  return custom_function(
      "tp.sp_scatter", {x}, [&tp](const std::vector<Tensor>& in) { return shard_dim1(tp, in[0]); },
      [&tp, region = comm::counting_region(tp)](const Tensor& grad) {
        comm::CountingRegion scope(tp, region);
        return autograd::Grads{all_gather_dim1(tp, grad)};
      });
}

} // namespace tinyscale::tp
