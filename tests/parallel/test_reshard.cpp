// Chapter 12's resume and resharding proofs on the threads backend. Every trainer writes its
// checkpoint in the single-rank layout, so (1) a run stopped at step 2 and resumed in the same
// layout reproduces the uninterrupted run bit for bit: its losses, and at step 4 every parameter,
// AdamW moment and step count in the checkpoint; and (2) a checkpoint written by any of seven
// layouts (one rank, dp, tp, ep, ZeRO-3, pp, and dp x ep x tp x pp with ZeRO-1) resumes in any
// other and continues with losses within 1e-6 of the run that stayed in that layout.
// The model: 4 blocks, two of them MoE with capacity factor 4 (nothing is dropped) and no
// load-balancing loss, because both depend on how a batch is cut into micro-batches, which the
// layouts change; the z-loss and dropout do not. A llama of the same size moves between the six
// layouts without expert parallelism the same way.
#include "dp/trainer.hpp"
#include "dp_equivalence.hpp"
#include "fourd/trainer.hpp"
#include "io/checkpoint.hpp"
#include "llama_equivalence.hpp"
#include "mesh/mesh.hpp"
#include "pp/trainer.hpp"
#include "scratch_dir.hpp"
#include "zero/trainer.hpp"

#include "comm/launch.hpp"
#include "rank_checks.hpp"

#include <catch2/catch.hpp>

#include <functional>
#include <map>

using namespace tinyscale;
using namespace tinyscale::test;

