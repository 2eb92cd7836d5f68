// The DataParallel wrapper's own promises (chapter 04): replicas start from rank 0's parameters,
// buckets leave during backward when overlap is on and after it when off, a parameter that got a
// gradient on only some ranks is summed over them, one that got none anywhere keeps none (so
// AdamW skips it as on one rank), and misuse fails with an explanation.
#include "rank_checks.hpp"

#include "autograd/engine.hpp"
#include "comm/launch.hpp"
#include "dp/data_parallel.hpp"
#include "dp/trainer.hpp"
#include "ops/ops.hpp"

#include <catch2/catch.hpp>

using namespace tinyscale;
using comm::testing::test_options;

namespace {
io::RunConfig tiny() {
  io::RunConfig c;
  c.model.n_positions = 16;
  c.model.n_layer = 2;
  c.model.n_head = 2;
  c.model.n_embd = 16;
  c.data.markov_train_tokens = 4096;
  c.data.markov_val_tokens = 1024;
  c.train.batch_size = 4;
  c.train.seq_len = 16;
  return c;
}
} // namespace

TEST_CASE("Data parallel replicas start from rank 0's parameters", "[parallel][dp][host]") {
  REQUIRE_NOTHROW(comm::run_threads(
      3,
      [](comm::Communicator& world) {
        io::RunConfig c = tiny();
        c.train.batch_size = 3;
        c.train.seed = 100 + static_cast<std::uint64_t>(world.rank()); // different inits
        dp::DpTrainer trainer(c, world);
        io::RunConfig c0 = tiny();
        c0.train.seed = 100;
        const nn::GPT rank0(c0.model, c0.train.seed);
        const auto& mine = trainer.trainer().model().parameters();
        for (std::size_t i = 0; i < mine.size(); ++i)
          TS_CHECK(mine[i].tensor.to_vector() == rank0.parameters()[i].tensor.to_vector(), "rank ",
                   world.rank(), ": parameter ", mine[i].name,
                   " differs from rank 0's after the broadcast");
      },
      test_options()));
}

TEST_CASE("With overlap every bucket leaves during backward, and without it none does",
          "[parallel][dp][host]") {
  for (bool overlap : {true, false}) {
    INFO("overlap " << overlap);
    REQUIRE_NOTHROW(comm::run_threads(
        2,
        [&](comm::Communicator& world) {
          dp::DpTrainer trainer(tiny(), world, {4 << 10, overlap, -1});
          trainer.train_step();
          const dp::SyncStats& s = trainer.data_parallel().last_sync();
          const std::size_t buckets = trainer.data_parallel().buckets().size();
          TS_CHECK(buckets >= 3, "expected several 4 KiB buckets, found ", buckets);
          TS_CHECK(s.buckets == buckets, "expected all ", buckets, " buckets reduced, found ",
                   s.buckets);
          TS_CHECK(s.launched_in_backward == (overlap ? buckets : 0), "expected ",
                   overlap ? buckets : 0, " buckets launched by the hooks, found ",
                   s.launched_in_backward);
        },
        test_options()));
  }
}

TEST_CASE("A gradient present on some ranks is summed over them, and one absent everywhere stays "
          "absent",
          "[parallel][dp][host]") {
  REQUIRE_NOTHROW(comm::run_threads(
      2,
      [](comm::Communicator& world) {
        // a: used on every rank; b: only on rank 0 (like an expert that got tokens there);
        // c: used nowhere (an expert no rank routed to).
        nn::ParameterList params = {
            {"a", Tensor::from_vector({1, 2}, {2}).set_requires_grad(), true},
            {"b", Tensor::from_vector({3}, {1}).set_requires_grad(), true},
            {"c", Tensor::from_vector({4}, {1}).set_requires_grad(), true}};
        dp::DataParallel data_parallel(params, world, {4, true, -1});
        const double r = world.rank() + 1; // rank 0 scales by 1, rank 1 by 2
        Tensor loss = sum(params[0].tensor) * r;
        if (world.rank() == 0) loss = loss + sum(params[1].tensor) * 5.0;
        backward(loss);
        data_parallel.finish_gradient_sync();
        comm::testing::expect_equal(params[0].tensor.grad().to_vector(), std::vector<double>{3, 3},
                                    "grad of a (1 + 2)");
        comm::testing::expect_equal(params[1].tensor.grad().to_vector(), std::vector<double>{5},
                                    "grad of b (rank 0 only)");
        TS_CHECK(!params[2].tensor.grad().defined(),
                 "expected no gradient for c, which no rank used");
      },
      test_options()));
}

TEST_CASE("Two synchronising backward passes without finishing the first are refused",
          "[parallel][dp][host]") {
  std::string message;
  try {
    comm::run_threads(
        1,
        [](comm::Communicator& world) {
          nn::ParameterList params = {
              {"a", Tensor::from_vector({1, 2}, {2}).set_requires_grad(), true}};
          dp::DataParallel data_parallel(params, world);
          backward(sum(params[0].tensor));
          backward(sum(params[0].tensor)); // forgot no_sync() for the first micro-batch
        },
        test_options());
  } catch (const Error& e) {
    message = e.what();
  }
  CHECK_THAT(message, Catch::Contains("ready twice") && Catch::Contains("no_sync"));
}

TEST_CASE("A batch that does not divide by dp x micro_batches is refused before any work",
          "[parallel][dp][host]") {
  std::string message;
  try {
    comm::run_threads(2, [](comm::Communicator& world) {
      io::RunConfig c = tiny();
      c.train.batch_size = 6;
      c.train.micro_batches = 2;
      dp::DpTrainer trainer(c, world);
    });
  } catch (const Error& e) {
    message = e.what();
  }
  CHECK_THAT(message, Catch::Contains("divide by dp (2) x train.micro_batches (2) = 4"));
}
