// Checkpoints of a run whose ranks hold pieces of the model (chapters 05, 08, 10 and 12), always
// written in the single-rank layout (every parameter whole, by its Hugging Face name, with its
// whole AdamW moments and step count), so that any layout loads what any other wrote. A ShardMap
// says where each parameter lives in one layout (tp shards, experts on one ep rank, pipeline
// stages); join_checkpoint assembles the single-rank checkpoint from the pieces and
// cut_checkpoint gives a rank its pieces back. The tensor-parallel, expert-parallel, pipeline and
// composed runs save and load through these two (ZeRO gathers its flat shards itself, chapter 07;
// `tinyscale reshard` cuts offline by the same rules).
// The easy thing to get wrong: join_checkpoint visits every parameter of the whole model, in the
// single-rank order, on every rank, held or not: share() is collective for each of them (join()
// for each one the rank holds), so no group waits on a rank that skipped one.
#pragma once

#include "io/checkpoint.hpp"
#include "io/config.hpp"
#include "nn/parameter.hpp"
#include "optim/adamw.hpp"

#include <cstdint>
#include <functional>
#include <string>

namespace tinyscale::train {

/// Where the single-rank model's parameters live in one layout, seen from one rank.
class ShardMap {
public:
  virtual ~ShardMap() = default;
  /// Whether this rank holds a piece of parameter `name` (an expert lives on one ep rank only).
  virtual bool holds(const std::string& name) const = 0;
  /// Collective over the ranks that split `name` (all of them hold a piece): the whole tensor
  /// from this rank's piece `piece` of it, or of its AdamW moment.
  virtual Tensor join(const std::string& name, const Tensor& piece) {
    (void)name;
    return piece;
  }
  /// Collective over the ranks that hold `name` in different places (ep, pp), for every
  /// parameter in the same order: `whole` becomes the value on the rank that holds or trains it.
  virtual void share(const std::string& name, Tensor& whole) { (void)name, (void)whole; }
  /// This rank's piece of the whole tensor `whole` (the inverse of join).
  virtual Tensor cut(const std::string& name, const Tensor& whole) const {
    (void)name;
    return whole;
  }
};

/// One parameter's piece on this rank with its AdamW moments and step count (zeros and 0 where
/// another rank trains it: share() then brings the trained values).
struct HeldParameter {
  Tensor value, exp_avg, exp_avg_sq;
  std::int64_t steps = 0;
};

/// Collective (see ShardMap): the single-rank checkpoint's parameters and AdamW state (in
/// optim::AdamW::state_tensors()'s layout), whole on every rank that keeps it, in host memory (what
/// a writer needs; the collectives stage device buffers themselves). `whole` lists the single-rank
/// model's parameters in order; their shapes and dtypes are read only where this rank holds no
/// piece. `held(name)` gives this rank's piece, called in that order where map.holds(name) (it
/// may be collective over the ranks holding the same piece). The caller adds the step, the config
/// and the seeds (train::Trainer::stamp) and chooses the writer. A rank with `keep` false (not
/// the writer) takes part in every collective but keeps nothing: it holds one whole parameter
/// and its moments at a time, and gets a checkpoint without tensors.
io::Checkpoint join_checkpoint(ShardMap& map, const std::vector<nn::ParameterSpec>& whole,
                               const std::function<HeldParameter(const std::string&)>& held,
                               bool keep = true);

/// join_checkpoint's `held` for a rank whose pieces are `params` and whose AdamW is `adamw`: the
/// moments and step count from `adamw` where it updates the parameter, else zeros and 0 (nullptr:
/// another optimizer holds them). `adamw` must outlive the function; its moments are not copied.
std::function<HeldParameter(const std::string&)> held_in(const nn::ParameterList& params,
                                                         const optim::AdamW* adamw);

/// This rank's part of the single-rank checkpoint `whole` (read from `path`, named in messages):
/// the piece of every parameter of `mine`, in its order, with the pieces of its AdamW moments and
/// its step count where the checkpoint has them. Throws first unless the checkpoint's config is
/// `config` (train::check_same_run), then, naming the parameter, where one is missing or cuts
/// into another shape than this rank holds; train::Trainer::restore checks the optimizer state.
io::Checkpoint cut_checkpoint(const ShardMap& map, const io::Checkpoint& whole,
                              const nn::ParameterList& mine, const io::RunConfig& config,
                              const std::string& path);

} // namespace tinyscale::train
