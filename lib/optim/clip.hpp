// Global gradient-norm clipping, as torch.nn.utils.clip_grad_norm_ does it (chapter 02).
// The norm is one L2 norm over every gradient of the model together, not one per tensor, and it
// is accumulated in double. The easy thing to get wrong: under data or tensor parallelism each
// rank holds only part of the gradient, so the squares must be summed across ranks first.
#pragma once

#include "nn/parameter.hpp"

namespace tinyscale::optim {

/// The L2 norm of all gradients together; a parameter without a gradient contributes 0.
double global_grad_norm(const nn::ParameterList& params);

/// Scales every gradient by min(1, max_norm / (norm + 1e-6)) and returns the norm before
/// clipping; max_norm <= 0 disables clipping (the norm is still returned). A NaN norm leaves the
/// gradients as they are: check the returned norm before stepping.
double clip_grad_norm(const nn::ParameterList& params, double max_norm);

/// The factor clipping multiplies every gradient by: min(1, max_norm / (norm + 1e-6)), PyTorch's
/// rule; 1 when max_norm <= 0 or the norm is NaN (clipping off).
double clip_factor(double max_norm, double norm);

/// The scaling step of clip_grad_norm with a norm computed elsewhere (a sharded model's norm,
/// summed over ranks: tp/gradients.hpp): scales every gradient by min(1, max_norm / (norm +
/// 1e-6)); max_norm <= 0 or a NaN norm leaves them as they are.
void clip_grads_to_norm(const nn::ParameterList& params, double max_norm, double norm);

} // namespace tinyscale::optim
