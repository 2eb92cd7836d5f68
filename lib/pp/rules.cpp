#include "pp/rules.hpp"

#include "core/error.hpp"
#include "train/rules.hpp"

namespace tinyscale::pp {

PipelineOptions pipeline_options(const mesh::ParallelPlan& plan) {
  PipelineOptions options;
  options.schedule = parse_schedule(plan.schedule);
  options.chunks = plan.chunks;
  options.zero = plan.zero;
  if (plan.pp_blocks == "measured")
    options.measured_partition = true;
  else if (!plan.pp_blocks.empty())
    options.blocks_per_stage = parse_blocks_per_stage(plan.pp_blocks);
  return options;
}

Partition stage_partition(const io::RunConfig& config, int stages, const PipelineOptions& o) {
  const int virtual_stages = stages * o.chunks;
  return o.blocks_per_stage.empty()
             ? balanced_partition(config.model.n_layer, virtual_stages)
             : manual_partition(config.model.n_layer, virtual_stages, o.blocks_per_stage);
}

void check_pipeline_layout(const io::RunConfig& config, int stages, const PipelineOptions& options,
                           int data_parallel) {
  const train::TrainConfig& t = config.train;
  check_schedule_shape(options.schedule, stages, static_cast<int>(t.micro_batches), options.chunks);
  (void)stage_partition(config, stages, options);
  train::check_batch_split(config, data_parallel, "pipeline", "pipeline");
  TS_CHECK(stages == 1 || options.zero <= 1, "pipeline: expected ZeRO stage 0 or 1 with ",
           "pipeline stages, found ", options.zero, "; stages 2 and 3 shard the gradients and ",
           "parameters that every micro-batch's backward needs whole (DeepSpeed refuses them ",
           "with pipelines too): use --zero 1");
}

} // namespace tinyscale::pp
