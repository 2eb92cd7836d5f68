// Whether ops record the graph (chapter 01). The flag is per thread: on the threads backend every
// rank is a thread with its own graph, so one rank's no_grad must not silence another's.
#pragma once

namespace tinyscale {

/// True when ops on this thread record the backward graph.
bool grad_enabled();

/// RAII scope that sets whether ops on this thread record the graph, and restores the previous
/// setting when it ends.
class GradModeGuard {
public:
  explicit GradModeGuard(bool enabled);
  ~GradModeGuard();
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

private:
  bool previous_;
};

/// RAII scope in which ops record nothing (evaluation, optimizer steps, collectives' buffers).
struct NoGradGuard : GradModeGuard {
  NoGradGuard() : GradModeGuard(false) {}
};

/// RAII scope in which ops record the graph again: a backward closure (which runs under
/// NoGradGuard) that re-runs a forward to differentiate it (activation recompute).
struct EnableGradGuard : GradModeGuard {
  EnableGradGuard() : GradModeGuard(true) {}
};

} // namespace tinyscale
