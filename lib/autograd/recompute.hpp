// Activation recompute (chapter 07's memory lever; Chen et al. 2016, "Training Deep Nets with
// Sublinear Memory Cost"): a piece of the forward runs without keeping its graph, and its backward
// runs that piece again, this time with the graph, and back-propagates through it. Memory falls
// to the piece's inputs and outputs; the price is a second forward of the piece. The easy thing
// to get wrong: the second run must compute exactly what the first did. Everything here that
// draws randomness (dropout) is a pure function of (seed, step, name, row), and routing and
// collectives are deterministic, so the second run repeats the first bit for bit.
#pragma once

#include "core/tensor.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tinyscale {

/// A piece of the forward: inputs -> outputs (tensors only; the function may be run twice, so
/// it must hold its state by value or through pointers that outlive the backward).
using RecomputedFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

/// Runs `fn` on `inputs` keeping none of its graph, and returns its outputs, which are
/// differentiable: their backward re-runs `fn` with the graph on the saved inputs and
/// back-propagates through it (the parameters `fn` uses get their gradients from that inner
/// backward, as without recompute). Without grad mode `fn` just runs; when no input requires
/// grad it runs with its graph (nothing to save). Outputs may differ in dtype; they travel as
/// one tensor of the widest, which every narrower float type converts into and back exactly.
std::vector<Tensor> recompute(const std::string& name, const std::vector<Tensor>& inputs,
                              const RecomputedFn& fn);

/// True on this thread while a recompute re-runs its piece inside the backward: statistics of
/// the forward (load counters) count the first run only.
bool recomputing();

/// How many pieces this thread has run a second time so far (tests: proof that recompute ran).
std::int64_t recompute_reruns();

} // namespace tinyscale
