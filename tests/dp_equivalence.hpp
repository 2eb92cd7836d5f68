// The proof of chapter 04, shared by the threads tests (label parallel) and the mpi tests (label
// mpi): N data-parallel ranks with micro-batches of b rows and k accumulation steps train exactly
// like one rank with batch N*b*k (split into N*k micro-batches, so a MoE layer routes the same
// micro-batches). Compared after 3 AdamW steps: every step's loss and gradient norm, and every
// parameter. Relative error of a tensor = max|dp - ref| / max|ref| (the worst element against the
// tensor's scale), fp32, at most 1e-5. Why per tensor and not per element: summing the ranks'
// gradients in another order changes float32 roundings by ~1e-7 relative, and an element whose
// true value is ~0 would show a huge relative error for an absolute difference of ~1e-9.
// The model has no biases: the attention key bias has a true gradient of exactly 0 (softmax
// ignores a constant shift), so its fp32 gradient is rounding noise that Adam's m / sqrt(v)
// turns into full-size steps of either sign. The same happens, more mildly, to any element whose
// gradient is near 0; AdamW's eps bounds it, so the float32 runs use kFloat32TestAdamEps (below).
// The float64 case keeps the biases and the default eps, to show they too are equal once the
// rounding noise is gone.
#pragma once

#include "comm/communicator.hpp"
#include "dp/trainer.hpp"
#include "train/trainer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace tinyscale::test {

/// What one run leaves behind: per-step losses and norms, and the final parameters.
struct RunRecord {
  std::vector<double> losses, grad_norms;
  std::vector<std::pair<std::string, std::vector<double>>> params;
  /// Every parameter's gradient after the first step (as backward left it: the update applies the
  /// clip factor as it reads it; zeros where it had none), when
  /// both sides record it: a whole tensor's gradient off by a constant factor hides from AdamW
  /// (m / sqrt(v) does not see a scale) but not from this comparison.
  std::vector<std::pair<std::string, std::vector<double>>> first_grads;
};

/// AdamW's eps for every float32 comparison with one rank (every parallel run sums the same
/// gradients in another grouping, so they differ by roundings). eps bounds how much AdamW
/// amplifies a difference in a gradient element: the update lr x m / (sqrt(v) + eps) moves by at
/// most about lr x |dg| / eps for a change dg of the gradient. At the default 1e-8, a rounding
/// difference of 1e-10 on an element whose gradient is nearly 0 moves that weight by up to
/// lr / 100, which is 1e-5 of a tensor's scale at lr 1e-3: the comparison then measures that
/// amplified noise, not the parallelism. Measured on a Zen 3 CPU at the default eps, the worst
/// errors sat at 2e-6 to 8.4e-6 (DP 4 with accumulation 8.4e-6, DP x TP 7.8e-6, TP 2 7.0e-6;
/// ZeRO-2 and ep = 2 earlier 1.3e-5 and 1.25e-5), so any change of rounding anywhere (a more
/// accurate GELU, another -O level) moved one or another across 1e-5 (to 2.2e-5). At 1e-5,
/// three orders of magnitude below this model's typical gradient element (about 3e-3 after
/// clipping), AdamW is unchanged for every element that carries signal, and the worst error of
/// every float32 case fell to 1e-7 to 7.6e-7, more than 13 times below the 1e-5 they are held
/// to, so a real error of 1e-6 now shows. The float64 cases keep the default eps: their
/// rounding is 1e-16, not 6e-8.
inline constexpr double kFloat32TestAdamEps = 1e-5;

/// The device every equivalence run trains on, both sides: "cpu", or the device named by the
/// environment variable TINYSCALE_TEST_DEVICE ("emu": ctest runs the whole parallel suite a second
/// time on the emulated device, label parallel_emu, at the same tolerances).
inline std::string test_device() {
  const char* device = std::getenv("TINYSCALE_TEST_DEVICE");
  return device != nullptr && *device != '\0' ? device : "cpu";
}

/// The run both sides train: N*b*k sequences per step, 3 steps, clipping that bites.
inline io::RunConfig dp_run_config(int n, int b, int k, bool moe, DType dtype = DType::Float32) {
  io::RunConfig c;
  c.model.vocab_size = 256;
  c.model.n_positions = 16;
  c.model.n_layer = 2;
  c.model.n_head = 2;
  c.model.n_embd = 32;
  c.model.bias = dtype == DType::Float64;
  c.model.dropout = 0.1; // masks follow the global row: the ranks must drop what one rank drops
  c.model.dtype = dtype;
  if (moe) c.model.moe = {2, 4, 2, 1.0, 1e-2, 1e-3}; // top-2 of 4 experts, capacity 1.0: drops
  c.data.markov_train_tokens = 8192;
  c.data.markov_val_tokens = 1024;
  c.train.steps = 3;
  c.train.batch_size = n * b * k;
  c.train.seq_len = 16;
  c.train.micro_batches = k;
  c.train.device = test_device();
  c.optim.lr = 1e-3;
  c.optim.warmup_steps = 0;
  c.optim.grad_clip = 0.5;
  if (dtype == DType::Float32) c.optim.eps = kFloat32TestAdamEps;
  return c;
}

