// The pipeline executor (chapter 06): one rank runs its list of actions from a Schedule for real,
// on stages cut from the model, with activations and gradients sent between neighbours.
// The easy thing to get wrong: each stage's backward needs one root. The last stage's is its
// loss; any other's is <y, dL/dy> plus its own MoE auxiliary losses, added per micro-batch (no
// flush), so every parameter gets exactly the gradient one rank would give it.
#pragma once

#include "backend/memory_counter.hpp"
#include "comm/communicator.hpp"
#include "io/config.hpp"
#include "metrics/trace.hpp"
#include "pp/partition.hpp"
#include "pp/rules.hpp"
#include "pp/schedule.hpp"
#include "pp/simulate.hpp"
#include "pp/stage_model.hpp"
#include "train/trainer.hpp"

#include <functional>
#include <memory>
#include <vector>

namespace tinyscale::pp {

/// Seconds of forward plus backward of each piece of the model on one micro-batch.
struct LayerCosts {
  double embed = 0;           ///< the embeddings
  std::vector<double> blocks; ///< each block
  double head = 0;            ///< ln_f, the tied logits and the cross-entropy
};

/// What one rank measured in the last step, per action: seconds since the trainer's origin,
/// taken right after a barrier, so the ranks' times line up (steady_clock is system-wide on one
/// machine; across machines they are approximate).
struct MeasuredStep {
  std::vector<TimedAction> actions; ///< this rank's actions with their start and end
  double busy = 0;                  ///< seconds of forward and backward compute
  /// The most bytes this rank's step held at once beyond what it held before the step, counted
  /// by the allocator: activations saved for backward, received inputs and gradients, and the
  /// parameter gradients the backward allocates (gradient_bytes of them by the end).
  std::int64_t activation_peak = 0;
  std::int64_t gradient_bytes = 0; ///< this rank's parameter gradients at the end of the step
};

/// The bubble of the last step, measured and predicted, for every rank of the pipeline.
struct BubbleReport {
  std::vector<double> measured;  ///< per rank: 1 - busy / the step's makespan over all ranks
  std::vector<double> simulated; ///< per rank: the simulator's, each stage costing its rank's
                                 ///< measured mean F, B and W
  double formula =
      0; ///< docs/theory.md sec. 1 with unit costs (pp/simulate.hpp); NaN: none (ZB-H1, m < p)
  double makespan = 0;           ///< seconds from the first action's start to the last's end
  double simulated_makespan = 0; ///< the simulator's, with the measured mean costs
  StageCosts mean_costs;         ///< the measured mean F, B and W over every stage
};

/// One rank of the pipeline: its stages' blocks (and the embeddings on the first, the head on
/// the last), its optimizer, and the whole step's schedule.
class PipelineTrainer {
public:
  /// Builds a rank's stage model from the pieces of the model it holds (its stages').
  using StageModelFactory = std::function<std::unique_ptr<StageModel>(const nn::Pieces&)>;

  /// Collective over `group` (the pp group, rank r = pipeline rank r; it must outlive this).
  /// `trace` (optional) records every action: compute as "F3", "B3", "I3", "W3", sends and
  /// receives on the "comm" stream. `data_parallel` (optional): the ranks holding the same
  /// stages in the other pipelines (PP x DP); pipeline d runs rows [d B/D, (d+1) B/D) of the
  /// global batch B in its m micro-batches, and the stages' gradients are summed over it.
  /// `make_model` (optional) builds what the stages are cut from: a model split over the other
  /// axes of a mesh (chapter 10's fourd::MeshStages, built for this config); without it, an
  /// nn::GPT of train::Trainer with no axes. Either way a rank builds only its own stages'
  /// pieces (the embeddings on the first stage, the head and the tied wte on the last), so its
  /// parameters fall as 1/p.
  PipelineTrainer(io::RunConfig config, comm::Communicator& group, PipelineOptions options = {},
                  metrics::TraceRecorder* trace = nullptr,
                  comm::Communicator* data_parallel = nullptr,
                  const StageModelFactory& make_model = {});
  ~PipelineTrainer();

  /// Collective: one optimizer step on the global batch of train.batch_size rows in
  /// train.micro_batches micro-batches; every rank returns the same losses and norm.
  train::StepResult train_step();

  /// Collective: the mean validation cross-entropy of the whole model, run through the stages
  /// (each validation batch as one micro-batch, stage after stage; every pipeline runs it).
  double evaluate();
  /// Collective: writes a checkpoint in the single-rank layout (every parameter whole, with its
  /// AdamW moments and step count; pp/checkpoint.cpp) under train.checkpoint_dir from the rank
  /// that is rank 0 of every group; returns its directory on every rank.
  std::string save_checkpoint();
  /// Loads a checkpoint written by any layout (one rank, dp, tp, pp, ep, ZeRO, composed) and
  /// cuts it into this rank's pieces; the config must match as for train::Trainer::resume.
  void resume(const std::string& path);

