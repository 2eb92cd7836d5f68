// Optimizer-state offload (optim.offload, chapter 07 section 9): AdamW's moments live in host
// memory and the update runs on the host, on the emulated device (chapter 11: CPU arithmetic in
// memory host code may not touch, every host <-> device copy counted). The proof: a run with
// offload is the same run bit for bit (the update is the same CPU arithmetic on the same values),
// one rank, dp 2 and pp 2, and ZeRO's sharded AdamW at stages 1-3; the moments are on the host;
// and one step's optimizer moves exactly the formula's bytes: each parameter and its gradient to
// the host, the parameter back, 3 x 4 bytes per parameter in fp32 (over the ranks with ZeRO).
#include "backend/host_traffic.hpp"
#include "plan_run.hpp"

#include "dp_equivalence.hpp"
#include "optim/adamw.hpp"
#include "train/trainer.hpp"
#include "zero/sharded_dp.hpp"
#include "zero/trainer.hpp"

#include <catch2/catch.hpp>

namespace tinyscale::test {
namespace {

io::RunConfig offload_config(bool offload) {
  io::RunConfig c = dp_run_config(1, 4, 2, false);
  c.model.n_layer = 2;
  c.train.device = "emu";
  c.optim.offload = offload;
  return c;
}

} // namespace

TEST_CASE("Optimizer offload on the emulated device: the moments on the host, the same run bit "
          "for bit, and 3 x 4 bytes per parameter moved per step",
          "[offload][host]") {
  // one rank, by hand: the state's place and the bytes
  train::Trainer plain(offload_config(false)), offloaded(offload_config(true));
  for (const auto& [name, t] : offloaded.optimizer().state_tensors())
    CHECK(t.device().kind == Device::Kind::CPU);
  for (const auto& [name, t] : plain.optimizer().state_tensors())
    if (name != "step") CHECK(t.device().kind == Device::Kind::Emu);
  const std::int64_t psi = offloaded.parameter_count();
  CHECK(offloaded.optimizer().offload_bytes_per_step() == 3 * 4 * psi);
  CHECK(plain.optimizer().offload_bytes_per_step() == 0);
  for (int s = 0; s < 3; ++s) {
    const train::StepResult a = plain.train_step();
    HostTraffic traffic;
    train::StepResult b;
    {
      CountHostTraffic scope(traffic);
      b = offloaded.train_step();
    }
    CHECK(a.loss == b.loss); // bit for bit
    CHECK(a.grad_norm == b.grad_norm);
    // the update's copies: its sites in lib/optim/adamw.cpp (the rest: the batch and scalars)
    std::int64_t down = 0, up = 0;
    for (const HostTransfers& t : traffic.sites())
      if (t.where.find("lib/optim/adamw.cpp") != std::string::npos)
        (t.to_host ? down : up) += t.bytes;
    INFO(traffic.table());
    CHECK(down == 2 * 4 * psi);
    CHECK(up == 4 * psi);
  }
  for (std::size_t i = 0; i < plain.model().parameters().size(); ++i)
    CHECK(plain.model().parameters()[i].tensor.to_vector() ==
          offloaded.model().parameters()[i].tensor.to_vector());

  // through make_run, as `train` runs it: one rank, dp 2 and pp 2 with and without offload
  mesh::ParallelPlan one, dp2, pp2;
  one.dp = 1;
  dp2.dp = 2;
  pp2.pp = 2;
  for (const auto& [name, plan] :
       {std::pair{"one rank", one}, std::pair{"dp 2", dp2}, std::pair{"pp 2", pp2}}) {
    SECTION(name) {
      std::vector<HostTraffic> plain_traffic, offload_traffic;
      const Trained want = run_plan(plan, offload_config(false), nullptr, &plain_traffic);
      const Trained got = run_plan(plan, offload_config(true), nullptr, &offload_traffic);
      CHECK(compare(want, got, 0.0) == ""); // bit for bit
      // and every rank did offload: its update copied its parameters to the host
      const auto update_bytes = [](const HostTraffic& t) {
        std::int64_t bytes = 0;
        for (const HostTransfers& s : t.sites())
          if (s.where.find("lib/optim/adamw.cpp") != std::string::npos) bytes += s.bytes;
        return bytes;
      };
      for (std::size_t r = 0; r < offload_traffic.size(); ++r) {
        CHECK(update_bytes(plain_traffic[r]) == 0);
        CHECK(update_bytes(offload_traffic[r]) > 0);
      }
    }
  }
}

TEST_CASE("ZeRO-Offload on the emulated device: each rank's shard of the moments on the host, "
          "the same run bit for bit at stages 1, 2 and 3, and 3 x 4 bytes per parameter moved "
          "per step over the ranks",
          "[offload][host]") {
  // ZeRO's sharded AdamW (zero/sharded_dp.cpp) with optim.offload: each rank moves its shard's
  // pieces and their gradients to the host, updates them beside its moments there, and copies
  // them back; the ranks' shards are disjoint, so together they move each parameter once
  const std::int64_t psi =
      nn::count_elements(train::Trainer(offload_config(false)).model().parameters());
  for (int stage : {1, 2, 3}) {
    SECTION("stage " + std::to_string(stage)) {
      mesh::ParallelPlan zero;
      zero.dp = 2, zero.zero = stage;
      // where each rank's moments live: the device without offload, the host with it
      std::vector<std::string> places(2);
      comm::run_threads(2, [&](comm::Communicator& world) {
        for (bool offload : {false, true}) {
          zero::ZeroTrainer t(offload_config(offload), world, {stage, true});
          std::string& place = places[static_cast<std::size_t>(world.rank())];
          for (const auto& [name, tensor] : t.sharded().optimizer_state())
            if (name != "step") place += tensor.device().str() + " ";
          place += "| ";
        }
      });
      for (const std::string& place : places) {
        INFO("the moments' devices, without offload | with: " << place);
        CHECK(place.find("cpu") > place.find('|')); // none on the host without offload
        CHECK(place.find("emu", place.find('|')) == std::string::npos); // all on it with
      }
      std::vector<HostTraffic> plain_traffic, offload_traffic;
      const Trained want = run_plan(zero, offload_config(false), nullptr, &plain_traffic);
      const Trained got = run_plan(zero, offload_config(true), nullptr, &offload_traffic);
      CHECK(compare(want, got, 0.0) == ""); // bit for bit
      // what ZeRO's code copied over the run (its norms' scalars too), with and without offload
      const auto rank_bytes = [](const HostTraffic& t, bool to_host) {
        std::int64_t bytes = 0;
        for (const HostTransfers& s : t.sites())
          if (s.where.find("lib/zero/sharded_dp.cpp") != std::string::npos && s.to_host == to_host)
            bytes += s.bytes;
        return bytes;
      };
      const auto zero_bytes = [&](const std::vector<HostTraffic>& ranks, bool to_host) {
        std::int64_t bytes = 0;
        for (const HostTraffic& t : ranks) bytes += rank_bytes(t, to_host);
        return bytes;
      };
      for (std::size_t r = 0; r < offload_traffic.size(); ++r) // every rank updated on the host
        CHECK(rank_bytes(offload_traffic[r], true) > rank_bytes(plain_traffic[r], true));
      INFO(offload_traffic[0].table());
      const std::int64_t steps = offload_config(true).train.steps;
      // every parameter and its gradient down, the parameter back, once per step
      CHECK(zero_bytes(offload_traffic, true) - zero_bytes(plain_traffic, true) ==
            steps * 2 * 4 * psi);
      CHECK(zero_bytes(offload_traffic, false) - zero_bytes(plain_traffic, false) ==
            steps * 4 * psi);
    }
  }
}

TEST_CASE("Offload is refused where it cannot run: on the CPU", "[offload][host]") {
  io::RunConfig cpu = offload_config(true);
  cpu.train.device = "cpu";
  REQUIRE_THROWS_WITH(io::parse_config(io::to_toml(cpu), "run.toml"),
                      Catch::Contains("optim.offload: expected train.device = \"emu\" or "
                                      "\"cuda\""));
}

} // namespace tinyscale::test
