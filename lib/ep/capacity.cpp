#include "ep/capacity.hpp"

#include "comm/tensor_comm.hpp"
#include "core/error.hpp"
#include "ops/ops.hpp"

namespace tinyscale::ep {

const char* capacity_scope_name(CapacityScope scope) {
  return scope == CapacityScope::Local ? "local" : "global";
}

CapacityScope parse_capacity_scope(const std::string& name) {
  if (name == "local") return CapacityScope::Local;
  TS_CHECK(name == "global", "expert capacity: expected \"local\" (each rank's micro-batch) or ",
           "\"global\" (the ep group's micro-batches together), found \"", name, "\"");
  return CapacityScope::Global;
}

std::vector<std::int64_t> choice_counts(const std::vector<std::int64_t>& expert, int k,
                                        int n_experts) {
  std::vector<std::int64_t> counts(static_cast<std::size_t>(k * n_experts), 0);
  for (std::size_t a = 0; a < expert.size(); ++a)
    ++counts[static_cast<std::size_t>(static_cast<std::int64_t>(a) % k * n_experts + expert[a])];
  return counts;
}

void assign_global_capacity(moe::Routing& routing, int k, int n_experts, std::int64_t capacity,
                            const std::vector<std::int64_t>& all_counts, int rank) {
  const int E = n_experts;
  const auto per_rank = static_cast<std::size_t>(k * E);
  TS_CHECK(!all_counts.empty() && all_counts.size() % per_rank == 0 && rank >= 0 &&
               static_cast<std::size_t>(rank) < all_counts.size() / per_rank,
           "assign_global_capacity: expected ep x k x E counts (k x E = ", per_rank,
           ") and a rank among them, found ", all_counts.size(), " counts and rank ", rank);
  const int ep = static_cast<int>(all_counts.size() / per_rank);
  auto count = [&](int s, int j, int e) {
    return all_counts[static_cast<std::size_t>((s * k + j) * E + e)];
  };
  const auto tokens = static_cast<std::int64_t>(routing.expert.size()) / k;
  routing.capacity = capacity;
  routing.kept.assign(static_cast<std::size_t>(E), {});
  routing.dropped = 0;
  // The pooled micro-batch is rank 0's tokens, then rank 1's, ...; one rank serves all first
  // choices in token order, then all second choices (moe::assign_capacity). An assignment is kept
  // when fewer than `capacity` assignments to its expert come before it in that order. For each
  // choice j: count those ahead of this rank's j-th choices (every rank's choices j' < j, and
  // the earlier ranks' j-th choices), then walk this rank's tokens in order.
  // EXERCISE 8.4 begin: capacity from the ep group's counts
  for (int j = 0; j < k; ++j) {
    std::vector<std::int64_t> ahead(static_cast<std::size_t>(E), 0);
    for (int e = 0; e < E; ++e) {
      for (int s = 0; s < ep; ++s)
        for (int q = 0; q < j; ++q) ahead[static_cast<std::size_t>(e)] += count(s, q, e);
      for (int s = 0; s < rank; ++s) ahead[static_cast<std::size_t>(e)] += count(s, j, e);
    }
    for (std::int64_t t = 0; t < tokens; ++t) {
      const std::int64_t a = t * k + j;
      const auto e = static_cast<std::size_t>(routing.expert[static_cast<std::size_t>(a)]);
      if (ahead[e]++ < capacity)
        routing.kept[e].push_back(a);
      else
        ++routing.dropped;
    }
  }
  // EXERCISE 8.4 end
}

std::vector<double> pooled_fractions(const std::vector<std::int64_t>& all_counts, int k,
                                     int n_experts) {
  const auto E = static_cast<std::size_t>(n_experts);
  std::vector<double> f(E, 0.0);
  double total = 0;
  for (std::size_t i = 0; i < all_counts.size(); ++i) {
    f[i % E] += static_cast<double>(all_counts[i]);
    total += static_cast<double>(all_counts[i]);
  }
  TS_CHECK(total > 0 && all_counts.size() % (static_cast<std::size_t>(k) * E) == 0,
           "pooled_fractions: expected ep x k x E counts with E = ", E, ", found ",
           all_counts.size(), " counts summing to ", total);
  for (double& x : f) x /= total; // f_i over all ranks' assignments (Megatron-Core's N k)
  return f;
}

Tensor pooled_load_balancing_loss(const Tensor& probs, const std::vector<std::int64_t>& all_counts,
                                  int k) {
  const std::int64_t E = probs.size(1);
  const std::vector<double> f = pooled_fractions(all_counts, k, static_cast<int>(E));
  const Tensor fraction = Tensor::from_vector(f, Shape({E}), probs.dtype(), probs.device());
  return sum(mean(probs, {0}) * fraction) * static_cast<double>(E);
}

moe::CapacityRule global_capacity(comm::Communicator& ep, const nn::MoeConfig& config,
                                  Device device) {
  return [&ep, config, device](moe::Routing& whole) {
    const int k = config.top_k, E = config.n_experts;
    const std::vector<std::int64_t> mine = choice_counts(whole.expert, k, E);
    const Tensor gathered = comm::all_gather(
        ep, Tensor::from_ids(mine, Shape({static_cast<std::int64_t>(mine.size())}), device));
    const std::vector<double> values = gathered.to_vector();
    const std::vector<std::int64_t> all(values.begin(), values.end());
    // Every rank routes a micro-batch of the same size (ExpertParallelAxis::first_row's rows), so
    // the pool holds ep x N tokens; check it, since a different N would make the ranks disagree.
    const auto tokens = static_cast<std::int64_t>(whole.expert.size()) / k;
    for (int s = 0; s < ep.size(); ++s) {
      std::int64_t n = 0;
      for (int i = 0; i < k * E; ++i) n += all[static_cast<std::size_t>(s * k * E + i)];
      TS_CHECK(n == tokens * k, "global expert capacity: expected every ep rank to route ", tokens,
               " tokens (", tokens * k, " assignments), found ", n, " assignments on ep rank ", s,
               "; the ranks of an ep group must run micro-batches of the same size");
    }
    assign_global_capacity(whole, k, E,
                           moe::expert_capacity(config.capacity_factor, tokens * ep.size(), k, E),
                           all, ep.rank());
    return pooled_fractions(all, k, E);
  };
}

} // namespace tinyscale::ep
