#include "tp/run.hpp"

#include "train/run.hpp"

namespace tinyscale::tp {

std::string describe_run(const mesh::ParallelPlan& plan, const char* backend,
                         std::int64_t micro_batches, std::int64_t micro_batch_rows) {
  return train::formatted(
      "tensor parallel: tp %d%s x dp %d (%s) | %lld micro-batches of %lld rows per dp rank",
      plan.tp, plan.sequence_parallel ? " with sequence parallelism" : "", plan.dp, backend,
      static_cast<long long>(micro_batches), static_cast<long long>(micro_batch_rows));
}

} // namespace tinyscale::tp
