#include "autograd/grad_mode.hpp"

namespace tinyscale {

namespace {
thread_local bool t_grad_enabled = true;
}

bool grad_enabled() { return t_grad_enabled; }

NoGradGuard::NoGradGuard() : previous_(t_grad_enabled) { t_grad_enabled = false; }

NoGradGuard::~NoGradGuard() { t_grad_enabled = previous_; }

EnableGradGuard::EnableGradGuard() : previous_(t_grad_enabled) { t_grad_enabled = true; }

EnableGradGuard::~EnableGradGuard() { t_grad_enabled = previous_; }

} // namespace tinyscale
