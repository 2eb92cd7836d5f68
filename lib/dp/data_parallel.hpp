// Data parallelism (chapter 04): every rank holds the whole model, trains on its own rows of the
// global batch, and all-reduces the gradients so that every rank takes the step one rank would
// take on the whole batch. Gradients travel in buckets (dp/bucket.hpp), each all-reduced
// asynchronously the moment its last gradient is ready, overlapped with the rest of backward.
// The easy thing to get wrong: a parameter can get no gradient at all on some rank (a MoE expert
// that received no tokens there). Its gradient-ready hook never fires, so its bucket is launched
// at the end of backward, and every bucket carries one "had a gradient" count per parameter: a
// parameter no rank had a gradient for stays without one, so AdamW skips it exactly as it would
// on one rank.
#pragma once

#include "comm/communicator.hpp"
#include "dp/bucket.hpp"
#include "metrics/trace.hpp"
#include "nn/parameter.hpp"

#include <cstdint>
#include <memory>
#include <vector>

namespace tinyscale::dp {

/// Something that may synchronise gradients during backward and can be told not to (no_sync).
/// DataParallel is one; a test can stand in its own.
class GradientSync {
public:
  virtual ~GradientSync() = default;
  /// Whether the next backward pass synchronises gradients (true by default).
  virtual bool syncing() const = 0;
  virtual void set_syncing(bool syncing) = 0;
};

/// RAII scope in which backward passes only accumulate gradients locally (PyTorch's no_sync):
/// the micro-batches before the last one of a step, in gradient accumulation.
class NoSync {
public:
  explicit NoSync(GradientSync& sync) : sync_(sync), previous_(sync.syncing()) {
    sync_.set_syncing(false);
  }
  ~NoSync() { sync_.set_syncing(previous_); }
  NoSync(const NoSync&) = delete;
  NoSync& operator=(const NoSync&) = delete;

private:
  GradientSync& sync_;
  bool previous_;
};

/// How DataParallel moves gradients.
struct DpOptions {
  /// Bucket size in bytes (dp/bucket.hpp): 1 = one all-reduce per parameter.
  std::int64_t bucket_bytes = 256 << 10;
  /// Launch each bucket from the gradient-ready hooks, during backward. false: launch every
  /// bucket after backward (no overlap), the baseline of `tinyscale bench dp`.
  bool overlap = true;
  /// For tests only: never all-reduce this bucket (-1: none). The negative control that shows the
  /// equivalence test notices one missing bucket.
  int skip_bucket = -1;
};

/// What the last finish_gradient_sync() did.
struct SyncStats {
  std::size_t buckets = 0;              ///< buckets all-reduced
  std::size_t launched_in_backward = 0; ///< of those, launched by a gradient-ready hook
  std::int64_t bytes = 0;               ///< gradient bytes all-reduced (this rank's buffer)
  double wait_seconds = 0;              ///< time finish_gradient_sync() spent waiting
};

/// The data-parallel wrapper around a model's parameters on one rank of the group `group`.
class DataParallel : public GradientSync {
public:
  /// Collective over `group`: broadcasts every parameter from group rank 0 (so all replicas start
  /// equal), assigns the buckets and registers a gradient-ready hook on every parameter. The
  /// parameters must share one floating dtype. `group` and `trace` (optional) must outlive this.
  DataParallel(nn::ParameterList params, comm::Communicator& group, DpOptions options = {},
               metrics::TraceRecorder* trace = nullptr);
  ~DataParallel() override;
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  bool syncing() const override;
  void set_syncing(bool syncing) override;

  /// Collective: after the synchronising backward pass, launches the buckets the hooks did not
  /// (all of them without overlap), waits for every all-reduce, and writes the summed gradients
  /// back into the parameters. Call it once per step, before clipping and the optimizer.
  /// Afterwards every rank holds the same, complete gradient, so optim::clip_grad_norm on any
  /// rank computes the global norm exactly as one rank does, with no communication (unlike ZeRO-2
  /// or tensor parallelism, where each rank holds a part and the squares are summed first).
  void finish_gradient_sync();

  const std::vector<Bucket>& buckets() const;
  const nn::ParameterList& parameters() const;
  const SyncStats& last_sync() const;
  comm::Communicator& group() const;

private:
  struct State;
  std::shared_ptr<State> state_; // shared with the hooks, which hold it weakly
};

} // namespace tinyscale::dp
