// ZeRO (Rajbhandari et al. 2020; chapter 07): data parallelism whose AdamW state (stage 1),
// gradients (2) and parameters (3) are sharded over the dp group, one unit (zero/unit.hpp) at a
// time; memory is counted by the allocator, per kind (ZeroMemory). Chapter 10's pipeline stages
// use stage 1 with ZeroOptions::reduce_after_backward: no hooks, one reduction per step.
// The easy thing to get wrong: the order of collectives. Gathers follow the forward and backward,
// reduce-scatters the order units complete, which can differ between ranks (an idle MoE expert),
// so each kind runs on its own duplicate of the dp group.
#pragma once

#include "comm/communicator.hpp"
#include "comm/counting.hpp"
#include "nn/context.hpp"
#include "nn/parameter.hpp"
#include "optim/adamw.hpp"
#include "optim/config.hpp"
#include "optim/sharded.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tinyscale::zero {

/// What a run shards.
struct ZeroOptions {
  /// 1: optimizer state; 2: also gradients; 3: also parameters.
  int stage = 1;
  /// Stage 3: start gathering the next unit while this one computes (forward and backward).
  bool prefetch = true;
  /// For tests only: never reduce-scatter this unit (-1: none); its shard keeps this rank's own
  /// gradient. The negative control that shows the equivalence test notices one missing unit.
  int skip_unit = -1;
  /// Stage 1 for a caller whose gradients are complete only after sums of its own (a pipeline's
  /// tied embedding and sequence-parallel sums, chapter 10): no gradient-ready hooks, every
  /// parameter its own unit (any parameter list, not only a GPT's), and the caller calls
  /// reduce_gradients() once per step, after those sums. The flat gradients live only from
  /// reduce_gradients() to step().
  bool reduce_after_backward = false;
};

/// Bytes one rank holds, as counted by the allocator (MemoryCounter), never computed from sizes.
struct ZeroMemory {
  std::int64_t parameters = 0; ///< full flat parameters (stages 1, 2) or this rank's shards (3)
  std::int64_t gradients = 0;  ///< full flat gradients (stage 1) or the reduced shards (2, 3)
  std::int64_t optimizer = 0;  ///< AdamW moments of this rank's shards
  /// Stage 3: the most bytes of gathered parameters held at once (since reset_peaks()).
  std::int64_t gathered_peak = 0;
  /// Stage 3: bytes of gathered parameters held now (0 between steps).
  std::int64_t gathered = 0;
  /// Stages 2, 3: the most bytes of flat gradients held at once while waiting for their
  /// reduce-scatter (since reset_peaks()).
  std::int64_t reduce_peak = 0;
};

/// The ZeRO wrapper around a GPT's parameters on one rank of the dp group. The parameters become
/// views into per-unit flat buffers; the gradients are taken from them as they become ready.
class ShardedDataParallel : public nn::ForwardHooks, public optim::ShardedOptimizer {
public:
  /// Collective over `group`: splits the group into a gather and a reduce communicator, lays the
  /// units out, allocates this rank's state and (without `unallocated`) broadcasts the
  /// parameters from rank 0 into the flat buffers.
  /// `params` must be a GPT's with `n_layer` blocks (any list, with n_layer 0, under
  /// ZeroOptions::reduce_after_backward), on one device, in one floating dtype.
  /// With `unallocated` (stage 3 only): the parameters are placeholders without bytes, built
  /// under nn::RecordShapesOnly, and these their recorded specs, in the same order; each rank
  /// draws only its shards (nn::initial_elements), so no rank ever holds a whole unit it did not
  /// gather, and nothing is broadcast (every element is a function of the seed and its name).
  ShardedDataParallel(nn::ParameterList params, int n_layer, comm::Communicator& group,
                      const optim::OptimConfig& optim, ZeroOptions options,
                      const std::vector<nn::ParameterSpec>& unallocated = {});
  ~ShardedDataParallel() override;
  ShardedDataParallel(const ShardedDataParallel&) = delete;
  ShardedDataParallel& operator=(const ShardedDataParallel&) = delete;

