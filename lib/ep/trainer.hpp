// The expert-parallel training loop (chapter 08): data parallelism with the experts of every MoE
// layer spread over ep ranks inside it. The D data-parallel ranks each run their own rows of the
// global batch (chapter 04's layout); the ep ranks of one expert-parallel group exchange tokens
// in every MoE layer. After backward, non-expert gradients are all-reduced over all D ranks and
// expert gradients over the D / ep ranks that hold the same experts (the expert-data-parallel
// group); the clipping norm adds the experts' squares over the ep group.
// The easy thing to get wrong: reducing the experts' gradients over all D ranks. The shapes
// match (rank 0's expert 0 is shaped like rank 1's expert 2), so nothing fails, but different
// experts' gradients get added together; the sum must run over the ranks holding the same expert.
#pragma once

#include "comm/communicator.hpp"
#include "dp/data_parallel.hpp"
#include "ep/capacity.hpp"
#include "ep/load.hpp"
#include "ep/placement.hpp"
#include "ep/rules.hpp"
#include "io/config.hpp"
#include "metrics/trace.hpp"
#include "train/trainer.hpp"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tinyscale::ep {

/// How a run is split over expert-parallel ranks.
struct EpOptions {
  PlacementKind placement = PlacementKind::Contiguous;
  /// Local: capacity per rank's micro-batch (one rank with D x k micro-batches of b rows);
  /// global: per the ep group's pooled micro-batch (one rank with D/ep x k of ep x b rows).
  CapacityScope capacity = CapacityScope::Local;
  /// For tests only: false makes the combine ignore the gates (the negative control).
  bool use_gates = true;
};

/// One rank's model (router and dense parts replicated, its own experts), optimizer and data.
class EpTrainer {
public:
  /// Collective over the three groups. `data_parallel`: every data-parallel rank (size D; the
  /// mesh's "dp x cp x ep"); `ep`: this rank's expert-parallel group (size ep, dividing D);
  /// `expert_data_parallel`: the D / ep ranks holding the same experts (the mesh's "dp x cp").
  /// The groups must outlive the trainer.
  EpTrainer(io::RunConfig config, comm::Communicator& data_parallel, comm::Communicator& ep,
            comm::Communicator& expert_data_parallel, EpOptions options = {},
            metrics::TraceRecorder* trace = nullptr);
  ~EpTrainer();

  /// Collective: one optimizer step on the global batch; every rank returns the same losses,
  /// norm and MoE counts (reduced over the data-parallel group).
  train::StepResult train_step();
  /// Collective over ep: the mean validation cross-entropy (every rank runs the whole batch).
  double evaluate() const { return trainer_->evaluate(); }

  /// Collective over every group: joins the experts over ep and writes a checkpoint in the
  /// single-rank layout (every expert by its global name, AdamW state and step counts in
  /// nn::GPT's parameter order) from data-parallel rank 0; returns its directory on every rank.
  /// One rank, or any ep, loads it.
  std::string save_checkpoint() const;
  /// Loads a single-rank-layout checkpoint (from train::Trainer, or any ep) and keeps this rank's
  /// experts; the config must match as for train::Trainer::resume.
  void resume(const std::string& path);

  std::int64_t step() const { return trainer_->step(); }
  const io::RunConfig& config() const { return config_; }

  /// This rank's load statistics of the last step, one entry per MoE layer.
  std::vector<EpLayerLoad> load() const;
  const ExpertPlacement& placement() const { return placement_; }
  train::Trainer& trainer() { return *trainer_; }
  const train::Trainer& trainer() const { return *trainer_; }
  /// Rows of one micro-batch on this rank: batch_size / (D x micro_batches).
  std::int64_t micro_batch_rows() const { return rows_; }
  /// The gradient syncs: the dense parameters' over every data-parallel rank, the experts' over
  /// the ranks holding the same experts.
  const dp::DataParallel& dense_sync() const { return *dense_sync_; }
  const dp::DataParallel& expert_sync() const { return *expert_sync_; }

private:
  struct SyncBoth;
  io::RunConfig config_;
  comm::Communicator* dp_;
  comm::Communicator* ep_;
  comm::Communicator* edp_;
  ExpertPlacement placement_;
  std::vector<std::unique_ptr<EpLayerLoad>> loads_; // owned here: the layers point at them
  std::unique_ptr<train::Trainer> trainer_;
  nn::ParameterList dense_params_, expert_params_;
  metrics::TraceRecorder* trace_;
  std::unique_ptr<dp::DataParallel> dense_sync_, expert_sync_;
  std::unique_ptr<SyncBoth> sync_;
  std::int64_t rows_ = 0;
};

/// Collective over `group`: every rank's load (all with the same layers and ep size), in group
/// rank order (host numbers; staged through the device for a group that reads only its memory).
std::vector<std::vector<EpLayerLoad>> all_gather_load(comm::Communicator& group,
                                                      const std::vector<EpLayerLoad>& mine);

} // namespace tinyscale::ep
