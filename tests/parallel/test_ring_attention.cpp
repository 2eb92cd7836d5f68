// Ring attention (context parallelism, lib/cp) on threads: equal to one rank's causal attention,
// output and q, k, v gradients, for cp = 1 to 4 with both ways of cutting the sequence; the chunk
// map and the causal work it gives each rank; the bytes each rank sends; and the refusals.
#include "comm/counting.hpp"
#include "comm/launch.hpp"
#include "cp_equivalence.hpp"
#include "dp_equivalence.hpp"
#include "rank_checks.hpp"
#include "require_ts_error.hpp"

#include <catch2/catch.hpp>

#include <vector>

using namespace tinyscale;
using Catch::Matchers::Contains;

namespace {
Device device_under_test() { return test::test_device() == "emu" ? Device::emu() : Device::cpu(); }

// Ring attention in float64 on cp = 2 and 4, both cuts, with k and v of `kv_heads` heads and
// `k_shift` added to k (test::ring_attention_error): every rank within `tolerance` (NaN fails).
void check_float64_ring(std::int64_t kv_heads, double k_shift, double tolerance) {
  for (cp::Split split : {cp::Split::Contiguous, cp::Split::LoadBalanced})
    for (int n : {2, 4}) {
      INFO("cp " << n << ", " << cp::split_name(split));
      std::vector<double> error(n);
      REQUIRE_NOTHROW(comm::run_threads(
          n,
          [&](comm::Communicator& group) {
            error[group.rank()] = test::ring_attention_error(
                group, split, DType::Float64, device_under_test(), 24, split, kv_heads, k_shift);
          },
          comm::testing::test_options()));
      for (int r = 0; r < n; ++r) {
        INFO("rank " << r << ": relative error " << error[r]);
        CHECK(error[r] <= tolerance);
      }
    }
}
} // namespace

TEST_CASE("Ring attention equals one rank's causal attention, output and q, k, v gradients, for "
          "cp = 1 to 4, contiguous and load-balanced, float64 to 1e-12 and float32 to 1e-5",
          "[parallel][cp][ex14.2]") {
  for (DType dtype : {DType::Float64, DType::Float32}) {
    const double tolerance = dtype == DType::Float64 ? 1e-12 : 1e-5;
    for (cp::Split split : {cp::Split::Contiguous, cp::Split::LoadBalanced}) {
      for (int n = 1; n <= 4; ++n) {
        INFO("cp " << n << ", " << cp::split_name(split) << ", " << dtype_name(dtype));
        std::vector<double> error(n);
        REQUIRE_NOTHROW(comm::run_threads(
            n,
            [&](comm::Communicator& group) {
              error[group.rank()] =
                  test::ring_attention_error(group, split, dtype, device_under_test(), 24, split);
            },
            comm::testing::test_options()));
        for (int r = 0; r < n; ++r) {
          INFO("rank " << r << ": relative error " << error[r]);
          CHECK(error[r] <= tolerance);
        }
      }
    }
  }
}

// Standard normal inputs keep every score small, so a merge that exponentiates each block's
// log-sum-exp and divides (exp(lse_a) + exp(lse_b)) passes them too. Adding 500 to every element
// of k adds 500 (q_1 + ... + q_D) / sqrt(D) to each logit of a query's row: the attention is the
// same, but many rows' logits now lie beyond +-709, where exp overflows or underflows in float64.
// Only a stable merge (exp of differences of normalisers) stays finite and exact; the naive one
// gives inf / inf or 0 / 0 there.
TEST_CASE("Ring attention with logits beyond exp's range (rows shifted by hundreds) still equals "
          "one rank, cp = 2 and 4, float64 to 1e-10: the merge must be the stable one",
          "[parallel][cp][ex14.2]") {
  check_float64_ring(/*kv_heads=*/2, /*k_shift=*/500.0, 1e-10);
}

TEST_CASE("Ring attention with grouped key/value heads (two query heads on one, the ring "
          "carrying the one) equals one rank's grouped-query attention, cp = 2 and 4, float64 to "
          "1e-12",
          "[parallel][cp][llama]") {
  check_float64_ring(/*kv_heads=*/1, /*k_shift=*/0.0, 1e-12);
}

TEST_CASE("Negative control: ring attention told the wrong chunk map (load-balanced data, "
          "contiguous masks) is far from one rank, so the comparison can fail",
          "[parallel][cp]") {
  for (int n : {2, 4}) {
    INFO("cp " << n);
    std::vector<double> error(n);
    REQUIRE_NOTHROW(comm::run_threads(
        n,
        [&](comm::Communicator& group) {
          error[group.rank()] =
              test::ring_attention_error(group, cp::Split::LoadBalanced, DType::Float64,
                                         device_under_test(), 24, cp::Split::Contiguous);
        },
        comm::testing::test_options()));
    double worst = 0.0;
    for (double e : error) worst = std::max(worst, e);
    CHECK(worst > 1e-2);
  }
}

