#include "autograd/grad_mode.hpp"

namespace tinyscale {

namespace {
thread_local bool t_grad_enabled = true;
}

bool grad_enabled() { return t_grad_enabled; }

GradModeGuard::GradModeGuard(bool enabled) : previous_(t_grad_enabled) { t_grad_enabled = enabled; }

GradModeGuard::~GradModeGuard() { t_grad_enabled = previous_; }

} // namespace tinyscale
