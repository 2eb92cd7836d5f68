#include "pp/run.hpp"

#include "mesh/mesh.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>

namespace tinyscale::pp {

namespace {

// "0.273", or "-" where the formula does not apply (NaN)
std::string formula_text(double formula) {
  return std::isnan(formula) ? "-" : train::formatted("%.3f", formula);
}

class PipelineRun final : public train::TrainerRun<PipelineTrainer> {
public:
  PipelineRun(const mesh::ParallelPlan& plan, const io::RunConfig& config,
              comm::Communicator& world, std::string trace_path)
      : plan_(plan), world_(&world), mesh_(world, plan.mesh_layout()),
        trace_path_(std::move(trace_path)),
        trace_(metrics::make_trace_recorder(world, trace_path_)) {
    trainer_ = std::make_unique<PipelineTrainer>(config, mesh_.group(mesh::Axis::Pp),
                                                 pipeline_options(plan), trace_.get(),
                                                 &mesh_.group(mesh::Axis::Dp));
  }

  train::StepResult train_step() override {
    train::StepResult r = trainer_->train_step();
    bubble_ = trainer_->bubble_report();
    return r;
  }

  std::string describe() const override {
    const train::TrainConfig& t = core().config().train;
    std::string out = train::formatted(
        "pipeline: %s | pp %d (%s) x %d chunk%s | dp %d | %lld micro-batches of %lld rows per "
        "pipeline | stages %s",
        plan_.schedule.c_str(), plan_.pp, world_->backend(), plan_.chunks,
        plan_.chunks == 1 ? "" : "s", plan_.dp, static_cast<long long>(t.micro_batches),
        static_cast<long long>(t.batch_size / (plan_.dp * t.micro_batches)),
        trainer_->partition().describe().c_str());
    if (plan_.pp_blocks == "measured") {
      const LayerCosts& c = trainer_->layer_costs();
      out += train::formatted("\ncut from measured costs (forward + backward of one "
                              "micro-batch): embeddings %.2f ms, blocks",
                              1e3 * c.embed);
      for (double b : c.blocks) out += train::formatted(" %.2f", 1e3 * b);
      out += train::formatted(" ms, head and loss %.2f ms", 1e3 * c.head);
    }
    return out;
  }

  void annotate(const train::StepResult&, nlohmann::json& line, std::string& text) const override {
    double mean = 0, simulated = 0;
    for (double b : bubble_.measured) mean += b / static_cast<double>(bubble_.measured.size());
    for (double b : bubble_.simulated)
      simulated += b / static_cast<double>(bubble_.simulated.size());
    line["pp"] = {{"schedule", plan_.schedule},
                  {"stages", plan_.pp},
                  {"dp", plan_.dp},
                  {"chunks", plan_.chunks},
                  {"bubble_measured", bubble_.measured},
                  {"bubble_simulated", bubble_.simulated},
                  {"bubble_formula", bubble_.formula}};
    text += train::formatted(" | bubble %.3f (simulated %.3f, formula %s)", mean, simulated,
                             formula_text(bubble_.formula).c_str());
  }

  void finish() override {
    if (trace_) metrics::write_gathered_trace(*world_, *trace_, trace_path_);
    if (world_->rank() != 0) return;
    std::printf(
        "the last step's bubble per rank (idle over the makespan of %.1f ms), measured "
        "and simulated from the step's mean costs (F %.2f, B %.2f, W %.2f ms per "
        "stage):\n| rank | measured | simulated | formula (unit costs) |\n|---|---|---|---|\n",
        1e3 * bubble_.makespan, 1e3 * bubble_.mean_costs.forward,
        1e3 * bubble_.mean_costs.backward_input, 1e3 * bubble_.mean_costs.backward_weight);
    for (std::size_t r = 0; r < bubble_.measured.size(); ++r)
      std::printf("| %zu | %.3f | %.3f | %s |\n", r, bubble_.measured[r], bubble_.simulated[r],
                  formula_text(bubble_.formula).c_str());
  }

private:
  mesh::ParallelPlan plan_;
  comm::Communicator* world_;
  mesh::Mesh mesh_; // pp x dp, dp innermost
  std::string trace_path_;
  std::unique_ptr<metrics::TraceRecorder> trace_;
  BubbleReport bubble_;
};

} // namespace

std::unique_ptr<train::RankRun> make_pipeline_run(const mesh::ParallelPlan& plan,
                                                  const io::RunConfig& config,
                                                  comm::Communicator& world,
                                                  const std::string& trace_path) {
  return std::make_unique<PipelineRun>(plan, config, world, trace_path);
}

} // namespace tinyscale::pp