namespace {

constexpr int kSteps = 4, kSaveAt = 2;

io::RunConfig reshard_config() {
  io::RunConfig c = dp_run_config(2, 1, 2, true);
  c.model.n_layer = 4;
  c.model.n_head = 4;
  c.model.moe = {2, 4, 2, 4.0, 0.0, 1e-3}; // every 2nd block, top-2 of 4, no drops, no aux loss
  c.optim.lr = 1e-4;
  c.optim.min_lr = 1e-5;
  c.train.steps = kSteps;
  return c;
}

// One layout: its world size, and on each rank a function that builds its trainer (resuming
// from `from` when given), runs until `until` saving at kSaveAt and at the end, and returns the
// losses of the steps it ran.
struct Layout {
  std::string name;
  int ranks;
  std::function<std::vector<double>(comm::Communicator&, const io::RunConfig&,
                                    const std::string& from)>
      run;
};

// The loop every layout shares: `step` runs one step and returns it, `done` says how many steps
// are done, `save` writes a checkpoint (collective); saves at kSaveAt and at the end.
std::vector<double> drive(const io::RunConfig& config,
                          const std::function<train::StepResult()>& step,
                          const std::function<std::int64_t()>& done,
                          const std::function<void()>& save) {
  std::vector<double> losses;
  while (done() < config.train.steps) {
    losses.push_back(step().loss);
    if (done() == kSaveAt || done() == config.train.steps) save();
  }
  return losses;
}

using Run = std::function<std::vector<double>(comm::Communicator&, const io::RunConfig&,
                                              const std::string&)>;

// A trainer with train_step, step, save_checkpoint and resume (every parallel one).
template <typename T>
std::vector<double> drive(T& t, const io::RunConfig& c, const std::string& from) {
  if (!from.empty()) t.resume(from);
  return drive(
      c, [&] { return t.train_step(); }, [&] { return t.step(); }, [&] { t.save_checkpoint(); });
}

// Any layout that splits the model, as `train` runs it (fourd::MeshTrainer), on `world`.
std::vector<double> mesh_run(comm::Communicator& world, const io::RunConfig& c,
                             const std::string& from, const mesh::ParallelPlan& plan) {
  fourd::MeshTrainer t(plan, c, world);
  return drive(t, c, from);
}

std::vector<Layout> layouts() {
  std::vector<Layout> out;
  out.push_back(
      {"one rank", 1, [](comm::Communicator&, const io::RunConfig& c, const std::string& from) {
         train::Trainer t(c);
         if (!from.empty()) t.resume(from);
         return drive(
             c, [&] { return t.train_step(); }, [&] { return t.step(); },
             [&] { t.save_checkpoint(); });
       }});
  out.push_back(
      {"dp 2", 2, [](comm::Communicator& world, const io::RunConfig& c, const std::string& from) {
         dp::DpTrainer t(c, world);
         if (!from.empty()) t.trainer().resume(from);
         return drive(
             c, [&] { return t.train_step(); }, [&] { return t.trainer().step(); },
             [&] {
               if (world.rank() == 0) t.trainer().save_checkpoint();
               world.barrier();
             });
       }});
  out.push_back(
      {"tp 2", 2, [](comm::Communicator& world, const io::RunConfig& c, const std::string& from) {
         mesh::ParallelPlan plan;
         plan.tp = 2;
         return mesh_run(world, c, from, plan);
       }});
  out.push_back({"dp 2 with ep 2", 2,
                 [](comm::Communicator& world, const io::RunConfig& c, const std::string& from) {
                   mesh::ParallelPlan plan;
                   plan.dp = 2;
                   plan.ep = 2;
                   return mesh_run(world, c, from, plan);
                 }});
  out.push_back({"ZeRO-3 on dp 2", 2,
                 [](comm::Communicator& world, const io::RunConfig& c, const std::string& from) {
                   zero::ZeroOptions o;
                   o.stage = 3;
                   zero::ZeroTrainer t(c, world, o);
                   return drive(t, c, from);
                 }});
  out.push_back(
      {"pp 2", 2, [](comm::Communicator& world, const io::RunConfig& c, const std::string& from) {
         pp::PipelineTrainer t(c, world, pp::PipelineOptions{}); // 1F1B
         return drive(t, c, from);
       }});
  out.push_back({"dp 2 with ep 2 x tp 2 x pp 2, ZeRO-1", 8,
                 [](comm::Communicator& world, const io::RunConfig& c, const std::string& from) {
                   mesh::ParallelPlan plan;
                   plan.dp = 2;
                   plan.ep = 2;
                   plan.tp = 2;
                   plan.pp = 2;
                   plan.zero = 1;
                   return mesh_run(world, c, from, plan);
                 }});
  return out;
}

// Rank 0's losses of `layout` run on threads, from `from` (or from scratch), checkpoints under
// `dir`.
std::vector<double> run(const Layout& layout, io::RunConfig config, const std::string& dir,
                        const std::string& from = "") {
  config.train.checkpoint_dir = dir;
  std::vector<double> losses;
  comm::run_threads(
      layout.ranks,
      [&](comm::Communicator& world) {
        std::vector<double> mine = layout.run(world, config, from);
        if (world.rank() == 0) losses = mine;
      },
      comm::testing::test_options(std::chrono::seconds(60)));
  return losses;
}

// "" when the checkpoints at `a` and `b` hold the same tensors bit for bit, else the first that
// differs.
std::string bitwise_difference(const std::string& a, const std::string& b) {
  const io::Checkpoint x = io::read_checkpoint(a), y = io::read_checkpoint(b);
  if (x.step != y.step) return "the steps differ";
  for (const auto* pair : {&x.model, &x.optimizer}) {
    const io::NamedTensors& other = pair == &x.model ? y.model : y.optimizer;
    std::map<std::string, Tensor> theirs(other.begin(), other.end());
    for (const auto& [name, t] : *pair)
      if (theirs.count(name) == 0 || t.to_vector() != theirs.at(name).to_vector()) return name;
  }
  return "";
}

// Each layout of `all` saves at step 2; each of the others resumes it and trains to the end, and
// its losses are within 1e-6 of the run that stayed in that (the target) layout.
void check_reshard_matrix(const io::RunConfig& config, const std::vector<Layout>& all) {
  testing::ScratchDir scratch;
  std::vector<std::vector<double>> stayed;
  for (std::size_t i = 0; i < all.size(); ++i)
    stayed.push_back(run(all[i], config, scratch / std::to_string(i)));
  for (std::size_t from = 0; from < all.size(); ++from)
    for (std::size_t to = 0; to < all.size(); ++to) {
      if (from == to) continue;
      const std::vector<double> moved =
          run(all[to], config, scratch / ("moved-" + std::to_string(from * 10 + to)),
              scratch / (std::to_string(from) + "/step_00000002"));
      INFO(all[from].name << " -> " << all[to].name);
      REQUIRE(moved.size() == static_cast<std::size_t>(kSteps - kSaveAt));
      for (int s = kSaveAt; s < kSteps; ++s)
        CHECK(moved[s - kSaveAt] == Approx(stayed[to][s]).epsilon(1e-6));
    }
}

} // namespace

