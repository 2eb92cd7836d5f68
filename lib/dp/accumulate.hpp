// Gradient accumulation under data parallelism (chapter 04): k micro-batches per rank per step,
// communicating only once. The loss of every micro-batch is weighted by its share of the global
// batch's tokens, so that the gradients summed over ranks are the gradient of the mean loss over
// all tokens, exactly what one rank computes on the whole batch. The easy thing to get wrong:
// dividing by the local token count (or by k only) and then summing over N ranks gives N times
// the gradient; averaging instead hides the bug only while every rank has the same token count.
#pragma once

#include "core/tensor.hpp"
#include "dp/data_parallel.hpp"
#include "metrics/trace.hpp"

#include <cstdint>
#include <functional>

namespace tinyscale::dp {

/// What the forward pass of one micro-batch returns.
struct MicroBatchLoss {
  Tensor loss;             ///< scalar: the mean loss over the micro-batch's tokens
  std::int64_t tokens = 0; ///< the number of tokens that mean is over
};

/// Runs `micro_batches` forward and backward passes and returns this rank's share of the global
/// mean loss (the sum over its micro-batches of loss * tokens / global_tokens). Every backward
/// pass but the last runs inside NoSync(sync), so gradients accumulate locally and are
/// synchronised once, during the last backward pass. `forward(m)` runs micro-batch m.
/// `global_tokens` counts the tokens of the whole step over every rank and micro-batch. Backward
/// passes are recorded on `trace`'s compute stream as "backward m". forward(m) is called only
/// after micro-batch m - 1's backward has returned (dp::data_parallel_step relies on it).
double accumulate_gradients(GradientSync& sync, std::int64_t micro_batches,
                            std::int64_t global_tokens,
                            const std::function<MicroBatchLoss(std::int64_t)>& forward,
                            metrics::TraceRecorder& trace);

} // namespace tinyscale::dp
