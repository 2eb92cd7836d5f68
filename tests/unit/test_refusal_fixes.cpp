// Every refusal that suggests a fix is tested with the fix applied: the refused layout, config or
// path is accepted once the user does what the message says (a hint that leads to a second refusal
// is a bug). The command-line ones (unknown commands, unwritable paths) are in tests/app.
#include "fourd/run.hpp"
#include "io/checkpoint.hpp"
#include "io/config.hpp"
#include "mesh/plan.hpp"
#include "require_ts_error.hpp"
#include "scratch_dir.hpp"
#include "train/trainer.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

using namespace tinyscale;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

io::RunConfig tiny_for_hints() {
  io::RunConfig c = io::load_config(std::string(TINYSCALE_SOURCE_DIR) + "/configs/tiny.toml");
  c.train.steps = 4;
  c.optim.warmup_steps = 1;
  c.train.eval_batches = 1;
  return c;
}

io::RunConfig with_seq_len(io::RunConfig c, std::int64_t seq_len) {
  c.train.seq_len = seq_len;
  return c;
}

mesh::ParallelPlan cp_plan(int cp, const std::string& split, int dp = 0) {
  mesh::ParallelPlan p;
  p.cp = cp;
  p.cp_split = split;
  p.dp = dp;
  return p;
}

} // namespace

TEST_CASE("context parallelism's refusals name fixes that are accepted", "[unit][hints][cp]") {
  const io::RunConfig c = tiny_for_hints(); // seq_len 64, n_positions 64
  REQUIRE(c.train.seq_len == 64);
  REQUIRE(c.model.n_positions == 64);
  // --cp 3 load-balanced: 6 chunks; 3 does not divide 64 either, so contiguous is no fix
  const auto lb3 = cp_plan(3, "load-balanced");
  REQUIRE_TS_ERROR(fourd::check_plan(lb3.for_world(3), c), Contains("set train.seq_len = 60") &&
                                                               !Contains("66") &&
                                                               !Contains("--cp-split contiguous"));
  CHECK_NOTHROW(fourd::check_plan(lb3.for_world(3), with_seq_len(c, 60)));
  // seq_len 63: 3 divides it, so contiguous is a fix, and so are 60 (66 exceeds the positions)
  REQUIRE_TS_ERROR(fourd::check_plan(lb3.for_world(3), with_seq_len(c, 63)),
                   Contains("set train.seq_len = 60, or use --cp-split contiguous"));
  CHECK_NOTHROW(fourd::check_plan(cp_plan(3, "contiguous").for_world(3), with_seq_len(c, 63)));
  // with sequence parallelism the cut is cp x tp: 18 -> 16 or 20
  mesh::ParallelPlan sp = cp_plan(2, "contiguous");
  sp.tp = 2;
  sp.sequence_parallel = true;
  REQUIRE_TS_ERROR(fourd::check_plan(sp.for_world(4), with_seq_len(c, 18)),
                   Contains("set train.seq_len = 16 or 20"));
  CHECK_NOTHROW(fourd::check_plan(sp.for_world(4), with_seq_len(c, 16)));
  CHECK_NOTHROW(fourd::check_plan(sp.for_world(4), with_seq_len(c, 20)));
  // --cp 2 --tp 3 --sp (6 heads): one length meets the chunks (4), cp x tp (6) and tp (3): 12k
  io::RunConfig six = c;
  six.model.n_head = 6;
  six.model.n_embd = 48;
  six.model.vocab_size = 258; // a multiple of 3, for the vocabulary-parallel head
  mesh::ParallelPlan odd_tp = cp_plan(2, "load-balanced");
  odd_tp.tp = 3;
  odd_tp.sequence_parallel = true;
  for (std::int64_t seq : {56, 57, 54, 52}) {
    INFO("seq_len " << seq);
    REQUIRE_TS_ERROR(fourd::check_plan(odd_tp.for_world(6), with_seq_len(six, seq)),
                     Contains("set train.seq_len = 48 or 60"));
  }
  CHECK_NOTHROW(fourd::check_plan(odd_tp.for_world(6), with_seq_len(six, 48)));
  CHECK_NOTHROW(fourd::check_plan(odd_tp.for_world(6), with_seq_len(six, 60)));
  // ZeRO 2 or 3 with cp: "use --zero 1"
  mesh::ParallelPlan zero = cp_plan(2, "load-balanced", 2);
  zero.zero = 2;
  REQUIRE_TS_ERROR(fourd::check_plan(zero.for_world(4), c), Contains("use --zero 1"));
  zero.zero = 1;
  CHECK_NOTHROW(fourd::check_plan(zero.for_world(4), c));
}

