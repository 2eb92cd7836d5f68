#include "moe/router.hpp"

#include "core/error.hpp"
#include "ops/ops.hpp"

#include <cmath>

namespace tinyscale::moe {

std::vector<std::int64_t> top_k_experts(const Tensor& probs, int k) {
  TS_CHECK(probs.rank() == 2, "top_k_experts: expected probs [N, E], found ", probs.shape().str());
  const std::int64_t n = probs.size(0), e = probs.size(1);
  TS_CHECK(k >= 1 && k <= e, "top_k_experts: expected 1 <= k <= E = ", e, ", found k = ", k);
  const std::vector<double> p = probs.to_vector();
  // out[t * k + j] = the expert of token t's j-th choice: the j-th largest probability of row t,
  // ties going to the lower expert index (so every run, and every rank, routes alike).
  std::vector<std::int64_t> out(static_cast<std::size_t>(n * k));
  // EXERCISE 3.1 begin: top-k routing
  for (std::int64_t t = 0; t < n; ++t) {
    const double* row = p.data() + t * e;
    for (int j = 0; j < k; ++j) {
      std::int64_t best = -1;
      for (std::int64_t i = 0; i < e; ++i) {
        bool taken = false;
        for (int q = 0; q < j; ++q) taken = taken || out[static_cast<std::size_t>(t * k + q)] == i;
        if (!taken && (best < 0 || row[i] > row[best])) best = i; // strict >: lower index wins
      }
      out[static_cast<std::size_t>(t * k + j)] = best;
    }
  }
  // EXERCISE 3.1 end
  return out;
}

std::int64_t expert_capacity(double capacity_factor, std::int64_t tokens, int k, int n_experts) {
  // ceil(factor * tokens * k / E), at least 1; a factor <= 0 means dropless (room for every one).
  // EXERCISE 3.2 begin: expert capacity and token dropping
  if (capacity_factor <= 0) return tokens * k;
  const double c = std::ceil(capacity_factor * static_cast<double>(tokens * k) / n_experts);
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(c));
  // EXERCISE 3.2 end
}

void assign_capacity(Routing& routing, std::int64_t tokens, int k, int n_experts,
                     std::int64_t capacity) {
  // Fill routing.kept[e] (the assignments a = t * k + j expert e keeps, in the order it takes
  // them) and routing.dropped. All first choices are served before any second choice.
  routing.capacity = capacity;
  // EXERCISE 3.2 begin: expert capacity and token dropping
  routing.kept.assign(static_cast<std::size_t>(n_experts), {});
  routing.dropped = 0;
  for (int j = 0; j < k; ++j)
    for (std::int64_t t = 0; t < tokens; ++t) {
      const std::int64_t a = t * k + j;
      auto& queue =
          routing.kept[static_cast<std::size_t>(routing.expert[static_cast<std::size_t>(a)])];
      if (static_cast<std::int64_t>(queue.size()) < capacity)
        queue.push_back(a);
      else
        ++routing.dropped;
    }
  // EXERCISE 3.2 end
}

Tensor load_balancing_loss(const Tensor& probs, const std::vector<std::int64_t>& expert, int k) {
  const std::int64_t n = probs.size(0), e = probs.size(1);
  // f_i = the fraction of the n * k assignments that chose expert i (counted over all k choices,
  // as Megatron-Core does), P_i = the mean router probability of expert i over the n tokens.
  // f is a constant (no gradient flows through a count); P_i carries the gradient to the router.
  // EXERCISE 3.3 begin: the Switch load-balancing loss
  std::vector<double> f(static_cast<std::size_t>(e), 0.0);
  for (std::int64_t x : expert) f[static_cast<std::size_t>(x)] += 1.0 / static_cast<double>(n * k);
  Tensor fraction = Tensor::from_vector(f, Shape({e}), probs.dtype(), probs.device());
  Tensor mean_prob = mean(probs, {0}); // P_i, [E]
  return sum(mean_prob * fraction) * static_cast<double>(e);
  // EXERCISE 3.3 end
}

Tensor router_z_loss(const Tensor& logits) { return mean(pow_scalar(logsumexp(logits), 2.0)); }

Routing route(const Tensor& x, const Tensor& router_weight, const nn::MoeConfig& config) {
  TS_CHECK(x.rank() == 2 && router_weight.rank() == 2 && x.size(1) == router_weight.size(0),
           "route: expected x [N, C] and router weight [C, E], found ", x.shape().str(), " and ",
           router_weight.shape().str());
  const std::int64_t tokens = x.size(0);
  const int n_experts = static_cast<int>(router_weight.size(1));
  Routing r;
  r.logits = matmul(x, router_weight);
  r.probs = softmax(r.logits);
  r.expert = top_k_experts(r.probs, config.top_k);

  // Gate of assignment a = probs[n, expert[a]], picked as rows of probs viewed as [N * E, 1].
  std::vector<std::int64_t> flat(r.expert.size());
  for (std::size_t a = 0; a < flat.size(); ++a)
    flat[a] = static_cast<std::int64_t>(a) / config.top_k * n_experts + r.expert[a];
  Tensor picked = gather_rows(
      reshape(r.probs, {tokens * n_experts, 1}),
      Tensor::from_ids(flat, Shape({static_cast<std::int64_t>(flat.size())}), r.probs.device()));
  if (config.top_k > 1) { // GShard: g_j / sum of the chosen g
    Tensor g = reshape(picked, {tokens, config.top_k});
    picked = reshape(g / sum(g, {1}, true), {tokens * config.top_k, 1});
  }
  r.gates = picked;

  assign_capacity(r, tokens, config.top_k, n_experts,
                  expert_capacity(config.capacity_factor, tokens, config.top_k, n_experts));
  r.aux_loss = load_balancing_loss(r.probs, r.expert, config.top_k) * config.aux_loss_coeff;
  r.z_loss = router_z_loss(r.logits) * config.z_loss_coeff;
  return r;
}

} // namespace tinyscale::moe
