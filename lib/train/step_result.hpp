// StepResult: what one optimizer step did (chapter 02), and the one way every layout sums it
// over ranks (step_sums, reduce_step_result). A figure that adds up over ranks is added to
// StepResult and to the one list in step_result.cpp, and every layout's reduction carries it. The
// easy thing to get wrong: ranks of a pipeline hold different MoE layers, so the sums are laid out
// by the model's MoE layers (zeros for a layer not run here), never by what one rank happens to
// hold.
#pragma once

#include "comm/communicator.hpp"
#include "nn/config.hpp"
#include "nn/mlp.hpp"

#include <cstdint>
#include <vector>

namespace tinyscale::train {

/// What one optimizer step did.
struct StepResult {
  std::int64_t step = 0;   ///< steps completed after this one (1 for the first)
  double loss = 0;         ///< lm_loss + aux_loss + z_loss, averaged over micro-batches
  double lm_loss = 0;      ///< cross-entropy
  double aux_loss = 0;     ///< MoE load-balancing loss (0 for a dense model)
  double z_loss = 0;       ///< MoE router z-loss (0 for a dense model)
  double lr = 0;           ///< learning rate used
  double grad_norm = 0;    ///< global gradient norm before clipping
  double seconds = 0;      ///< wall time of the step
  double tokens_per_s = 0; ///< batch_size * seq_len / seconds
  /// Where the step's time went, measured by the single-rank Trainer (0 in layouts that do not
  /// split it): forward passes, backward passes, and the clip norm plus the optimizer.
  double forward_seconds = 0, backward_seconds = 0, optimizer_seconds = 0;
  std::vector<nn::MoeLayerStats> moe; ///< per MoE layer: counts summed over micro-batches,
                                      ///< losses averaged
};

/// Adds one micro-batch's statistics of one MoE layer to `into` (found by layer, appended in
/// order when new): counts summed, losses times `weight` (like StepResult::aux_loss).
void add_moe_layer(std::vector<nn::MoeLayerStats>& into, const nn::MoeLayerStats& s, double weight);

/// Every figure of `r` that adds up over ranks, as one vector: loss, lm_loss, aux_loss, z_loss
/// (the list in step_result.cpp), then per MoE layer of `model` (layer order) assignments, dropped,
/// aux_loss, z_loss and the tokens per expert. A layer missing from r.moe contributes zeros. Sum
/// these vectors over any groups of ranks and set_step_sums gives the whole batch's figures.
std::vector<double> step_sums(const StepResult& r, const nn::ModelConfig& model);
/// Reads step_sums' layout back into `r` (losses and r.moe, every MoE layer of `model`).
void set_step_sums(StepResult& r, const std::vector<double>& sums, const nn::ModelConfig& model);

/// Collective over `group`: sums every rank's share of a step's losses and MoE counts (each rank
/// passes its rows' share; train::step_sums lays them out), so every rank ends with the whole
/// batch's figures. The sums sit on the host (a group that reads only device memory, nccl, gets
/// them staged through its device by the tensor layer).
void reduce_step_result(comm::Communicator& group, train::StepResult& r,
                        const nn::ModelConfig& model);

} // namespace tinyscale::train
