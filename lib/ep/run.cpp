#include "ep/run.hpp"

#include "ep/trainer.hpp"
#include "mesh/mesh.hpp"

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

class ExpertParallelRun final : public train::TrainerRun<EpTrainer> {
public:
  // The mesh's dp axis is the expert-data-parallel size dp / ep.
  ExpertParallelRun(const mesh::ParallelPlan& plan, const io::RunConfig& config,
                    comm::Communicator& world)
      : plan_(plan), world_(&world), mesh_(world, plan.mesh_layout()),
        dense_(&mesh_.group("dp x cp x ep")) {
    trainer_ = std::make_unique<EpTrainer>(config, *dense_, mesh_.group(mesh::Axis::Ep),
                                           mesh_.group("dp x cp"),
                                           EpOptions{parse_placement(plan.ep_placement),
                                                     parse_capacity_scope(plan.ep_capacity), true});
  }

  train::StepResult train_step() override {
    train::StepResult r = trainer_->train_step();
    loads_ = all_gather_load(*dense_, trainer_->load());
    return r;
  }

  std::string describe() const override {
    return train::formatted(
        "expert parallel: ep %d inside dp %d (expert-data-parallel size %d, %s) | %lld "
        "micro-batches of %lld rows per rank\nexperts: %s | capacity: %s (%s)",
        plan_.ep, plan_.dp, plan_.dp / plan_.ep, world_->backend(),
        static_cast<long long>(core().config().train.micro_batches),
        static_cast<long long>(trainer_->micro_batch_rows()),
        trainer_->placement().describe().c_str(), plan_.ep_capacity.c_str(),
        plan_.ep_capacity == "local" ? "each rank's micro-batch"
                                     : "the ep group's micro-batches together");
  }

  void annotate(const train::StepResult& r, nlohmann::json& line,
                std::string& text) const override {
    std::int64_t bytes = 0;
    nlohmann::json ranks = nlohmann::json::array();
    for (const auto& rank : loads_) { // bytes: the busiest rank's, over all its MoE layers
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
    line["ep"] = {{"ep", plan_.ep}, {"imbalance", worst}, {"ranks", ranks}};
    text += train::formatted(" | imbalance %.2f | a2a %.1f KiB/rank", worst,
                             static_cast<double>(bytes) / 1024.0);
  }

  void finish() override {
    if (world_->rank() == 0 && !loads_.empty()) print_load(loads_);
  }

private:
  mesh::ParallelPlan plan_;
  comm::Communicator* world_;
  mesh::Mesh mesh_;
  comm::Communicator* dense_;
  std::vector<std::vector<EpLayerLoad>> loads_; // every rank's, gathered after each step
};

} // namespace

std::unique_ptr<train::RankRun> make_expert_parallel_run(const mesh::ParallelPlan& plan,
                                                         const io::RunConfig& config,
                                                         comm::Communicator& world) {
  return std::make_unique<ExpertParallelRun>(plan, config, world);
}

} // namespace tinyscale::ep
