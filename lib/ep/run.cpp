#include "ep/run.hpp"

#include "comm/tensor_comm.hpp"
#include "train/run.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>

namespace tinyscale::ep {

namespace {

// The worst MoE layer's imbalance: max / mean of the tokens its experts kept, over the batch.
double worst_imbalance(const std::vector<nn::MoeLayerStats>& moe) {
  double worst = 0;
  for (const auto& s : moe) worst = std::max(worst, imbalance(s.tokens_per_expert));
  return worst;
}

// The terminal summary of a step's expert-parallel load, one row per rank.
void print_load(const std::vector<std::vector<EpLayerLoad>>& ranks) {
  std::printf("expert-parallel load of the last step, per rank (all MoE layers; dropped: of this "
              "rank's own tokens' assignments):\n"
              "| rank | experts | dropped | rows processed | rows sent (to self) | bytes sent | "
              "dispatch ms | experts ms | combine ms | backward a2a ms |\n"
              "|---|---|---|---|---|---|---|---|---|---|\n");
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    std::int64_t rows = 0, sent = 0, self = 0, bytes = 0, dropped = 0, assignments = 0;
    double dispatch = 0, compute = 0, combine = 0, backward = 0;
    std::string experts;
    for (const auto& l : ranks[r]) {
      for (auto n : l.expert_rows) rows += n;
      for (std::size_t j = 0; j < l.rows_sent.size(); ++j)
        (j == static_cast<std::size_t>(l.ep_rank) ? self : sent) += l.rows_sent[j];
      bytes += l.bytes_sent;
      dropped += l.dropped, assignments += l.assignments;
      dispatch += l.dispatch_seconds, compute += l.compute_seconds;
      combine += l.combine_seconds, backward += l.backward_seconds;
      if (experts.empty())
        for (int e : l.experts) {
          if (!experts.empty()) experts += ",";
          experts += std::to_string(e);
        }
    }
    std::printf("| %zu | %s | %.1f%% | %lld | %lld (%lld) | %lld | %.2f | %.2f | %.2f | %.2f |\n",
                r, experts.c_str(),
                assignments > 0
                    ? 100.0 * static_cast<double>(dropped) / static_cast<double>(assignments)
                    : 0.0,
                static_cast<long long>(rows), static_cast<long long>(sent + self),
                static_cast<long long>(self), static_cast<long long>(bytes), dispatch * 1e3,
                compute * 1e3, combine * 1e3, backward * 1e3);
  }
}

} // namespace

std::string describe_run(const mesh::ParallelPlan& plan, const char* backend,
                         std::int64_t micro_batches, std::int64_t micro_batch_rows,
                         const ExpertPlacement& placement) {
  return train::formatted(
      "expert parallel: ep %d inside dp %d (expert-data-parallel size %d, %s) | %lld "
      "micro-batches of %lld rows per rank\nexperts: %s | capacity: %s (%s)",
      plan.ep, plan.dp, plan.dp / plan.ep, backend, static_cast<long long>(micro_batches),
      static_cast<long long>(micro_batch_rows), placement.describe().c_str(),
      plan.ep_capacity.c_str(),
      plan.ep_capacity == "local" ? "each rank's micro-batch"
                                  : "the ep group's micro-batches together");
}

void LoadReport::gather(comm::Communicator& group, const std::vector<EpLayerLoad>& mine) {
  ranks_ = all_gather_load(group, mine);
}

void LoadReport::annotate(int ep, const train::StepResult& r, nlohmann::json& line,
                          std::string& text) const {
  std::int64_t bytes = 0;
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& rank : ranks_) { // bytes: the busiest rank's, over all its MoE layers
    nlohmann::json layers = nlohmann::json::array();
    std::int64_t sent = 0;
    for (const auto& l : rank) {
      sent += l.bytes_sent;
      layers.push_back(nlohmann::json::parse(to_json(l)));
    }
    bytes = std::max(bytes, sent);
    ranks.push_back(layers);
  }
  const double worst = worst_imbalance(r.moe);
  line["ep"] = {{"ep", ep}, {"imbalance", worst}, {"ranks", ranks}};
  text += train::formatted(" | imbalance %.2f | a2a %.1f KiB/rank", worst,
                           static_cast<double>(bytes) / 1024.0);
}

void LoadReport::print() const {
  if (!ranks_.empty()) print_load(ranks_);
}

std::vector<std::vector<EpLayerLoad>> all_gather_load(comm::Communicator& group,
                                                      const std::vector<EpLayerLoad>& mine) {
  // Flatten to doubles (counts are exact up to 2^53): per layer the vectors, then the scalars.
  std::vector<double> flat;
  for (const auto& l : mine) {
    for (auto v : l.expert_rows) flat.push_back(static_cast<double>(v));
    for (auto v : l.tokens_per_expert) flat.push_back(static_cast<double>(v));
    for (auto v : l.rows_sent) flat.push_back(static_cast<double>(v));
    for (auto v : l.rows_received) flat.push_back(static_cast<double>(v));
    for (int e : l.experts) flat.push_back(e);
    flat.insert(flat.end(),
                {static_cast<double>(l.layer), static_cast<double>(l.ep_rank),
                 static_cast<double>(l.assignments), static_cast<double>(l.dropped),
                 static_cast<double>(l.bytes_sent), static_cast<double>(l.bytes_received),
                 l.dispatch_seconds, l.compute_seconds, l.combine_seconds, l.backward_seconds});
  }
  const auto n = static_cast<std::int64_t>(flat.size());
  const Tensor all = comm::all_gather(group, Tensor::from_vector(flat, Shape({n}), DType::Float64));
  const std::vector<double> v = all.to_vector();
  std::vector<std::vector<EpLayerLoad>> out(static_cast<std::size_t>(group.size()), mine);
  std::size_t i = 0;
  for (auto& rank : out)
    for (auto& l : rank) {
      for (auto& x : l.expert_rows) x = static_cast<std::int64_t>(v[i++]);
      for (auto& x : l.tokens_per_expert) x = static_cast<std::int64_t>(v[i++]);
      for (auto& x : l.rows_sent) x = static_cast<std::int64_t>(v[i++]);
      for (auto& x : l.rows_received) x = static_cast<std::int64_t>(v[i++]);
      for (auto& e : l.experts) e = static_cast<int>(v[i++]);
      l.layer = static_cast<int>(v[i++]);
      l.ep_rank = static_cast<int>(v[i++]);
      l.assignments = static_cast<std::int64_t>(v[i++]);
      l.dropped = static_cast<std::int64_t>(v[i++]);
      l.bytes_sent = static_cast<std::int64_t>(v[i++]);
      l.bytes_received = static_cast<std::int64_t>(v[i++]);
      l.dispatch_seconds = v[i++], l.compute_seconds = v[i++], l.combine_seconds = v[i++];
      l.backward_seconds = v[i++];
    }
  return out;
}

} // namespace tinyscale::ep
