// Internal: the non-recording matrix product that matmul and attention are built on.
#pragma once

#include "core/tensor.hpp"

namespace tinyscale::detail {

/// op(a) @ op(b) * alpha over equal leading axes, without recording a node. a is [.., m, k]
/// ([.., k, m] when trans_a), b is [.., k, n] ([.., n, k] when trans_b), or b is 2-D and shared.
Tensor gemm(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, double alpha = 1.0);

} // namespace tinyscale::detail