TEST_CASE("a world that does not fit the layout: the -np or --dp the message names fits",
          "[unit][hints][mesh]") {
  const io::RunConfig c = tiny_for_hints(); // batch 16, 1 micro-batch
  const std::int64_t B = c.train.batch_size, m = c.train.micro_batches;
  REQUIRE(B == 16);
  // --dp 2 --cp 2 under mpirun -np 8: give -np 4, or leave --dp out (8 / 2 = 4 data-parallel)
  const auto given = cp_plan(2, "load-balanced", 2);
  REQUIRE_TS_ERROR(given.for_world(8, B, m),
                   Contains("give -np 4") && Contains("leave --dp out: -np / (tp x pp x cp) = 4"));
  CHECK_NOTHROW(fourd::check_plan(given.for_world(4, B, m), c));
  CHECK_NOTHROW(fourd::check_plan(cp_plan(2, "load-balanced").for_world(8, B, m), c));
  // -np 6: leaving --dp out gives dp 3, which does not split the batch of 16: not offered
  REQUIRE_TS_ERROR(given.for_world(6, B, m), Contains("give -np 4") && !Contains("--dp out"));
  REQUIRE_TS_ERROR(fourd::check_plan(cp_plan(2, "load-balanced").for_world(6, B, m), c),
                   Contains("divide by dp (3)") || Contains("dp = 3"));
  // --cp 2 alone (no --dp) under -np 3: never "leave --dp out"; an -np that fits, each accepted
  const auto alone = cp_plan(2, "load-balanced");
  REQUIRE_TS_ERROR(alone.for_world(3, B, m),
                   Contains("give an -np of 2 or 4") && !Contains("--dp out"));
  CHECK_NOTHROW(fourd::check_plan(alone.for_world(2, B, m), c));
  CHECK_NOTHROW(fourd::check_plan(alone.for_world(4, B, m), c));
  // -np 7: 3 data-parallel ranks would not split the batch, so 4 and 8 ranks are named
  REQUIRE_TS_ERROR(alone.for_world(7, B, m), Contains("give an -np of 4 or 8"));
  CHECK_NOTHROW(fourd::check_plan(alone.for_world(8, B, m), c));
}

TEST_CASE("a resume refused for a config change names the fix for what changed, which works",
          "[unit][hints][checkpoint]") {
  testing::ScratchDir dir;
  io::RunConfig c = tiny_for_hints();
  c.train.checkpoint_dir = (dir / "ckpt");
  c.optim.decay_steps = 10; // the schedule does not depend on train.steps
  const std::string saved = train::Trainer(c).save_checkpoint();

  // another model: a new checkpoint folder, or --init-from; never optim.decay_steps
  io::RunConfig wider = c;
  wider.model.n_embd = 32;
  REQUIRE_TS_ERROR(train::Trainer(wider).resume(saved),
                   Contains("model.n_embd = 64 in the checkpoint, 32 now") &&
                       Contains("give the run a new train.checkpoint_dir") &&
                       Contains("resume with the checkpoint's model keys") &&
                       !Contains("decay_steps"));
  // ... either fix is accepted: this model in a new folder, or the checkpoint's model resumed
  io::RunConfig fresh = wider;
  fresh.train.checkpoint_dir = (dir / "fresh");
  CHECK_NOTHROW(train::Trainer(fresh).save_checkpoint());
  CHECK_NOTHROW(train::Trainer(c).resume(saved));

  // more steps with optim.decay_steps kept: accepted (the hint's promise)
  io::RunConfig longer = c;
  longer.train.steps = 8;
  train::Trainer resumed(longer);
  CHECK_NOTHROW(resumed.resume(saved));
  CHECK(resumed.step() == 0);

  // more steps without optim.decay_steps: refused, naming optim.decay_steps
  io::RunConfig plain = tiny_for_hints();
  plain.train.checkpoint_dir = (dir / "plain");
  const std::string plain_saved = train::Trainer(plain).save_checkpoint();
  io::RunConfig plain_longer = plain;
  plain_longer.train.steps = 8;
  REQUIRE_TS_ERROR(train::Trainer(plain_longer).resume(plain_saved),
                   Contains("train.steps = 4 in the checkpoint, 8 now") &&
                       Contains("set optim.decay_steps in the original run"));
  // and another key: resume with its value, or start elsewhere
  io::RunConfig other = plain;
  other.train.batch_size = 8;
  REQUIRE_TS_ERROR(train::Trainer(other).resume(plain_saved),
                   Contains("resume with the checkpoint's values of these keys"));
}

TEST_CASE("a checkpoint folder that is empty, lacks 'latest' or names a deleted step: the "
          "message names the checkpoint that exists, which loads",
          "[unit][hints][checkpoint]") {
  testing::ScratchDir dir;
  fs::create_directories((dir / "empty"));
  REQUIRE_TS_ERROR(io::read_checkpoint((dir / "empty")),
                   Contains("found an empty folder") &&
                       Contains("train.checkpoint_every=N into train.checkpoint_dir") &&
                       !Contains("no older checkpoint"));

  io::RunConfig c = tiny_for_hints();
  c.train.checkpoint_dir = (dir / "ckpt");
  train::Trainer trainer(c);
  const std::string first = trainer.save_checkpoint();
  trainer.train_step();
  const std::string second = trainer.save_checkpoint();
  fs::remove_all(second); // `latest` still names it
  REQUIRE_TS_ERROR(io::read_checkpoint(c.train.checkpoint_dir),
                   Contains("names 'step_00000001', found no such directory") &&
                       Contains("the newest checkpoint in it is " + first + ": pass that"));
  CHECK(io::read_checkpoint(first).step == 0);
  fs::remove(fs::path(c.train.checkpoint_dir) / "latest");
  REQUIRE_TS_ERROR(io::read_checkpoint(c.train.checkpoint_dir),
                   Contains("expected a 'latest' file") &&
                       Contains("the newest checkpoint in it is " + first));
}
