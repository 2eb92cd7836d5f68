// How a new parallelism plugs in (docs/architecture.md, "Adding an axis"): an axis is one class
// (train::Axis) saying what it adds to a step, and the model of every split layout
// (fourd::MeshStages) composes it with the others. The toy axis here splits each micro-batch's
// rows over a group of ranks, as data parallelism does, written as an axis: its embeddings and
// blocks see this rank's rows (dropout at their global rows), its loss is the whole rows' mean,
// and the gradients are summed over the group inside the stage. Proved like every axis: equal to
// one rank on the same batch; and the negative control (no gradient sum) is caught.
#include "dp_equivalence.hpp"

#include "autograd/grad_mode.hpp"
#include "comm/launch.hpp"
#include "comm/tensor_comm.hpp"
#include "cp/model.hpp"
#include "fourd/trainer.hpp"
#include "ops/ops.hpp"
#include "rank_checks.hpp"
#include "train/axis.hpp"

#include <catch2/catch.hpp>

using namespace tinyscale;
using namespace tinyscale::test;

namespace {

// The whole toy axis: what it changes in the forward, the gradients and the checkpoints.
class RowSplitAxis final : public train::Axis {
public:
  RowSplitAxis(comm::Communicator& group, bool sum_gradients)
      : group_(&group), sum_gradients_(sum_gradients) {}

  Tensor embed(const Embed& inner, const Tensor& ids,
               const nn::ForwardContext& ctx) const override {
    return inner(mine(ids), at_my_rows(ctx, ids.size(0)));
  }
  nn::FeedForwardOutput block(const Block& inner, const Tensor& x,
                              const nn::ForwardContext& ctx) const override {
    return inner(x, at_my_rows(ctx, x.size(0) * group_->size()));
  }
  // This rank's rows' mean times their count, summed over the group, over the whole rows.
  Tensor loss(const Loss& inner, const Tensor& x, const Tensor& targets) const override {
    const Tensor rows = mine(targets);
    return cp::whole_rows_mean(*group_, inner(x, rows) * static_cast<double>(rows.numel()),
                               targets.numel());
  }
  void reduce_within_stage(const std::vector<const nn::NamedParameter*>& owned) override {
    if (!sum_gradients_) return; // the negative control
    NoGradGuard no_grad;
    for (const nn::NamedParameter* p : owned) {
      Tensor param = p->tensor;
      Tensor grad = param.grad().defined()
                        ? param.grad()
                        : Tensor::zeros(param.shape(), param.dtype(), param.device());
      comm::all_reduce(*group_, grad);
      param.set_grad(grad);
    }
  }
  bool leads() const override { return group_->rank() == 0; }
  void barrier() override { group_->barrier(); }

private:
  std::int64_t rows_per_rank(std::int64_t rows) const { return rows / group_->size(); }
  Tensor mine(const Tensor& t) const {
    const std::int64_t n = rows_per_rank(t.size(0)), first = group_->rank() * n;
    return slice(t, 0, first, first + n);
  }
  nn::ForwardContext at_my_rows(const nn::ForwardContext& ctx, std::int64_t rows) const {
    nn::ForwardContext c = ctx;
    c.row_offset += group_->rank() * rows_per_rank(rows);
    return c;
  }

  comm::Communicator* group_;
  bool sum_gradients_;
};

// Every rank of `ranks` trains with the toy axis over all of them (each rank's mesh is itself
// alone: the toy axis is the only split); returns rank 0's record.
RunRecord toy_axis_run(int ranks, const io::RunConfig& config, bool sum_gradients) {
  std::vector<RunRecord> records(static_cast<std::size_t>(ranks));
  comm::run_threads(
      ranks,
      [&](comm::Communicator& world) {
        std::unique_ptr<comm::Communicator> alone = world.split(world.rank(), 0, "alone");
        fourd::MeshTrainer trainer(mesh::ParallelPlan{}, config, *alone, nullptr, {}, [&] {
          std::vector<std::unique_ptr<train::Axis>> more;
          more.push_back(std::make_unique<RowSplitAxis>(world, sum_gradients));
          return more;
        });
        RunRecord r;
        for (int s = 0; s < config.train.steps; ++s) {
          const train::StepResult step = trainer.train_step();
          r.losses.push_back(step.loss);
          r.grad_norms.push_back(step.grad_norm);
          if (s == 0) record_grads(r, trainer.stages().parameters());
        }
        record_params(r, trainer.stages().parameters());
        records[static_cast<std::size_t>(world.rank())] = r;
      },
      comm::testing::test_options(std::chrono::seconds(60)));
  return records[0];
}

} // namespace

TEST_CASE("A toy axis (each micro-batch's rows split over 2 ranks, written as a train::Axis and "
          "composed by fourd::MeshStages) trains like one rank, and without its gradient sum it "
          "does not",
          "[parallel][axis]") {
  const io::RunConfig config = dp_run_config(1, 2, 2, false); // 2 rows per micro-batch, dropout
  const RunRecord want = reference_run(config, 1);
  const RunRecord got = toy_axis_run(2, config, true);
  INFO("worst relative error " << worst_error(want, got));
  CHECK(compare_runs(want, got, 1e-5) == "");
  CHECK_FALSE(compare_runs(want, toy_axis_run(2, config, false), 1e-5).empty());
}
