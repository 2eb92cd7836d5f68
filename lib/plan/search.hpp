// The planner's search (chapter 09): every layout of a model on a number of devices that the
// sizes allow, predicted, filtered by memory and ranked by step time. The easy thing to get
// wrong: a layout that does not fit is not "slow", it cannot run; it is counted and left out,
// never ranked.
#pragma once

#include "plan/predict.hpp"

#include <cstdint>
#include <vector>

namespace tinyscale::plan {

/// Sequences of at least this many positions are "long": there the search tries context
/// parallelism by default (attention's s^2 work and activations grow past the matmuls' s h^2 near
/// s = 6h, and Llama 3 starts cp at 8K); below it cp is 1 unless SearchSpace::cp asks.
constexpr std::int64_t kLongSequence = 8192;

/// What to search over; an empty list means every value the model and the device count allow
/// (for cp: every value on sequences of kLongSequence or more, else 1).
struct SearchSpace {
  int devices = 0;        ///< dp x tp x pp x ep x cp, exactly
  std::int64_t batch = 0; ///< global batch, sequences
  std::vector<int> tp{}, pp{}, ep{}, zero{}, cp{};
  std::vector<pp::ScheduleKind> schedules{}; ///< for pp > 1
  std::vector<int> micro_batch_sizes = {1, 2, 4, 8};
  std::vector<Recompute> recompute = {Recompute::None, Recompute::Full}; // selective: when asked
  int max_chunks = 4; ///< interleaved: v from 2 up to this (dividing the layers per stage)
  std::string order = mesh::kDefaultOrder;
};

/// The outcome of a search.
struct Plan {
  int devices = 0;                ///< the devices every layout uses (SearchSpace::devices)
  std::vector<Prediction> ranked; ///< the layouts that fit, fastest first
  int evaluated = 0;              ///< layouts predicted
  int too_big = 0;                ///< layouts dropped by the memory filter
  Prediction smallest_misfit;     ///< the dropped layout with the least memory (when too_big > 0)
};

/// Every layout the space allows, as PlanLayouts (sizes checked, not yet predicted). Throws when
/// a filter holds a value no layout can have: a tp, pp or ep size < 1, a ZeRO stage outside 0-3,
/// a micro-batch size < 1.
std::vector<PlanLayout> enumerate_layouts(const ModelShape& model, const SearchSpace& space);

/// Predicts every layout of `space`, drops those over the memory budget and ranks the rest.
/// Throws when the space holds no layout at all, naming the device count, the batch, the filters
/// set and which of them empties the space alone (or that they do together, or that none is set).
Plan search(const ModelShape& model, const Cluster& cluster, const SearchSpace& space);

} // namespace tinyscale::plan
