// Context parallelism against one rank (lib/cp), shared by the thread tests (tests/parallel) and
// the Open MPI tests (tests/mpi). The op: every rank draws the same whole q, k, v and output
// weights, computes the one-rank causal attention and its gradients itself (the oracle), then
// runs cp::ring_attention on its own positions and compares its shard of everything: the output
// and the q, k, v gradients, by the largest difference relative to the largest reference value.
// The trainer: cp_run records what a dp x cp run trains, for compare_runs against reference_run.
#pragma once

#include "autograd/engine.hpp"
#include "comm/communicator.hpp"
#include "core/error.hpp"
#include "cp/ring_attention.hpp"
#include "dp_equivalence.hpp"
#include "fourd/trainer.hpp"
#include "mesh/mesh.hpp"
#include "ops/ops.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace tinyscale::test {

/// max |got - want| / max |want| over the elements (want not all zero).
inline double relative_error(const Tensor& got, const Tensor& want) {
  const std::vector<double> a = got.to_vector(), b = want.to_vector();
  TS_CHECK(a.size() == b.size(), "relative_error: expected ", b.size(), " elements, found ",
           a.size());
  double diff = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return diff / scale;
}

/// The worst relative error of ring attention on `cp` against one rank: the output and the q, k
/// and v gradients of a weighted sum of it, on q of shape [B, H, T, D] = [2, 2, seq_len, 8] and k,
/// v of [2, kv_heads, seq_len, 8] (1: grouped-query attention, both query heads on one). `told` is
/// the split ring_attention is told; the data are always cut with `split` (a negative control
/// passes a different one).
inline double ring_attention_error(comm::Communicator& cp, cp::Split split, DType dtype,
                                   Device device, std::int64_t seq_len, cp::Split told,
                                   std::int64_t kv_heads = 2, double k_shift = 0.0) {
  const Shape shape({2, 2, seq_len, 8}), kv_shape({2, kv_heads, seq_len, 8});
  auto draw = [&](const Shape& s, std::uint64_t stream) {
    return Tensor::randn(s, 2026, stream, dtype).to(device);
  };
  const Tensor q = draw(shape, 1), k = add_scalar(draw(kv_shape, 2), k_shift),
               v = draw(kv_shape, 3), w = draw(shape, 4);
  // The oracle: one rank's causal attention over the whole sequence.
  std::vector<Tensor> whole = {q.clone(), k.clone(), v.clone()};
  for (Tensor& t : whole) t.set_requires_grad();
  const Tensor ref = scaled_dot_product_attention(whole[0], whole[1], whole[2]);
  backward(sum(ref * w));
  // This rank's positions, through the ring.
  const int r = cp.rank(), n = cp.size();
  auto mine = [&](const Tensor& t) { return cp::shard_sequence(t, 2, r, n, split); };
  std::vector<Tensor> part = {mine(q).clone(), mine(k).clone(), mine(v).clone()};
  for (Tensor& t : part) t.set_requires_grad();
  const Tensor out = cp::ring_attention(part[0], part[1], part[2], cp, told);
  backward(sum(out * mine(w)));
  double worst = relative_error(out, mine(ref));
  for (std::size_t i = 0; i < 3; ++i)
    worst = std::max(worst, relative_error(part[i].grad(), mine(whole[i].grad())));
  return worst;
}

/// What a run trained (losses, norms, the gradients after step 1, the final parameters) and its
/// validation loss after the last step.
struct CpRecord {
  RunRecord run;
  double val_loss = 0;
  /// Per step, the MoE figures one rank reports (the whole batch): every layer's assignments,
  /// dropped assignments and tokens per expert, then its aux and z losses.
  std::vector<std::vector<std::int64_t>> moe_counts;
  std::vector<std::vector<double>> moe_losses;
};

/// Steps `trainer` (train::Trainer or fourd::MeshTrainer) through config.train.steps and records
/// it.
template <typename TrainerT>
CpRecord record_run(TrainerT& trainer, const nn::ParameterList& params, std::int64_t steps) {
  CpRecord r;
  for (std::int64_t s = 0; s < steps; ++s) {
    const train::StepResult step = trainer.train_step();
    r.run.losses.push_back(step.loss);
    std::vector<std::int64_t> counts;
    std::vector<double> losses;
    for (const nn::MoeLayerStats& m : step.moe) {
      counts.push_back(m.assignments);
      counts.push_back(m.dropped);
      counts.insert(counts.end(), m.tokens_per_expert.begin(), m.tokens_per_expert.end());
      losses.push_back(m.aux_loss);
      losses.push_back(m.z_loss);
    }
    r.moe_counts.push_back(counts);
    r.moe_losses.push_back(losses);
    r.run.grad_norms.push_back(step.grad_norm);
    if (s == 0) record_grads(r.run, params);
  }
  r.val_loss = trainer.evaluate();
  record_params(r.run, params);
  return r;
}

/// The oracle: one rank with dp x micro_batches micro-batches of the same rows.
inline CpRecord cp_reference(io::RunConfig config, int dp) {
  config.train.micro_batches *= dp;
  train::Trainer trainer(config);
  return record_run(trainer, trainer.model().parameters(), config.train.steps);
}

/// The plan of dp x cp ranks, as `train --dp dp --cp cp_size --cp-split split` takes it.
inline mesh::ParallelPlan cp_plan(int dp, int cp_size, cp::Split split) {
  mesh::ParallelPlan plan;
  plan.dp = dp;
  plan.cp = cp_size;
  plan.cp_split = cp::split_name(split);
  return plan;
}

/// This rank's side of a dp x cp run over `world` (dp x cp ranks, cp innermost): the trainer
/// every `train --cp` runs (fourd::MeshTrainer).
inline CpRecord cp_run(comm::Communicator& world, int cp_size, const io::RunConfig& config,
                       cp::Split split) {
  fourd::MeshTrainer trainer(cp_plan(world.size() / cp_size, cp_size, split), config, world);
  return record_run(trainer, trainer.stages().parameters(), config.train.steps);
}

/// "" when `got` equals `want` within `tolerance` (the validation loss too), else the first
/// difference.
inline std::string compare_cp(const CpRecord& want, const CpRecord& got, double tolerance) {
  const std::string runs = compare_runs(want.run, got.run, tolerance);
  if (!runs.empty()) return runs;
  if (got.moe_counts != want.moe_counts)
    return "the MoE layers' counts (assignments, dropped, tokens per expert) differ from one "
           "rank's";
  for (std::size_t s = 0; s < want.moe_losses.size(); ++s)
    for (std::size_t i = 0; i < want.moe_losses[s].size(); ++i)
      if (got.moe_losses[s].size() != want.moe_losses[s].size() ||
          relative_error(got.moe_losses[s][i], want.moe_losses[s][i]) > tolerance)
        return "step " + std::to_string(s + 1) + ": a MoE layer's aux or z loss differs";
  if (relative_error(got.val_loss, want.val_loss) > tolerance)
    return "validation loss: expected " + std::to_string(want.val_loss) + " (one rank), found " +
           std::to_string(got.val_loss);
  return "";
}

} // namespace tinyscale::test
