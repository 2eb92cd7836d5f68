// Chapter 02, the Markov data source: its entropy rate against hand-computed cases, the
// stationary distribution as a fixed point, and statistical checks that the generated stream
// follows the chain (conditional frequencies, cross-entropy under the true P).
#include "core/rng.hpp"
#include "data/markov.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>
#include <set>
#include <vector>

using namespace tinyscale;
using namespace tinyscale::data;
using Catch::Contains;

TEST_CASE("the entropy rate of a hand-built binary chain is the pi-weighted row entropy",
          "[unit]") {
  // Order 1, alphabet 2, context = last symbol. P(0|0) = 0.9, P(1|0) = 0.1, P(0|1) = P(1|1) = 0.5.
  // Balance pi0 * 0.1 = pi1 * 0.5 gives pi = (5/6, 1/6). Row entropies: h(0.1) = 0.1 ln 10
  // + 0.9 ln(10/9) = 0.32508297339, and ln 2. H = 5/6 * 0.32508297339 + 1/6 * 0.69314718056
  // = 0.38642700792 nats. (1/2 * h(0.1) + 1/2 * ln 2 = 0.509 would be the uniform-weight mistake.)
  const auto chain = MarkovChain::from_probabilities(2, 1, {0.9, 0.1, 0.5, 0.5});
  CHECK(chain.stationary()[0] == Approx(5.0 / 6.0).epsilon(1e-12));
  CHECK(chain.stationary()[1] == Approx(1.0 / 6.0).epsilon(1e-12));
  CHECK(chain.entropy_rate() == Approx(0.38642700792).epsilon(1e-10));
}

TEST_CASE("the stationary distribution is a fixed point of the chain", "[unit]") {
  for (int order : {1, 2, 3}) {
    const auto chain = MarkovChain::random(6, order, 3, 0.05, 17);
    const auto& pi = chain.stationary();
    REQUIRE(std::ssize(pi) == chain.contexts());
    CHECK(std::accumulate(pi.begin(), pi.end(), 0.0) == Approx(1.0).epsilon(1e-14));
    const auto next = chain.transition(pi);
    double change = 0;
    for (std::size_t c = 0; c < pi.size(); ++c) {
      CHECK(pi[c] > 0); // noise > 0 reaches every context
      change += std::abs(next[c] - pi[c]);
    }
    CHECK(change < 1e-12);
  }
}

TEST_CASE("each context's next-symbol probabilities sum to 1 with the noise floor included",
          "[unit]") {
  const auto chain = MarkovChain::random(5, 2, 2, 0.1, 3);
  for (std::int64_t c = 0; c < chain.contexts(); ++c) {
    double sum = 0;
    int above_floor = 0;
    for (int x = 0; x < 5; ++x) {
      const double p = chain.probability(c, x);
      CHECK(p >= 0.1 / 5 - 1e-15);
      sum += p;
      above_floor += p > 0.1 / 5 + 1e-12;
    }
    CHECK(sum == Approx(1.0).epsilon(1e-14));
    CHECK(above_floor == 2); // branching 2: two *distinct* successors carry the chain's mass
  }
}

TEST_CASE("with noise 1 every symbol is uniform and the rate is ln(alphabet)", "[unit]") {
  const auto chain = MarkovChain::random(7, 2, 3, 1.0, 5);
  CHECK(chain.entropy_rate() == Approx(std::log(7.0)).epsilon(1e-12));
}

TEST_CASE("with branching 1 the rate is the entropy of the noise mixture alone", "[unit]") {
  // Every context has one successor with mass 1 - e + e/A and A - 1 symbols with e/A, whatever
  // pi is: A = 4, e = 0.2 gives -(0.85 ln 0.85 + 3 * 0.05 ln 0.05) = 0.58750093111.
  const auto chain = MarkovChain::random(4, 2, 1, 0.2, 11);
  CHECK(chain.entropy_rate() == Approx(0.58750093111).epsilon(1e-10));
}

TEST_CASE("a generated stream's conditional frequencies match P(x|c) within 5 sigma", "[unit]") {
  // By the Markov property the symbols drawn at the n_c visits of context c are independent draws
  // from P(.|c), so each count is Binomial(n_c, P): 5 standard deviations leaves a false-alarm
  // chance below 6e-7 per cell (27 cells here), while a sampler off by a few percent fails.
  const auto chain = MarkovChain::random(3, 2, 2, 0.1, 99);
  const auto s = chain.generate(300000, 99, stream_id("test.markov.freq"));
  std::vector<double> counts(27, 0.0), visits(9, 0.0);
  for (std::size_t t = 2; t < s.size(); ++t) {
    const int c = s[t - 2] * 3 + s[t - 1];
    counts[static_cast<std::size_t>(c * 3 + s[t])] += 1;
    visits[static_cast<std::size_t>(c)] += 1;
  }
  for (int c = 0; c < 9; ++c) {
    REQUIRE(visits[static_cast<std::size_t>(c)] > 1000);
    for (int x = 0; x < 3; ++x) {
      const double p = chain.probability(c, x), n = visits[static_cast<std::size_t>(c)];
      const double freq = counts[static_cast<std::size_t>(c * 3 + x)] / n;
      CHECK(std::abs(freq - p) <= 5 * std::sqrt(p * (1 - p) / n));
    }
  }
}

