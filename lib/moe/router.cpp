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

std::vector<double> choice_fractions(const std::vector<std::int64_t>& expert, int n_experts) {
  std::vector<double> f(static_cast<std::size_t>(n_experts), 0.0);
  for (std::int64_t e : expert) f[static_cast<std::size_t>(e)] += 1.0;
  for (double& x : f) x /= static_cast<double>(expert.size());
  return f;
}

namespace {

// The whole rows' decision as this call's: the kept assignments of its own tokens (`index`: each
// one's place among the whole rows' tokens), in the order the experts took them.
void keep_own(Routing& r, const Routing& whole, const std::vector<std::int64_t>& index, int k) {
  std::vector<std::int64_t> own(whole.expert.size() / static_cast<std::size_t>(k), -1);
  for (std::size_t n = 0; n < index.size(); ++n)
    own[static_cast<std::size_t>(index[n])] = static_cast<std::int64_t>(n);
  r.capacity = whole.capacity;
  r.kept.assign(whole.kept.size(), {});
  std::int64_t kept = 0;
  for (std::size_t e = 0; e < whole.kept.size(); ++e)
    for (std::int64_t a : whole.kept[e]) {
      const std::int64_t n = own[static_cast<std::size_t>(a / k)];
      if (n < 0) continue; // another rank's token
      r.kept[e].push_back(n * k + a % k);
      ++kept;
    }
  r.dropped = static_cast<std::int64_t>(r.expert.size()) - kept;
}

void count_rows(Routing& r, const Routing& whole) {
  r.rows_kept_per_expert.clear();
  for (const auto& kept : whole.kept)
    r.rows_kept_per_expert.push_back(static_cast<std::int64_t>(kept.size()));
  r.rows_assignments = static_cast<std::int64_t>(whole.expert.size());
  r.rows_dropped = whole.dropped;
}

} // namespace

Routing route(const Tensor& x, const Tensor& router_weight, const nn::MoeConfig& config,
              const RoutingScope& scope) {
  TS_CHECK(x.rank() == 2 && router_weight.rank() == 2 && x.size(1) == router_weight.size(0),
           "route: expected x [N, C] and router weight [C, E], found ", x.shape().str(), " and ",
           router_weight.shape().str());
  const std::int64_t tokens = x.size(0);
  const int n_experts = static_cast<int>(router_weight.size(1)), k = config.top_k;
  Routing r;
  r.logits = matmul(x, router_weight);
  r.probs = softmax(r.logits);
  r.expert = top_k_experts(r.probs, k);

  // Gate of assignment a = probs[n, expert[a]], picked as rows of probs viewed as [N * E, 1].
  std::vector<std::int64_t> flat(r.expert.size());
  for (std::size_t a = 0; a < flat.size(); ++a)
    flat[a] = static_cast<std::int64_t>(a) / k * n_experts + r.expert[a];
  Tensor picked = gather_rows(
      reshape(r.probs, {tokens * n_experts, 1}),
      Tensor::from_ids(flat, Shape({static_cast<std::int64_t>(flat.size())}), r.probs.device()));
  if (k > 1) { // GShard: g_j / sum of the chosen g
    Tensor g = reshape(picked, {tokens, k});
    picked = reshape(g / sum(g, {1}, true), {tokens * k, 1});
  }
  r.gates = picked;

  if (scope.sequence == nullptr && !scope.capacity) { // chapter 03: this call's tokens alone
    assign_capacity(r, tokens, k, n_experts,
                    expert_capacity(config.capacity_factor, tokens, k, n_experts));
    r.aux_loss = load_balancing_loss(r.probs, r.expert, k) * config.aux_loss_coeff;
    r.z_loss = router_z_loss(r.logits) * config.z_loss_coeff;
    count_rows(r, r);
    return r;
  }
  // The whole rows' choices (gathered over the sequence group), decided as one rank decides them.
  Routing whole;
  whole.expert =
      scope.sequence != nullptr ? scope.sequence->gather_tokens(r.expert, scope.rows, k) : r.expert;
  const auto rows_tokens = static_cast<std::int64_t>(whole.expert.size()) / k;
  std::vector<double> fraction;
  if (scope.capacity) {
    fraction = scope.capacity(whole);
  } else {
    assign_capacity(whole, rows_tokens, k, n_experts,
                    expert_capacity(config.capacity_factor, rows_tokens, k, n_experts));
    fraction = choice_fractions(whole.expert, n_experts);
  }
  std::vector<std::int64_t> index(static_cast<std::size_t>(tokens));
  for (std::int64_t n = 0; n < tokens; ++n) index[static_cast<std::size_t>(n)] = n;
  if (scope.sequence != nullptr) index = scope.sequence->token_index(scope.rows);
  TS_CHECK(static_cast<std::int64_t>(index.size()) == tokens, "route: expected the scope to place ",
           tokens, " tokens, found ", index.size());
  keep_own(r, whole, index, k);
  count_rows(r, whole);

  // Means over the whole rows: this call's sums, added over the sequence group, over its tokens.
  const auto rows_mean = [&](const Tensor& per_token, const std::vector<int>& dims) {
    if (scope.sequence == nullptr) return mean(per_token, dims);
    return scope.sequence->sum(sum(per_token, dims)) / static_cast<double>(rows_tokens);
  };
  const Tensor f =
      Tensor::from_vector(fraction, Shape({n_experts}), r.probs.dtype(), r.probs.device());
  r.aux_loss = sum(rows_mean(r.probs, {0}) * f) * static_cast<double>(n_experts) *
               config.aux_loss_coeff; // E sum_i f_i P_i, as load_balancing_loss
  r.z_loss = scope.sequence == nullptr
                 ? router_z_loss(r.logits) * config.z_loss_coeff
                 : rows_mean(pow_scalar(logsumexp(r.logits), 2.0), {0}) * config.z_loss_coeff;
  return r;
}

nn::MoeLayerStats layer_stats(const Routing& routing, int layer) {
  nn::MoeLayerStats stats;
  stats.layer = layer;
  stats.tokens_per_expert = routing.rows_kept_per_expert;
  stats.assignments = routing.rows_assignments;
  stats.dropped = routing.rows_dropped;
  stats.aux_loss = routing.aux_loss.item();
  stats.z_loss = routing.z_loss.item();
  return stats;
}

} // namespace tinyscale::moe
