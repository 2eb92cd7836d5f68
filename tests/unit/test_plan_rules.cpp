// Chapter 09: the planner and `tinyscale train` agree on what is legal. Every layout the search
// proposes for a model that trains here passes train's own check (fourd::check_plan), apart from
// what this version cannot run yet; and layouts train refuses (a vocabulary tp does not divide,
// ZeRO 2 or 3 under a pipeline) are not proposed.
#include "fourd/run.hpp"
#include "io/config.hpp"
#include "plan/rules.hpp"
#include "plan/search.hpp"
#include "require_ts_error.hpp"

#include <string>

using namespace tinyscale;
using Catch::Contains;

namespace {
io::RunConfig config_file(const std::string& name) {
  return io::load_config(std::string(TINYSCALE_SOURCE_DIR) + "/configs/" + name);
}

// `config` trained with `layout`'s global batch and micro-batches.
io::RunConfig with_batch(io::RunConfig config, const plan::PlanLayout& layout) {
  config.train.batch_size = layout.global_batch();
  config.train.micro_batches = layout.micro_batches;
  return config;
}
} // namespace

TEST_CASE("every layout the planner proposes is one tinyscale train accepts", "[unit][plan]") {
  for (const char* name : {"tiny.toml", "moe-tiny.toml"}) {
    const io::RunConfig config = config_file(name);
    const plan::ModelShape model = plan::shape_of(config.model, config.train.seq_len, name);
    const std::vector<plan::PlanLayout> layouts =
        plan::enumerate_layouts(model, {.devices = 8, .batch = 32});
    INFO(name << ": " << layouts.size() << " layouts");
    REQUIRE(layouts.size() > 10);
    int checked = 0;
    for (const plan::PlanLayout& layout : layouts) {
      const mesh::ParallelPlan parallel = layout.parallel_plan();
      // Not yet in this version's executor (fourd::check_plan says so): ZeRO 2 and 3 composed
      // with another axis. The layout rules themselves hold for it (plan::layout_problem).
      if (layout.zero > 1) {
        CHECK(plan::layout_problem(model, layout).empty());
        continue;
      }
      INFO(layout.describe());
      CHECK_NOTHROW(fourd::check_plan(parallel, with_batch(config, layout)));
      ++checked;
    }
    CHECK(checked > 10);
  }
}

TEST_CASE("every cp layout the planner proposes is one tinyscale train accepts",
          "[unit][plan][cp]") {
  const io::RunConfig config = config_file("tiny.toml");
  const plan::ModelShape model = plan::shape_of(config.model, config.train.seq_len, "tiny.toml");
  int with_cp = 0;
  for (const plan::PlanLayout& layout :
       plan::enumerate_layouts(model, {.devices = 8, .batch = 32, .cp = {1, 2, 4}})) {
    if (layout.cp == 1) continue;
    INFO(layout.describe());
    CHECK(layout.zero <= 1);
    CHECK_NOTHROW(fourd::check_plan(layout.parallel_plan(), with_batch(config, layout)));
    ++with_cp;
  }
  CHECK(with_cp > 10);
  // MoE: cp with and without ep, each one train accepts
  const io::RunConfig moe = config_file("moe-tiny.toml");
  int moe_with_cp = 0, with_ep = 0;
  for (const plan::PlanLayout& layout :
       plan::enumerate_layouts(plan::shape_of(moe.model, moe.train.seq_len, "moe-tiny.toml"),
                               {.devices = 8, .batch = 32, .cp = {1, 2}})) {
    if (layout.cp == 1) continue;
    INFO(layout.describe());
    CHECK_NOTHROW(fourd::check_plan(layout.parallel_plan(), with_batch(moe, layout)));
    ++moe_with_cp;
    with_ep += layout.ep > 1 ? 1 : 0;
  }
  CHECK(moe_with_cp > 10);
  CHECK(with_ep > 0);
}

TEST_CASE("the planner leaves out the layouts tinyscale train refuses", "[unit][plan]") {
  // GPT-2's vocabulary of 50,257 tokens splits over no tp > 1 (train refuses it: the embedding
  // and the head are split by vocabulary), although 12 heads would allow tp 2, 3, 4, 6 and 12.
  const io::RunConfig gpt2 = config_file("gpt2-124m.toml");
  const plan::ModelShape model = plan::shape_of(gpt2.model, 1024, "gpt2-124m");
  const std::vector<plan::PlanLayout> layouts =
      plan::enumerate_layouts(model, {.devices = 8, .batch = 64});
  REQUIRE(!layouts.empty());
  bool pipelined = false;
  for (const plan::PlanLayout& layout : layouts) {
    INFO(layout.describe());
    CHECK(layout.tp == 1);
    // ZeRO 2 and 3 shard the gradients each micro-batch's backward needs whole: not under pp.
    CHECK((layout.pp == 1 || layout.zero <= 1));
    pipelined = pipelined || layout.pp > 1;
  }
  CHECK(pipelined);
  // The same model with a padded vocabulary (50,304 = 393 x 128) does split.
  plan::ModelShape padded = model;
  padded.vocab = 50304;
  bool split = false;
  for (const plan::PlanLayout& layout :
       plan::enumerate_layouts(padded, {.devices = 8, .batch = 64}))
    split = split || layout.tp > 1;
  CHECK(split);
  // A layout given by hand is refused by predict with train's own message.
  plan::PlanLayout tp2;
  tp2.tp = 2;
  CHECK_THAT(plan::layout_problem(model, tp2), Contains("model.vocab_size (50257)"));
}
