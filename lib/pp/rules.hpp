// Pipeline parallelism's options and layout rules (chapter 06): the schedule fits p, m and v, the
// cut leaves no stage empty, the batch splits into the pipelines' micro-batches, ZeRO 2 and 3
// stay out.
// Called by the trainer before it builds a stage, and by plan/rules.cpp for `tinyscale train`
// and the planner.
#pragma once

#include "comm/communicator.hpp"
#include "io/config.hpp"
#include "mesh/plan.hpp"
#include "pp/partition.hpp"
#include "pp/schedule.hpp"

#include <vector>

namespace tinyscale::pp {

/// How a run is pipelined.
struct PipelineOptions {
  ScheduleKind schedule = ScheduleKind::OneFOneB;
  int chunks = 1;                    ///< v: model chunks per rank (interleaved only)
  std::vector<int> blocks_per_stage; ///< a manual cut, one count per virtual stage; empty: even
  /// Without a manual cut: balance the stages by measured costs (timed on rank 0,
  /// broadcast) instead of counting blocks.
  bool measured_partition = false;
  /// For tests only: false skips summing the tied embedding's gradient between the first and
  /// the last stage (the negative control of the equivalence tests).
  bool tie_embedding_gradients = true;
  /// 1: the AdamW state of each stage sharded over its data-parallel group (ZeRO stage 1,
  /// reducing after backward, built by the stage model: StageModel::sharded_optimizer; chapter
  /// 10); 0: every rank holds its stages' whole state (check_pipeline_layout allows no other
  /// value with more than one stage).
  int zero = 0;
  /// The ranks that run other rows of the batch, whose losses add up; null: the data-parallel
  /// group. A composed run with context parallelism (chapter 14) passes its "dp x ep" here: its
  /// cp ranks run the same rows (their positions), so they share the rows and the loss but
  /// still sum their gradients over the data-parallel group "dp x cp x ep".
  comm::Communicator* row_replicas = nullptr;
};

/// The plan's pipeline options: schedule, chunks, the cut (`measured` or by hand) and ZeRO.
PipelineOptions pipeline_options(const mesh::ParallelPlan& plan);

/// Throws, before any work, unless `config` can run as a pipeline of `stages` ranks inside
/// `data_parallel` pipelines: the schedule fits p, m and v (pp/schedule.hpp), p v <= n_layer
/// and the partition leaves no stage empty, the batch divides by data_parallel x micro-batches,
/// and ZeRO is stage 0 or 1 when there is more than one stage.
void check_pipeline_layout(const io::RunConfig& config, int stages, const PipelineOptions& options,
                           int data_parallel = 1);

/// The cut of the model into stages x chunks virtual stages: `options`' manual cut, else an even
/// one (the measured cut is made by the trainer, from timings).
Partition stage_partition(const io::RunConfig& config, int stages, const PipelineOptions& options);

} // namespace tinyscale::pp