TEST_CASE("Load-balanced chunks: rank i holds chunks i and 2N-1-i, and every rank scores the same "
          "number of causal query-key pairs, and contiguous chunks do not balance",
          "[parallel][cp][ex14.1]") {
  CHECK(cp::chunks_of(0, 4, cp::Split::LoadBalanced) == std::vector<int>{0, 7});
  CHECK(cp::chunks_of(3, 4, cp::Split::LoadBalanced) == std::vector<int>{3, 4});
  CHECK(cp::chunks_of(2, 4, cp::Split::Contiguous) == std::vector<int>{2});
  const std::int64_t T = 64; // 8 chunks of 8 when balanced, 4 of 16 when not
  // The whole causal triangle, T (T + 1) / 2 pairs, shared out.
  for (cp::Split split : {cp::Split::Contiguous, cp::Split::LoadBalanced}) {
    std::int64_t total = 0;
    for (int r = 0; r < 4; ++r) total += cp::causal_pairs(r, 4, split, T);
    CHECK(total == T * (T + 1) / 2);
  }
  for (int r = 0; r < 4; ++r)
    CHECK(cp::causal_pairs(r, 4, cp::Split::LoadBalanced, T) == T * (T + 1) / 2 / 4);
  // Contiguous: rank r scores r full 16 x 16 blocks and one diagonal block of 136 pairs.
  for (int r = 0; r < 4; ++r)
    CHECK(cp::causal_pairs(r, 4, cp::Split::Contiguous, T) == r * 256 + 136);
}

TEST_CASE("Each rank of the ring sends N-1 messages of 2 B H T_local D values forward, then N-1 "
          "of them and N of the gradients backward",
          "[parallel][cp]") {
  const int n = 4;
  const std::int64_t B = 2, H = 2, T = 24, D = 8, local = T / n;
  const std::int64_t block = B * H * local * D * 8; // bytes of a float64 k (or v) block
  std::vector<std::vector<std::int64_t>> seen(n);
  REQUIRE_NOTHROW(comm::run_threads(
      n,
      [&](comm::Communicator& group) {
        comm::CountingCommunicator counting(group);
        counting.set_region("attention");
        std::vector<Tensor> qkv;
        for (std::uint64_t stream = 1; stream <= 3; ++stream) {
          Tensor whole =
              Tensor::randn(Shape({B, H, T, D}), 7, stream, DType::Float64).to(device_under_test());
          qkv.push_back(cp::shard_sequence(whole, 2, group.rank(), n, cp::Split::LoadBalanced));
          qkv.back().set_requires_grad();
        }
        Tensor out = cp::ring_attention(qkv[0], qkv[1], qkv[2], counting);
        const comm::CommCount forward = counting.counts().at({"attention", "send"});
        counting.reset();
        backward(sum(out));
        const comm::CommCount back = counting.counts().at({"attention", "send"});
        seen[group.rank()] = {forward.calls, forward.payload_bytes, back.calls, back.payload_bytes};
      },
      comm::testing::test_options()));
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    // backward: k, v ahead (N-1) and dk, dv one step behind (N, the last one home)
    CHECK(seen[r] == std::vector<std::int64_t>{n - 1, (n - 1) * 2 * block, 2 * n - 1,
                                               (n - 1) * 2 * block + n * 2 * block});
  }
}

TEST_CASE("A sequence that does not cut into the chunks is refused, naming the length, cp and the "
          "fix",
          "[parallel][cp]") {
  const Tensor x = Tensor::zeros(Shape({1, 1, 10, 4}), DType::Float64);
  REQUIRE_TS_ERROR(cp::shard_sequence(x, 2, 0, 3, cp::Split::LoadBalanced),
                   Contains("10 positions does not cut into 6 equal chunks") &&
                       Contains("cp = 3, load-balanced") && Contains("multiple of 6"));
  REQUIRE_TS_ERROR(cp::chunks_of(2, 2, cp::Split::Contiguous),
                   Contains("expected a rank in 0..1") && Contains("found rank 2 of 2"));
  REQUIRE_TS_ERROR(cp::causal_pairs(0, 2, cp::Split::LoadBalanced, 10),
                   Contains("10 positions does not cut into 4 equal chunks"));
  const Tensor odd = Tensor::zeros(Shape({1, 1, 5, 4}), DType::Float64);
  REQUIRE_NOTHROW(comm::run_threads(1, [&](comm::Communicator& group) {
    const std::string message = [&] {
      try {
        cp::ring_attention(odd, odd, odd, group, cp::Split::LoadBalanced);
      } catch (const Error& e) {
        return std::string(e.what());
      }
      return std::string("(no error)");
    }();
    TS_CHECK(message.find("holds 2 chunks (load-balanced) but 5 positions") != std::string::npos,
             "expected the uneven-chunks refusal, found: ", message);
  }));
}
