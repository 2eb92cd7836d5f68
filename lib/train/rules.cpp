#include "train/rules.hpp"

#include "core/error.hpp"

namespace tinyscale::train {

void check_batch_split(const io::RunConfig& config, std::int64_t replicas, const char* who,
                       const char* unit) {
  const TrainConfig& t = config.train;
  const std::int64_t n = replicas, k = n * t.micro_batches;
  TS_CHECK(t.micro_batches >= 1 && n >= 1 && t.batch_size % k == 0, who,
           ": expected train.batch_size (", t.batch_size, ") to divide by dp (", n,
           ") x train.micro_batches (", t.micro_batches, ") = ", k,
           ", found a remainder: it does not divide into ", n, " ", unit, "(s) x ", t.micro_batches,
           " micro-batches of equal rows; choose a batch size that is a ", "multiple of ", k);
}

} // namespace tinyscale::train
