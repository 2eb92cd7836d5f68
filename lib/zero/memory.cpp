// ZeRO's memory and traffic formulas (chapter 07).
#include "zero/memory.hpp"

#include "core/error.hpp"

namespace tinyscale::zero {

StateBytes state_bytes_formula(int stage, double psi, int ranks, StateBytesPerParameter bytes) {
  TS_CHECK(stage >= 0 && stage <= 3 && ranks >= 1, "state_bytes_formula: expected stage 0-3 and ",
           "ranks >= 1, found stage ", stage, ", ", ranks, " ranks");
  const double n = ranks;
  return {bytes.parameters * psi / (stage >= 3 ? n : 1.0),
          bytes.gradients * psi / (stage >= 2 ? n : 1.0),
          bytes.optimizer * psi / (stage >= 1 ? n : 1.0)};
}

double traffic_formula(int stage, int ranks, int micro_batches) {
  TS_CHECK(stage >= 0 && stage <= 3 && ranks >= 1 && micro_batches >= 1, "traffic_formula: ",
           "expected stage 0-3, ranks >= 1 and micro_batches >= 1, found stage ", stage, ", ",
           ranks, " ranks, ", micro_batches, " micro-batches");
  const double ring = static_cast<double>(ranks - 1) / ranks, k = micro_batches;
  switch (stage) {
  case 2: return ring * (k + 1);
  case 3: return ring * 3 * k;
  default: return ring * 2;
  }
}

} // namespace tinyscale::zero