  /// Before a micro-batch's forward. `last`: its backward ends the step's accumulation (stage 1
  /// reduce-scatters only then; stages 2 and 3 after every micro-batch).
  void begin_micro_batch(bool last);
  /// After the micro-batch's backward: launches the reduce-scatters no hook launched, waits for
  /// all of them, adds each unit's reduced shard to this rank's gradient shard (stages 2, 3) and
  /// frees what stage 3 gathered.
  void end_micro_batch();
  /// Collective, with ZeroOptions::reduce_after_backward, once per step when the gradients are
  /// complete: moves every parameter's gradient into its unit and reduce-scatters every unit, so
  /// this rank holds the sum of its shard of each (a parameter no rank had a gradient for is
  /// skipped by step(), as one AdamW skips it).
  void reduce_gradients() override;
  /// Collective: the L2 norm of the whole reduced gradient (every rank's shards together).
  double grad_norm();
  /// The sum of squares of this rank's reduced shards of the parameters for which `counted`
  /// (given the parameter's index) is true; the shards of the group's ranks are disjoint, so their
  /// sums add up to the squares of those parameters' whole gradients.
  double squares(const std::function<bool(std::size_t)>& counted) const override;
  /// Collective: updates this rank's shard of every parameter that had a gradient on some rank
  /// with AdamW at `lr` (with optim.offload on a device: on the host, where the moments are;
  /// ZeRO-Offload, Ren et al. 2021), each gradient element multiplied by `clip_factor` as the
  /// update reads it (AdamWStep::grad_scale), all-gathers the parameters (stages 1, 2) and clears
  /// the gradients for the next step.
  void step(double lr, double clip_factor) override;

  // Stage 3's forward hooks (nothing happens at stages 1, 2): before_forward gathers the
  // embeddings and head, each block is gathered before it runs and freed after, the head after
  // the logits. A forward without backward (evaluation) runs with them too, block by block.
  void before_forward() override;
  void before_block(int layer) override;
  Tensor after_block(int layer, const Tensor& y) override;
  Tensor after_head(const Tensor& logits) override;

  /// Collective: stage 3 gathers every unit, so the whole model can be read without hooks
  /// (resume, gathered_parameters, tests); stages 1 and 2 hold it anyway.
  void gather_all();
  /// Stage 3: frees every gathered unit. When `keep_values`, first copies this rank's part of
  /// each gathered unit into its parameter shard (after parameters were loaded into the model).
  void release_all(bool keep_values = false);

  /// Collective: the whole AdamW state in optim::AdamW::state_tensors()'s layout (the
  /// single-rank checkpoint's), gathered from the shards one unit at a time. With `root` >= 0
  /// only that rank keeps it, in host memory (the others hold one unit's moments at a time and
  /// get nothing).
  optim::StateTensors optimizer_state(int root = -1) override;
  /// Collective: calls `visit` once per unit with the indices of its parameters, in unit order,
  /// while they can be read (stage 3 gathers the unit first and frees it after: one unit at a
  /// time, never the whole model).
  void visit_units(const std::function<void(const std::vector<std::size_t>&)>& visit);
  /// Throws, naming every problem, unless `state` is a single-rank AdamW state of these
  /// parameters: every name once, shapes and dtypes, step counts >= 0. Changes nothing.
  void check_optimizer_state(const optim::StateTensors& state) const;
  /// Takes this rank's shard of a single-rank AdamW state (check_optimizer_state first).
  void load_optimizer_state(const optim::StateTensors& state) override;

  /// The ZeRO stage: 1, 2 or 3.
  int stage() const;
  /// The parameters, in the order given to the constructor.
  const nn::ParameterList& parameters() const override;
  /// Elements of the model (Psi), without padding.
  std::int64_t parameter_count() const;
  /// Elements of this rank's shards (padding included): sum over units of padded / N.
  std::int64_t shard_elements() const;
  /// What this rank holds now, and the peaks since reset_peaks(), from the allocator's counts.
  ZeroMemory memory() const;
  /// memory().optimizer: the AdamW moments of this rank's shards.
  std::int64_t state_bytes() const override { return memory().optimizer; }
  /// Starts the peaks of ZeroMemory (gathered, reduce) from what is held now.
  void reset_peaks();
  /// What the gather and the reduce-scatter communicators moved since reset_counts(), by region
  /// ("forward gather", "backward gather", "parameter gather", "gradient reduce-scatter").
  comm::CommCounts counts() const;
  /// Forgets the counts of counts().
  void reset_counts();

private:
  struct State;
  std::shared_ptr<State> state_; // shared with the hooks and graph nodes, which hold it weakly
};

} // namespace tinyscale::zero
