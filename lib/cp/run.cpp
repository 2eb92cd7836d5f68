#include "cp/run.hpp"

#include "cp/ring_attention.hpp"
#include "cp/rules.hpp"
#include "train/run.hpp"

#include <cstdio>
#include <vector>

namespace tinyscale::cp {

std::string describe_run(const mesh::ParallelPlan& plan, const char* backend,
                         const train::TrainConfig& t, std::int64_t micro_batch_rows) {
  return train::formatted(
      "context parallel: cp %d (%s chunks: %lld of %lld positions per rank) x dp %d (%s) | "
      "%lld micro-batches of %lld rows per dp rank | ring attention; gradients summed over "
      "dp x cp",
      plan.cp, split_name(parse_split(plan.cp_split)).c_str(),
      static_cast<long long>(t.seq_len / plan.cp), static_cast<long long>(t.seq_len), plan.dp,
      backend, static_cast<long long>(t.micro_batches), static_cast<long long>(micro_batch_rows));
}

void print_ring_overlap(comm::Communicator& world, const metrics::TraceRecorder& trace,
                        const std::string& path) {
  const std::vector<metrics::TraceEvent> events = metrics::write_gathered_trace(world, trace, path);
  if (world.rank() != 0) return;
  const metrics::Overlap ring = metrics::measure_overlap(events, "ring", "ring comm");
  std::printf("ring overlap: %.1f ms of %.1f ms ring transfers hidden behind attention (%.0f%%; "
              "every hop is posted before a step's attention but the gradients' last, home)\n",
              ring.hidden_us * 1e-3, ring.comm_us * 1e-3, 100.0 * ring.fraction());
}

} // namespace tinyscale::cp