TEST_CASE("the cross-entropy of a generated stream under the true P approaches the rate",
          "[unit]") {
  // The default chain (alphabet 32, order 2, branching 4, noise 0.02). The per-token losses
  // -log P(x_t|c_t) are correlated through the context, so the standard error comes from batch
  // means: 64 blocks of 16384 tokens, each far longer than the chain's mixing time, are close to
  // independent; their spread over sqrt(64) is the standard error of the mean. 5 standard errors
  // keep false alarms below 1e-6, and the error itself must be small (< 0.003 nats) so that a wrong
  // rate (missing noise term, uniform context weights) cannot hide inside the tolerance.
  const auto chain = MarkovChain::random(32, 2, 4, 0.02, 1234);
  constexpr std::size_t kBlocks = 64, kBlock = 16384;
  const auto s = chain.generate(kBlocks * kBlock + 2, 1234, stream_id("test.markov.xent"));
  std::vector<double> block_mean(kBlocks, 0.0);
  for (std::size_t t = 2; t < s.size(); ++t) {
    const std::int64_t c = s[t - 2] * 32 + s[t - 1];
    block_mean[std::min((t - 2) / kBlock, kBlocks - 1)] -=
        std::log(chain.probability(c, s[t])) / kBlock;
  }
  const double mean = std::accumulate(block_mean.begin(), block_mean.end(), 0.0) / kBlocks;
  double var = 0;
  for (double b : block_mean) var += (b - mean) * (b - mean) / (kBlocks - 1);
  const double standard_error = std::sqrt(var / kBlocks);
  INFO("cross-entropy " << mean << ", rate " << chain.entropy_rate() << ", s.e. "
                        << standard_error);
  CHECK(standard_error < 0.003);
  CHECK(std::abs(mean - chain.entropy_rate()) < 5 * standard_error);
}

TEST_CASE("the same seed builds the same chain and a different seed a different one", "[unit]") {
  const auto a = MarkovChain::random(8, 2, 3, 0.02, 1), b = MarkovChain::random(8, 2, 3, 0.02, 1);
  const auto c = MarkovChain::random(8, 2, 3, 0.02, 2);
  CHECK(a.entropy_rate() == b.entropy_rate());
  CHECK(a.generate(1000, 1, 7) == b.generate(1000, 1, 7));
  CHECK(a.entropy_rate() != c.entropy_rate());
  CHECK(a.generate(1000, 1, 7) != c.generate(1000, 1, 7));
}

TEST_CASE("markov symbols are the bytes a..z first and all 256 symbols are distinct bytes",
          "[unit]") {
  for (int i = 0; i < 26; ++i) CHECK(markov_symbol_byte(i) == 'a' + i);
  CHECK(markov_symbol_byte(26) == 'A');
  std::set<int> bytes;
  for (int i = 0; i < 256; ++i) bytes.insert(markov_symbol_byte(i));
  CHECK(bytes.size() == 256);
  for (int i = 0; i < 95; ++i) CHECK((markov_symbol_byte(i) >= 32 && markov_symbol_byte(i) < 127));
}

TEST_CASE("a periodic chain still gets its stationary distribution (lazy power iteration)",
          "[unit]") {
  // Order 1, alphabet 3, noise 0: 0 -> 1, 1 -> 0 or 2 (1/2 each), 2 -> 1. Every cycle has length
  // 2, so plain power iteration from uniform oscillates between (1/3, 1/3, 1/3) and
  // (1/6, 2/3, 1/6) forever. Balance gives pi = (1/4, 1/2, 1/4); only state 1 is uncertain, so
  // H = 1/2 * ln 2 = 0.34657359028.
  const auto chain = MarkovChain::from_probabilities(3, 1, {0, 1, 0, 0.5, 0, 0.5, 0, 1, 0});
  CHECK(chain.stationary()[0] == Approx(0.25).epsilon(1e-12));
  CHECK(chain.stationary()[1] == Approx(0.5).epsilon(1e-12));
  CHECK(chain.entropy_rate() == Approx(0.34657359028).epsilon(1e-10));
}

TEST_CASE("a chain that mixes too slowly is refused with a hint to add noise", "[unit]") {
  // Two states that switch with probability 1e-9 and 2e-9: the residual shrinks by only
  // 1.5e-9 per iteration, far from 1e-13 after the iteration budget.
  CHECK_THROWS_WITH(MarkovChain::from_probabilities(2, 1, {1 - 1e-9, 1e-9, 2e-9, 1 - 2e-9}),
                    Contains("markov_noise") && Contains("mixes too slowly"));
}

TEST_CASE("markov settings out of range are refused, naming the config key", "[unit]") {
  CHECK_THROWS_WITH(check_markov_settings(1, 2, 1, 0.0), Contains("markov_alphabet in [2, 256]"));
  CHECK_THROWS_WITH(check_markov_settings(257, 1, 1, 0.0), Contains("found 257"));
  CHECK_THROWS_WITH(check_markov_settings(4, 0, 1, 0.0), Contains("markov_order >= 1"));
  CHECK_THROWS_WITH(check_markov_settings(256, 3, 1, 0.0), Contains("2^22"));
  CHECK_THROWS_WITH(check_markov_settings(8, 2, 9, 0.0), Contains("markov_branching in [1, "));
  CHECK_THROWS_WITH(check_markov_settings(8, 2, 0, 0.0), Contains("markov_branching"));
  CHECK_THROWS_WITH(check_markov_settings(8, 2, 2, 1.5), Contains("markov_noise in [0, 1]"));
  CHECK_NOTHROW(check_markov_settings(2, 22, 2, 0.0));
}