inline void record_params(RunRecord& r, const nn::ParameterList& params) {
  for (const auto& p : params) r.params.emplace_back(p.name, p.tensor.to_vector());
}

/// Records every parameter's current gradient (zeros where it has none) as r.first_grads.
inline void record_grads(RunRecord& r, const nn::ParameterList& params) {
  for (const auto& p : params) {
    const Tensor g = p.tensor.grad();
    r.first_grads.emplace_back(
        p.name, g.defined() ? g.to_vector()
                            : std::vector<double>(static_cast<std::size_t>(p.tensor.numel()), 0.0));
  }
}

/// One rank, micro-batches of the same size as the data-parallel run's (N*k of them).
inline RunRecord reference_run(io::RunConfig config, int n) {
  config.train.micro_batches *= n;
  train::Trainer trainer(config);
  RunRecord r;
  for (int s = 0; s < config.train.steps; ++s) {
    const train::StepResult step = trainer.train_step();
    r.losses.push_back(step.loss);
    r.grad_norms.push_back(step.grad_norm);
    if (s == 0) record_grads(r, trainer.model().parameters());
  }
  record_params(r, trainer.model().parameters());
  return r;
}

/// This rank's side of the data-parallel run over `group`.
inline RunRecord dp_run(comm::Communicator& group, const io::RunConfig& config,
                        dp::DpOptions options = {}) {
  dp::DpTrainer trainer(config, group, options);
  RunRecord r;
  for (int s = 0; s < config.train.steps; ++s) {
    const train::StepResult step = trainer.train_step();
    r.losses.push_back(step.loss);
    r.grad_norms.push_back(step.grad_norm);
  }
  record_params(r, trainer.trainer().model().parameters());
  return r;
}

inline double relative_error(double got, double want) {
  return std::abs(got - want) / std::max(std::abs(want), 1e-30);
}

/// "" when `got` equals `want` within `tolerance`, else what differs first and by how much.
inline std::string compare_runs(const RunRecord& want, const RunRecord& got, double tolerance) {
  char buf[256];
  for (std::size_t s = 0; s < want.losses.size(); ++s) {
    for (auto [what, w, g] : {std::tuple{"loss", want.losses[s], got.losses[s]},
                              std::tuple{"grad norm", want.grad_norms[s], got.grad_norms[s]}}) {
      if (relative_error(g, w) > tolerance) {
        std::snprintf(buf, sizeof buf,
                      "step %zu %s: expected %.9g (one rank), found %.9g (rel %.2e)", s + 1, what,
                      w, g, relative_error(g, w));
        return buf;
      }
    }
  }
  using Tensors = std::vector<std::pair<std::string, std::vector<double>>>;
  auto first_difference = [&](const Tensors& want_t, const Tensors& got_t,
                              const char* what) -> std::string {
    for (std::size_t i = 0; i < want_t.size(); ++i) {
      const auto& [name, w] = want_t[i];
      const std::vector<double>& g = got_t[i].second;
      double worst = 0, scale = 0;
      std::size_t at = 0;
      for (std::size_t j = 0; j < w.size(); ++j) {
        scale = std::max(scale, std::abs(w[j]));
        if (std::abs(g[j] - w[j]) > worst) worst = std::abs(g[j] - w[j]), at = j;
      }
      if (worst > tolerance * scale) {
        std::snprintf(buf, sizeof buf,
                      "%s %s: element %zu expected %.9g (one rank), found %.9g; max |diff| / "
                      "max |ref| = %.2e",
                      what, name.c_str(), at, w[at], g[at], worst / scale);
        return buf;
      }
    }
    return "";
  };
  if (!want.first_grads.empty() && !got.first_grads.empty()) {
    const std::string d =
        first_difference(want.first_grads, got.first_grads, "gradient after step 1 of");
    if (!d.empty()) return d;
  }
  return first_difference(want.params, got.params, "parameter after the last step:");
}

/// The largest relative error over losses, norms and parameters (for reports).
inline double worst_error(const RunRecord& want, const RunRecord& got) {
  double worst = 0;
  for (std::size_t s = 0; s < want.losses.size(); ++s) {
    worst = std::max(worst, relative_error(got.losses[s], want.losses[s]));
    worst = std::max(worst, relative_error(got.grad_norms[s], want.grad_norms[s]));
  }
  auto tensors = [&](const auto& w, const auto& g) {
    for (std::size_t i = 0; i < w.size() && i < g.size(); ++i) {
      double diff = 0, scale = 0;
      for (std::size_t j = 0; j < w[i].second.size(); ++j) {
        scale = std::max(scale, std::abs(w[i].second[j]));
        diff = std::max(diff, std::abs(g[i].second[j] - w[i].second[j]));
      }
      worst = std::max(worst, diff / std::max(scale, 1e-30));
    }
  };
  tensors(want.params, got.params);
  tensors(want.first_grads, got.first_grads);
  return worst;
}

} // namespace tinyscale::test