TEST_CASE("A run stopped at step 2 and resumed in the same layout reproduces the uninterrupted "
          "run bit for bit, for every layout",
          "[resume]") {
  const io::RunConfig config = reshard_config();
  for (const Layout& layout : layouts()) {
    testing::ScratchDir scratch;
    const std::vector<double> whole = run(layout, config, scratch / "whole");
    const std::vector<double> resumed =
        run(layout, config, scratch / "resumed", scratch / "whole/step_00000002");
    INFO(layout.name);
    REQUIRE(whole.size() == static_cast<std::size_t>(kSteps));
    REQUIRE(resumed.size() == static_cast<std::size_t>(kSteps - kSaveAt));
    for (int s = kSaveAt; s < kSteps; ++s) CHECK(resumed[s - kSaveAt] == whole[s]);
    CHECK(bitwise_difference(scratch / "whole/step_00000004", scratch / "resumed/step_00000004") ==
          "");
  }
}

TEST_CASE("A checkpoint of any of seven layouts resumes in any other and continues within 1e-6 "
          "of the run that stayed in that layout",
          "[resume]") {
  const io::RunConfig config = reshard_config();
  const std::vector<Layout> all = layouts();
  check_reshard_matrix(config, all);
}

TEST_CASE("Each parameter is taken from the pipeline rank that trains it: wte and wpe from the "
          "first stage, a block from its stage, ln_f from the last, also interleaved",
          "[resume][ex12.2]") {
  io::RunConfig config = reshard_config();
  config.train.micro_batches = 2; // interleaved: a multiple of p
  pp::PipelineOptions o;
  o.schedule = pp::ScheduleKind::Interleaved;
  o.chunks = 2;
  o.blocks_per_stage = {1, 1, 1, 1}; // virtual stages 0..3 on ranks 0, 1, 0, 1
  std::vector<std::map<std::string, int>> seen(2);
  comm::run_threads(
      2,
      [&](comm::Communicator& world) {
        pp::PipelineTrainer t(config, world, o);
        for (const char* name :
             {"wte.weight", "wpe.weight", "h.0.ln_1.weight", "h.1.attn.c_attn.weight",
              "h.2.mlp.router.weight", "h.3.ln_2.bias", "ln_f.weight"})
          seen[static_cast<std::size_t>(world.rank())][name] = t.trainer_rank(name);
      },
      comm::testing::test_options());
  const std::map<std::string, int> want = {{"wte.weight", 0},
                                           {"wpe.weight", 0},
                                           {"h.0.ln_1.weight", 0},
                                           {"h.1.attn.c_attn.weight", 1},
                                           {"h.2.mlp.router.weight", 0},
                                           {"h.3.ln_2.bias", 1},
                                           {"ln_f.weight", 1}};
  CHECK(seen[0] == want);
  CHECK(seen[1] == want);
}

TEST_CASE("A llama's checkpoint of any of six layouts resumes in any other and continues within "
          "1e-6 of the run that stayed in that layout (the untied head, grouped heads split over "
          "tp)",
          "[resume][llama]") {
  io::RunConfig config = as_llama(reshard_config());
  config.model.moe = {}; // a llama's blocks have no experts
  std::vector<Layout> all;
  for (const Layout& l : layouts())
    if (l.name.find("ep") == std::string::npos) all.push_back(l);
  all.push_back({"dp 2 x tp 2 x pp 2, ZeRO-1", 8,
                 [](comm::Communicator& world, const io::RunConfig& c, const std::string& from) {
                   mesh::ParallelPlan plan;
                   plan.dp = plan.tp = plan.pp = 2;
                   plan.zero = 1;
                   return mesh_run(world, c, from, plan);
                 }});
  REQUIRE(all.size() == 6);
  check_reshard_matrix(config, all);
}
