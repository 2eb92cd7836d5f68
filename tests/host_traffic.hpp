// The documented host traffic of one training step on a device (chapter 11), shared by the unit
// and parallel tests. After the warm-up step, a step on a device moves only:
//   to the device: each micro-batch's inputs and targets (two int64 [rows, T] tensors);
//   to the host:   each micro-batch's loss and lm_loss (one element each), the gradient norm
//                  (one float64), and in a data-parallel step (--dp, --zero) each micro-batch's
//                  weighted loss (the share dp::accumulate_gradients returns), and under --dp
//                  each bucket's "had a gradient" counts (one element per parameter of the
//                  bucket);
//   with MoE layers: each micro-batch's aux and z losses, and the router's own transfers (its
//                  probabilities down, the token ids of the dispatch up: the top-k and the
//                  capacity run on the host in this version), all made in lib/moe/, lib/ep/
//                  and lib/tp/blocks.cpp (the tensor-parallel MoE layer),
//                  listed apart; under --ep the norm is read in two parts (dense, experts);
//   under --tp:    the vocab-parallel embedding's and cross-entropy's shard rows, computed on
//                  the host from the ids (lib/tp/vocab_parallel.cpp), listed apart;
//   over a communicator that reads only device memory (nccl, or threads with
//                  TINYSCALE_COMM_DEVICE_ONLY, as in the parallel_emu pass): the host statistics
//                  a collective sums or gathers (losses, counts, norms), staged through the
//                  device by the tensor layer (lib/comm/tensor_comm.cpp), one copy each way,
//                  listed apart.
// Anything else (a parameter, a gradient, an activation read on the host) is a copy a GPU would
// stall on, and the check names its call site.
#pragma once

#include "backend/host_traffic.hpp"
#include "comm/communicator.hpp"
#include "core/dtype.hpp"

#include <cstdint>
#include <sstream>
#include <string>

