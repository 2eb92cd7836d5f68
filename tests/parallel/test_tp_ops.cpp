// Chapter 05's pieces on the threads backend, one property each: the conjugate operators f and g
// and the sequence-parallel pair (forward values, and backward as the adjoint of forward), the
// vocabulary-parallel embedding and cross-entropy against the single-rank ops on the joined
// tensors, the sequence-parallel gradient sum, checkpoints that move between tp = 1 and tp = N,
// and bad layouts refused before any work. Tags [ex5.M] mark the tests of exercise 5.M.
#include "rank_checks.hpp"
#include "require_ts_error.hpp"
#include "scratch_dir.hpp"
#include "tp_equivalence.hpp"

#include "autograd/engine.hpp"
#include "comm/counting.hpp"
#include "comm/launch.hpp"
#include "tp/gradients.hpp"
#include "tp/operators.hpp"
#include "tp/vocab_parallel.hpp"

#include <catch2/catch.hpp>

#include <mutex>

using namespace tinyscale;
using namespace tinyscale::test;

namespace {

// Rank r's distinct input [B, T, C] (exact small values, so sums compare with ==).
Tensor rank_input(int rank, const Shape& shape) {
  std::vector<double> v(static_cast<std::size_t>(shape.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>((rank * 5 + i * 3) % 7) - 3;
  Tensor t = Tensor::from_vector(v, shape, DType::Float64);
  t.set_requires_grad();
  return t;
}

// Sum of rank_input over ranks 0..n-1.
std::vector<double> summed_input(int n, const Shape& shape) {
  std::vector<double> sum(static_cast<std::size_t>(shape.numel()), 0.0);
  for (int r = 0; r < n; ++r) {
    const std::vector<double> v = rank_input(r, shape).to_vector();
    for (std::size_t i = 0; i < v.size(); ++i) sum[i] += v[i];
  }
  return sum;
}

void expect(const Tensor& t, const std::vector<double>& want, const std::string& what) {
  comm::testing::expect_equal(t.to_vector(), want, what);
}

} // namespace

TEST_CASE("f is the identity forward and sums the gradients backward, g sums forward and passes "
          "the gradient through unchanged",
          "[parallel][tp][ex5.1]") {
  const int n = 2;
  const Shape shape({2, 4, 3});
  REQUIRE_NOTHROW(comm::run_threads(n, [&](comm::Communicator& tp) {
    const Tensor x = rank_input(tp.rank(), shape);
    // f: y = x; the upstream gradient differs per rank (x itself), so f's backward must sum.
    Tensor y = tp::copy_to_tp(x, tp);
    expect(y, x.to_vector(), "f forward");
    backward(sum(y * x.detach()));
    expect(x.grad(), summed_input(n, shape), "f backward");
    // g: z = sum over ranks of x; backward hands each rank the gradient it received.
    const Tensor x2 = rank_input(tp.rank(), shape);
    Tensor z = tp::reduce_from_tp(x2, tp);
    expect(z, summed_input(n, shape), "g forward");
    const Tensor upstream = rank_input(tp.rank() + 3, shape).detach();
    backward(sum(z * upstream));
    expect(x2.grad(), upstream.to_vector(), "g backward");
  }));
}

TEST_CASE("The sequence-parallel pair: the all-gather's backward is the reduce-scatter and the "
          "reduce-scatter's backward is the all-gather, along the sequence",
          "[parallel][tp]") {
  const int n = 2;
  REQUIRE_NOTHROW(comm::run_threads(n, [&](comm::Communicator& tp) {
    const Shape shard({2, 3, 2}), whole({2, 6, 2});
    const Tensor x = rank_input(tp.rank(), shard);
    Tensor g = tp::gather_from_sequence(x, tp); // [2, 6, 2]: rank 0's positions, then rank 1's
    TS_CHECK(g.shape() == whole, "gathered shape ", g.shape().str());
    for (int r = 0; r < n; ++r)
      expect(slice(g, 1, 3 * r, 3 * r + 3), rank_input(r, shard).to_vector(), "gathered block");
    const Tensor upstream = rank_input(tp.rank() + 1, whole).detach();
    backward(sum(g * upstream));
    // d/dx of sum_r <gather(x), u_r> = my positions of sum_r u_r
    Tensor u = Tensor::from_vector(summed_input(n + 1, whole), whole, DType::Float64) -
               rank_input(0, whole).detach(); // ranks 1..n of rank_input = upstreams of 0..n-1
    expect(x.grad(), slice(u, 1, 3 * tp.rank(), 3 * tp.rank() + 3).to_vector(),
           "all-gather backward");

    const Tensor y = rank_input(tp.rank(), whole);
    Tensor s = tp::reduce_scatter_to_sequence(y, tp); // [2, 3, 2]
    const Tensor all = Tensor::from_vector(summed_input(n, whole), whole, DType::Float64);
    expect(s, slice(all, 1, 3 * tp.rank(), 3 * tp.rank() + 3).to_vector(), "reduce-scatter");
    backward(sum(s * x.detach()));
    expect(y.grad(), tp::all_gather_dim1(tp, x.detach()).to_vector(), "reduce-scatter backward");
  }));
}

TEST_CASE("Vocabulary-parallel cross-entropy equals cross_entropy on the joined logits, loss and "
          "gradient, ignored targets included",
          "[parallel][tp][ex5.2]") {
  for (int n : {2, 4}) {
    INFO("tp = " << n);
    const std::int64_t V = 8;
    const Shape shape({2, 3, V});
    const Tensor full = Tensor::randn(shape, 7, 1, DType::Float64, 0.0, 2.0);
    const Tensor targets = Tensor::from_ids({3, 0, 7, -100, 5, 2}, Shape({2, 3}));
    Tensor ref_logits = full.clone();
    ref_logits.set_requires_grad();
    const Tensor ref = cross_entropy(ref_logits, targets);
    backward(ref);
    REQUIRE_NOTHROW(comm::run_threads(n, [&](comm::Communicator& tp) {
      const std::int64_t per = V / n;
      Tensor shard = slice(full, 2, tp.rank() * per, (tp.rank() + 1) * per).clone();
      shard.set_requires_grad();
      Tensor loss = tp::vocab_parallel_cross_entropy(shard, targets, tp.rank() * per, tp);
      TS_CHECK(std::abs(loss.item() - ref.item()) < 1e-12, "loss ", loss.item(), " expected ",
               ref.item());
      backward(loss);
      const std::vector<double>
          got = shard.grad().to_vector(),
          want = slice(ref_logits.grad(), 2, tp.rank() * per, (tp.rank() + 1) * per).to_vector();
      for (std::size_t i = 0; i < got.size(); ++i)
        TS_CHECK(std::abs(got[i] - want[i]) < 1e-12, "gradient element ", i, ": ", got[i],
                 " expected ", want[i]);
    }));
  }
}

TEST_CASE("Vocabulary-parallel embedding: the ranks' masked lookups sum to the embedding",
          "[parallel][tp]") {
  const int n = 2;
  const Tensor table = Tensor::randn(Shape({6, 3}), 3, 2, DType::Float64);
  const Tensor ids = Tensor::from_ids({0, 5, 2, 3}, Shape({2, 2}));
  const std::vector<double> want = embedding(ids, table).to_vector();
  REQUIRE_NOTHROW(comm::run_threads(n, [&](comm::Communicator& tp) {
    const Tensor shard = slice(table, 0, 3 * tp.rank(), 3 * tp.rank() + 3);
    expect(tp::reduce_from_tp(tp::vocab_parallel_embedding(ids, shard, 3 * tp.rank(), 6), tp), want,
           "summed lookups");
  }));
}

TEST_CASE("The sequence-parallel gradient sum adds every rank's gradient of each parameter",
          "[parallel][tp][ex5.3]") {
  const int n = 2;
  REQUIRE_NOTHROW(comm::run_threads(n, [&](comm::Communicator& tp) {
    nn::ParameterList params;
    for (int i = 0; i < 3; ++i) {
      const Shape shape({i + 1, 2});
      Tensor p = Tensor::zeros(shape, DType::Float64);
      p.set_requires_grad();
      p.set_grad(rank_input(tp.rank() + i, shape).detach());
      std::string name = "p"; // (built with +=: g++ 12 warns about "p" + to_string, -Wrestrict)
      name += std::to_string(i);
      params.push_back({name, p, false});
    }
    tp::all_reduce_sequence_parallel_grads(params, tp);
    for (int i = 0; i < 3; ++i) {
      const Shape shape({i + 1, 2});
      std::vector<double> want(static_cast<std::size_t>(shape.numel()), 0.0);
      for (int r = 0; r < n; ++r) {
        const std::vector<double> v = rank_input(r + i, shape).to_vector();
        for (std::size_t j = 0; j < v.size(); ++j) want[j] += v[j];
      }
      expect(params[static_cast<std::size_t>(i)].tensor.grad(), want, params[i].name);
    }
  }));
}

TEST_CASE("A tensor-parallel run's checkpoint loads into one rank and one rank's into tp = 2 with "
          "SP, and both continue like the run that never changed layout (fp32, rel 1e-5)",
          "[parallel][tp]") {
  testing::ScratchDir dir;
  io::RunConfig config = tp_run_config(1, 2, 1, false);
  config.train.checkpoint_dir = dir / "ckpt";
  const RunRecord want = reference_run(config, 1); // 3 uninterrupted steps, tp = 1
  // tp = 2 with SP: resumes from the checkpoint (if asked), trains up to `steps`, saves (if
  // asked), and returns rank 0's record with the whole model joined.
  auto run_tp = [&](int steps, bool resume, bool save) {
    std::vector<RunRecord> records(2);
    comm::run_threads(2, [&](comm::Communicator& tp) {
      mesh::ParallelPlan plan; // tp = 2 with SP, as `train --tp 2 --sp` runs it
      plan.tp = 2;
      plan.sequence_parallel = true;
      fourd::MeshTrainer trainer(plan, config, tp);
      if (resume) trainer.resume(config.train.checkpoint_dir);
      RunRecord r;
      while (trainer.step() < steps) {
        const train::StepResult step = trainer.train_step();
        r.losses.push_back(step.loss);
        r.grad_norms.push_back(step.grad_norm);
      }
      if (save) trainer.save_checkpoint();
      record_joined_params(r, tp, trainer.stages().model().parameters());
      records[static_cast<std::size_t>(tp.rank())] = r;
    });
    return records[0];
  };
  // The uninterrupted run's first two steps, then the resumed run's third: a whole 3-step record.
  auto continued = [&](RunRecord third) {
    RunRecord r = third;
    r.losses.insert(r.losses.begin(), want.losses.begin(), want.losses.begin() + 2);
    r.grad_norms.insert(r.grad_norms.begin(), want.grad_norms.begin(), want.grad_norms.begin() + 2);
    return r;
  };

  SECTION("tp = 2 saves after 2 steps, tp = 1 resumes") {
    run_tp(2, false, true);
    train::Trainer one(config);
    one.resume(config.train.checkpoint_dir);
    REQUIRE(one.step() == 2);
    RunRecord third;
    const train::StepResult step = one.train_step();
    third.losses = {step.loss};
    third.grad_norms = {step.grad_norm};
    record_params(third, one.model().parameters());
    CHECK(compare_runs(want, continued(third), 1e-5) == "");
  }
  SECTION("tp = 1 saves after 2 steps, tp = 2 with SP resumes") {
    train::Trainer one(config);
    one.train_step();
    one.train_step();
    one.save_checkpoint();
    const RunRecord third = run_tp(3, true, false);
    REQUIRE(third.losses.size() == 1);
    CHECK(compare_runs(want, continued(third), 1e-5) == "");
  }
}

TEST_CASE("A layout that does not divide the model is refused before any work, naming the fix",
          "[parallel][tp]") {
  io::RunConfig config = tp_run_config(1, 2, 1, false);
  config.data.source = "shards"; // a missing file: the layout error must come first
  config.data.path = "/nonexistent/tinyscale/shards";
  auto refused = [&](const io::RunConfig& c, int t, bool sp, const std::string& fragment) {
    std::mutex m;
    std::vector<std::string> errors;
    try {
      comm::run_threads(t, [&](comm::Communicator& tp) {
        try {
          mesh::ParallelPlan plan;
          plan.tp = t;
          plan.sequence_parallel = sp;
          fourd::MeshTrainer trainer(plan, c, tp);
        } catch (const Error& e) {
          std::lock_guard<std::mutex> lock(m);
          errors.push_back(e.what());
        }
      });
    } catch (const Error&) {
    }
    INFO("expected a message containing '" << fragment << "'");
    REQUIRE(errors.size() == static_cast<std::size_t>(t));
    for (const auto& e : errors) {
      INFO(e);
      CHECK(e.find(fragment) != std::string::npos);
      CHECK(e.find("divisible by tp") != std::string::npos);
    }
  };
  io::RunConfig heads = config;
  heads.model.n_head = 2; // 2 heads over 4 ranks
  refused(heads, 4, false, "model.n_head (2)");
  io::RunConfig vocab = config;
  vocab.model.vocab_size = 258; // 258 = 2 x 129: not divisible by 4
  refused(vocab, 4, false, "model.vocab_size (258)");
  io::RunConfig seq = config;
  seq.train.seq_len = 15;
  refused(seq, 2, true, "train.seq_len (15)");
}

TEST_CASE("The counting communicator counts payload and ring wire bytes per region and operation, "
          "and forwards every call",
          "[parallel][tp][host]") {
  std::vector<comm::CommCounts> counts(2);
  REQUIRE_NOTHROW(comm::run_threads(2, [&](comm::Communicator& world) {
    comm::CountingCommunicator counting(world);
    std::vector<float> a(8, 1.0f), b(8);
    counting.all_reduce(a.data(), b.data(), 8, DType::Float32, comm::ReduceOp::Sum);
    TS_CHECK(b[0] == 2.0f, "the all-reduce was not forwarded: ", b[0]);
    {
      comm::CountingRegion region(counting, "block");
      counting.reduce_scatter(a.data(), b.data(), 4, DType::Float32, comm::ReduceOp::Sum);
      counting.all_gather(a.data(), b.data(), 4, DType::Float32);
    }
    TS_CHECK(counting.region() == "other", "the region was not restored");
    counts[static_cast<std::size_t>(world.rank())] = counting.counts();
  }));
  for (const comm::CommCounts& c : counts) {
    const comm::CommCount ar = c.at({"other", "all_reduce"}),
                          rs = c.at({"block", "reduce_scatter"}),
                          ag = c.at({"block", "all_gather"});
    CHECK(ar.calls == 1);
    CHECK(ar.payload_bytes == 32);
    CHECK(ar.wire_bytes == 32.0); // 2 (N-1)/N x 32 bytes with N = 2
    CHECK(rs.payload_bytes == 32);
    CHECK(rs.wire_bytes == 16.0); // (N-1)/N of the full buffer
    CHECK(ag.payload_bytes == 32);
    CHECK(ag.wire_bytes == 16.0);
  }
}

TEST_CASE("A counting communicator's sub-groups count into it, under their own regions (so a "
          "mesh built on a counting world counts every group)",
          "[parallel][tp][host]") {
  std::vector<comm::CommCounts> counts(4);
  REQUIRE_NOTHROW(comm::run_threads(4, [&](comm::Communicator& world) {
    comm::CountingCommunicator counting(world);
    // pairs {0, 1} and {2, 3}, and every rank alone
    auto pair = counting.split(world.rank() / 2, world.rank(), "pair");
    auto alone = counting.split(world.rank(), 0, "alone");
    std::vector<float> a(8, 1.0f), b(8);
    {
      comm::CountingRegion region(*pair, "block");
      pair->all_reduce(a.data(), b.data(), 8, DType::Float32, comm::ReduceOp::Sum);
    }
    TS_CHECK(b[0] == 2.0f, "the pair's all-reduce was not forwarded: ", b[0]);
    alone->all_reduce(a.data(), b.data(), 8, DType::Float32, comm::ReduceOp::Sum);
    TS_CHECK(b[0] == 1.0f, "the lone rank's all-reduce was not forwarded: ", b[0]);
    counts[static_cast<std::size_t>(world.rank())] = counting.counts();
  }));
  for (const comm::CommCounts& c : counts) {
    REQUIRE(c.size() == 2); // the pair's under its region, the lone rank's under "other"
    const comm::CommCount pair = c.at({"block", "all_reduce"}),
                          alone = c.at({"other", "all_reduce"});
    CHECK(pair.calls == 1);
    CHECK(pair.payload_bytes == 32);
    CHECK(pair.wire_bytes == 32.0);
    CHECK(alone.payload_bytes == 32);
    CHECK(alone.wire_bytes == 0.0); // one rank puts nothing on the wire
  }
}
