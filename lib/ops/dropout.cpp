// Seeded dropout (Srivastava et al. 2014), inverted: kept values are scaled by 1/(1-p) at
// training time so evaluation needs nothing. The mask comes from a counter-based stream, so it is
// reproducible from (seed, stream, offset) alone: tensor parallelism gives ranks the same stream
// where activations are replicated and different streams where they are sharded.
#include "backend/backend.hpp"
#include "ops/ops.hpp"

namespace tinyscale {

Tensor dropout(const Tensor& x, double p, DropoutRng rng) {
  check_floating(x, "dropout", "its input");
  TS_CHECK(p >= 0.0 && p < 1.0, "dropout: expected a probability in [0, 1), found ", p);
  if (p == 0.0) return x;
  Tensor mask = Tensor::empty(x.shape(), x.dtype(), x.device());
  backend_of(x).dropout_mask(rng.seed, rng.stream, rng.offset, p, mask);
  return mul(x, mask); // the mask is a constant, so mul's backward is dropout's backward
}

} // namespace tinyscale