namespace tinyscale::test {

/// What one rank's step may move: its micro-batches and rows, and (under --dp) its buckets.
struct StepTrafficShape {
  std::int64_t micro_batches = 1;
  std::int64_t rows = 1; ///< rows of one micro-batch on this rank
  std::int64_t seq_len = 1;
  std::size_t element_bytes = 4;    ///< the model's dtype: losses and counts are in it
  bool data_parallel = false;       ///< a dp::data_parallel_step (--dp, --zero)
  std::int64_t buckets = 0;         ///< data-parallel buckets (0 without --dp)
  std::int64_t bucketed_params = 0; ///< parameters over all buckets
  bool moe = false;                 ///< MoE layers: aux and z losses, and the router's transfers
  std::int64_t norms = 1;           ///< norm reads: 2 under --ep (the dense and the experts' part)
  bool vocab_parallel = false;      ///< --tp: the vocab-parallel rows' transfers (lib/tp/)
  /// The pipeline executor's step (fourd::MeshTrainer, every layout that splits the model): per
  /// micro-batch only the loss (and aux and z), no share; one norm read.
  bool pipeline = false;
  /// The communicators read only device memory (TINYSCALE_COMM_DEVICE_ONLY): staged statistics.
  bool staged_statistics = comm::default_comm_options().device_only.has_value();
};

/// True for a copy the tensor layer makes to stage a buffer the communicator cannot read.
inline bool staged_site(const HostTransfers& t) {
  return t.where.rfind("lib/comm/tensor_comm.cpp:", 0) == 0;
}

/// True for a copy the router makes (lib/moe/, lib/ep/, and the tensor-parallel MoE layer in
/// lib/tp/blocks.cpp): the documented routing traffic.
inline bool routing_site(const HostTransfers& t) {
  return t.where.rfind("lib/moe/", 0) == 0 || t.where.rfind("lib/ep/", 0) == 0 ||
         t.where.rfind("lib/tp/blocks.cpp:", 0) == 0;
}

/// True for a copy the vocab-parallel embedding and cross-entropy make (lib/tp/vocab_parallel).
inline bool vocab_rows_site(const HostTransfers& t) {
  return t.where.rfind("lib/tp/vocab_parallel.cpp:", 0) == 0;
}

/// Copies, bytes to the device, copies and bytes to the host, leaving out the staged statistics
/// over a device-only communicator (listed apart; each at most a statistics vector, 4 KiB).
struct TrafficTotals {
  std::int64_t up = 0, up_bytes = 0, down = 0, down_bytes = 0;
  std::string staged_problem; ///< "" unless a staged copy is larger than a statistics vector
};
inline TrafficTotals unstaged_totals(const HostTraffic& traffic) {
  TrafficTotals out;
  const bool device_only = comm::default_comm_options().device_only.has_value();
  for (const HostTransfers& t : traffic.sites()) {
    if (device_only && staged_site(t)) {
      if (t.bytes > 4096 * t.count)
        out.staged_problem += "staged more than 4 KiB: " + t.where + "\n";
      continue;
    }
    (t.to_host ? out.down : out.up) += t.count;
    (t.to_host ? out.down_bytes : out.up_bytes) += t.bytes;
  }
  return out;
}

/// "" when `traffic` is exactly the documented list for `shape`, else what differs, with every
/// call site that moved bytes.
inline std::string step_traffic_problem(const HostTraffic& traffic, const StepTrafficShape& s) {
  const std::int64_t e = static_cast<std::int64_t>(s.element_bytes);
  const std::int64_t want_up = 2 * s.micro_batches,
                     want_up_bytes = want_up * s.rows * s.seq_len * 8;
  // loss, lm_loss (, the share) (, aux and z); the pipeline's step: the loss (, aux and z)
  const std::int64_t per_micro_batch =
      (s.pipeline ? 1 : 2 + (s.data_parallel ? 1 : 0)) + (s.moe ? 2 : 0);
  const std::int64_t want_down = per_micro_batch * s.micro_batches + s.norms + s.buckets;
  const std::int64_t want_down_bytes =
      per_micro_batch * s.micro_batches * e + 8 * s.norms + s.bucketed_params * e;
  std::int64_t up = 0, up_bytes = 0, down = 0, down_bytes = 0, routing = 0;
  bool staged_tensor = false; // a staged copy larger than a statistics vector
  for (const HostTransfers& t : traffic.sites()) {
    if ((s.moe && routing_site(t)) || (s.vocab_parallel && vocab_rows_site(t))) {
      routing += t.count;
      continue;
    }
    if (s.staged_statistics && staged_site(t)) {
      staged_tensor = staged_tensor || t.bytes > 4096 * t.count;
      continue;
    }
    (t.to_host ? down : up) += t.count;
    (t.to_host ? down_bytes : up_bytes) += t.bytes;
  }
  if (up == want_up && up_bytes == want_up_bytes && down == want_down &&
      down_bytes == want_down_bytes && (!(s.moe || s.vocab_parallel) || routing > 0) &&
      !staged_tensor)
    return "";
  std::ostringstream out;
  out << "expected " << want_up << " copies (" << want_up_bytes << " bytes) to the device and "
      << want_down << " (" << want_down_bytes << " bytes) to the host"
      << (s.moe || s.vocab_parallel ? ", besides the listed-apart ones (at least one)" : "")
      << ", found " << up << " (" << up_bytes << ") and " << down << " (" << down_bytes << ")"
      << (s.moe || s.vocab_parallel ? ", and " + std::to_string(routing) + " listed apart" : "")
      << (s.staged_statistics ? ", and staged statistics (each at most 4 KiB)" : "") << ":\n"
      << traffic.table();
  return out.str();
}

/// The rule every step obeys, whatever its layout: outside the listed-apart sites (the router's,
/// the vocab-parallel rows', the staged statistics over a device-only communicator), every copy to
/// the host is one scalar (at most 8 bytes), at most `max_scalars` of them, and every copy to the
/// device one micro-batch's ids or targets
/// (`batch_bytes`). "" when it holds, else the copies that break it. For layouts whose exact list
/// depends on the rank (a composed run's stages): a parameter, gradient or activation read on the
/// host breaks it, and so does a scalar read per parameter.
inline std::string scalars_and_batches_problem(const std::vector<HostTransfers>& sites,
                                               std::int64_t batch_bytes, std::int64_t max_scalars) {
  std::ostringstream out;
  std::int64_t scalars = 0;
  for (const HostTransfers& t : sites) {
    if (routing_site(t) || vocab_rows_site(t)) continue;
    if (comm::default_comm_options().device_only && staged_site(t) && t.bytes <= 4096 * t.count)
      continue;
    if (t.to_host) scalars += t.count;
    const bool ok = t.to_host ? t.bytes <= 8 * t.count : t.bytes == batch_bytes * t.count;
    if (!ok)
      out << (t.to_host ? "to host  " : "to device") << "  " << t.count << " copies  " << t.bytes
          << " bytes  " << t.where << "\n";
  }
  if (scalars > max_scalars)
    out << scalars << " scalar reads, expected at most " << max_scalars << "\n";
  return out.str();
}

} // namespace tinyscale::test
