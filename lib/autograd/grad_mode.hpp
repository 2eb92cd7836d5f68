// Whether ops record the graph (chapter 01). The flag is per thread: on the threads backend every
// rank is a thread with its own graph, so one rank's no_grad must not silence another's.
#pragma once

namespace tinyscale {

/// True when ops on this thread record the backward graph.
bool grad_enabled();

/// RAII scope in which ops record nothing (evaluation, optimizer steps, collectives' buffers).
class NoGradGuard {
public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

private:
  bool previous_;
};

/// RAII scope in which ops record the graph again: a backward closure (which runs under
/// NoGradGuard) that re-runs a forward to differentiate it (activation recompute).
class EnableGradGuard {
public:
  EnableGradGuard();
  ~EnableGradGuard();
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

private:
  bool previous_;
};

} // namespace tinyscale