  /// Collective: the full model's parameters, each from the rank that trains it (every rank
  /// gets every one; the embeddings from the first stage). Only for nn::GPT stages (throws
  /// when a stage model was made by the caller: its shards are joined by their own axes).
  nn::ParameterList gathered_parameters();
  /// The parameters this rank trains (its stages'; the tied wte on the first and last).
  std::vector<const nn::NamedParameter*> owned_parameters() const;
  /// The model the stages are cut from.
  const StageModel& model() const { return *model_; }
  /// Bytes of AdamW moments this rank holds (its stages', or its ZeRO-1 slices of them).
  std::int64_t optimizer_state_bytes() const;

  const Schedule& schedule() const { return schedule_; }
  const Partition& partition() const { return partition_; }
  /// The costs the cut was balanced with (empty blocks unless measured_partition).
  const LayerCosts& layer_costs() const { return layer_costs_; }
  /// This rank's actions of the last step, timed.
  const MeasuredStep& measured() const { return measured_; }
  /// Collective: the last step's bubble per rank, measured from every rank's timings, beside
  /// the simulator's prediction from the same step's mean per-action costs. A whole backward's
  /// time is split between B and W in the proportion 1:1 for the simulator.
  BubbleReport bubble_report();
  /// Whether this rank trains parameter `name` (the tied wte: the first and the last stage).
  bool owns(const std::string& name) const;
  /// The pipeline rank whose value of parameter `name` is the trained one: wte and wpe the first
  /// stage's, a block its stage's, ln_f the last stage's (checkpoints take it from there).
  int trainer_rank(const std::string& name) const;
  /// The config, data, step count and learning-rate schedule. Its nn::GPT (this rank's pieces)
  /// is the stage model's when it has no axes, and holds no piece when the caller made the stage
  /// model; its optimizer is empty (OptimizerOwner::Caller): this class steps its own.
  const train::Trainer& trainer() const { return trainer_; }
  std::int64_t step() const { return trainer_.step(); }
  /// The pieces of the model this rank builds: its stages'.
  nn::Pieces pieces() const;
  /// The whole model's parameters without values, in nn::GPT's order (checkpoints visit them
  /// all; computed once, on first use).
  const std::vector<nn::ParameterSpec>& whole_model() const;

private:
  struct MicroBatchState; // one (chunk, micro-batch)'s tensors while it is in flight

  void run_action(const Action& a, std::vector<MicroBatchState>& states,
                  std::vector<comm::WorkHandle>& sends, train::StepResult& r);
  void forward(const Action& a, MicroBatchState& st, train::StepResult& r);
  void backward(const Action& a, MicroBatchState& st, MicroBatchState* next_local);
  void finish_step(train::StepResult& r, std::chrono::steady_clock::time_point start);
  void reduce_over_data_parallel();
  double global_grad_norm();
  int tag(const Action& a, bool gradient) const;

  comm::Communicator* group_;
  comm::Communicator* data_parallel_ = nullptr; ///< null: one pipeline
  PipelineOptions options_;
  /// The pipelines that run other rows: options_.row_replicas, else the data-parallel group.
  comm::Communicator* row_replicas() const {
    return options_.row_replicas != nullptr ? options_.row_replicas : data_parallel_;
  }
  Schedule schedule_;
  int rank_ = 0;
  LayerCosts layer_costs_; // (before partition_, which a measured cut fills it for)
  Partition partition_;
  train::Trainer trainer_; // built after the cut: its model is this rank's pieces
  mutable std::vector<nn::ParameterSpec> whole_;
  std::unique_ptr<StageModel> model_;
  std::int64_t rows_ = 0;      ///< rows per micro-batch
  int data_parallel_rank_ = 0; ///< this pipeline's index d (its rows: StageModel::first_row)
  double loss_divisor_ = 1;    ///< micro-batches of the whole step: m x data-parallel size
  MeasuredStep measured_;
  MemoryCounter activations_;
  metrics::TraceRecorder* trace_ = nullptr;
  std::chrono::steady_clock::time_point origin_; ///< 0 s of measured_, after a barrier
  std::unique_ptr<optim::AdamW> adamw_;          ///< without ZeRO: this rank's stages' state
  /// ZeRO-1: one sharded optimizer per data-parallel group (the pipeline's own, then each
  /// other group a parameter names, e.g. the experts'), with the groups.
  std::vector<std::unique_ptr<optim::ShardedOptimizer>> sharded_;
};

} // namespace tinyscale::pp
