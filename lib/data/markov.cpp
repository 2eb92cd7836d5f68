// The Markov source (chapter 02): a sparse transition table, its stationary distribution by power
// iteration, the exact entropy rate and a counter-based sampler.
#include "data/markov.hpp"

#include "core/error.hpp"
#include "core/rng.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>

namespace tinyscale::data {

namespace {

constexpr std::int64_t kMaxContexts = std::int64_t{1} << 22;
constexpr std::int64_t kMaxTableEntries = std::int64_t{1} << 24; // contexts * branching
constexpr double kStationaryTolerance = 1e-13;                   // |pi P - pi|_1
constexpr int kMaxIterations = 100000;

constexpr std::array<std::uint8_t, 256> symbol_bytes() {
  std::array<std::uint8_t, 256> table{};
  int n = 0;
  auto add = [&](int lo, int hi, bool skip_alnum) {
    for (int b = lo; b <= hi; ++b) {
      const bool alnum = (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9');
      if (!(skip_alnum && alnum)) table[n++] = static_cast<std::uint8_t>(b);
    }
  };
  add('a', 'z', false);
  add('A', 'Z', false);
  add('0', '9', false);
  add(32, 126, true); // space and punctuation
  add(128, 255, false);
  add(0, 31, false);
  add(127, 127, false);
  return table;
}

} // namespace

std::uint8_t markov_symbol_byte(int symbol) {
  static constexpr std::array<std::uint8_t, 256> kBytes = symbol_bytes();
  TS_CHECK(symbol >= 0 && symbol < 256, "markov_symbol_byte: expected a symbol in [0, 256), found ",
           symbol);
  return kBytes[static_cast<std::size_t>(symbol)];
}

void check_markov_settings(int alphabet, int order, int branching, double noise) {
  TS_CHECK(alphabet >= 2 && alphabet <= 256,
           "markov: expected data.markov_alphabet in [2, 256], found ", alphabet);
  TS_CHECK(order >= 1, "markov: expected data.markov_order >= 1, found ", order);
  std::int64_t contexts = 1;
  for (int i = 0; i < order; ++i) {
    contexts *= alphabet;
    TS_CHECK(contexts <= kMaxContexts, "markov: expected markov_alphabet^markov_order <= 2^22 (",
             kMaxContexts, ") contexts, found ", alphabet, "^", order,
             " > 2^22; lower data.markov_order or data.markov_alphabet");
  }
  TS_CHECK(branching >= 1 && branching <= alphabet,
           "markov: expected data.markov_branching in [1, markov_alphabet = ", alphabet,
           "], found ", branching);
  TS_CHECK(contexts * branching <= kMaxTableEntries,
           "markov: expected contexts * branching <= ", kMaxTableEntries, " table entries, found ",
           contexts, " * ", branching, "; lower data.markov_branching or data.markov_order");
  TS_CHECK(noise >= 0 && noise <= 1, "markov: expected data.markov_noise in [0, 1], found ", noise);
}

MarkovChain::MarkovChain(int alphabet, int order, int branching, double noise)
    : alphabet_(alphabet), order_(order), branching_(branching), noise_(noise), contexts_(1) {
  check_markov_settings(alphabet, order, branching, noise);
  for (int i = 0; i < order; ++i) contexts_ *= alphabet;
}

MarkovChain MarkovChain::random(int alphabet, int order, int branching, double noise,
                                std::uint64_t seed) {
  MarkovChain chain(alphabet, order, branching, noise);
  const Philox pick(seed, stream_id("data.markov.successors"));
  const Philox dirichlet(seed, stream_id("data.markov.probs"));
  const auto b = static_cast<std::size_t>(branching);
  chain.successors_.resize(static_cast<std::size_t>(chain.contexts_) * b);
  chain.weights_.resize(chain.successors_.size());
  std::vector<int> perm(static_cast<std::size_t>(alphabet));
  std::iota(perm.begin(), perm.end(), 0);
  std::vector<std::size_t> swapped(b);
  for (std::size_t c = 0; c < static_cast<std::size_t>(chain.contexts_); ++c) {
    // `branching` distinct symbols: a partial Fisher-Yates shuffle, undone afterwards so each
    // context costs O(branching), not O(alphabet).
    double total = 0;
    for (std::size_t j = 0; j < b; ++j) {
      const std::size_t left = perm.size() - j;
      const double u = pick.uniform_at(c * b + j);
      swapped[j] = j + std::min(static_cast<std::size_t>(u * static_cast<double>(left)), left - 1);
      std::swap(perm[j], perm[swapped[j]]);
      chain.successors_[c * b + j] = static_cast<std::uint8_t>(perm[j]);
      chain.weights_[c * b + j] = -std::log(dirichlet.uniform_at(c * b + j)); // Exp(1)
      total += chain.weights_[c * b + j];
    }
    for (std::size_t j = b; j-- > 0;) std::swap(perm[j], perm[swapped[j]]);
    for (std::size_t j = 0; j < b; ++j) chain.weights_[c * b + j] /= total; // Dirichlet(1)
  }
  chain.solve_stationary();
  return chain;
}

MarkovChain MarkovChain::from_probabilities(int alphabet, int order,
                                            const std::vector<double>& probs) {
  MarkovChain chain(alphabet, order, alphabet, 0.0);
  const auto a = static_cast<std::size_t>(alphabet);
  TS_CHECK(probs.size() == static_cast<std::size_t>(chain.contexts_) * a,
           "MarkovChain::from_probabilities: expected contexts * alphabet = ",
           chain.contexts_ * alphabet, " probabilities, found ", probs.size());
  for (std::size_t c = 0; c < static_cast<std::size_t>(chain.contexts_); ++c) {
    double sum = 0;
    for (std::size_t x = 0; x < a; ++x) {
      TS_CHECK(probs[c * a + x] >= 0, "MarkovChain::from_probabilities: expected P(x|c) >= 0, ",
               "found ", probs[c * a + x], " at context ", c, ", symbol ", x);
      sum += probs[c * a + x];
      chain.successors_.push_back(static_cast<std::uint8_t>(x));
      chain.weights_.push_back(probs[c * a + x]);
    }
    TS_CHECK(std::abs(sum - 1.0) < 1e-9,
             "MarkovChain::from_probabilities: expected the row of "
             "context ",
             c, " to sum to 1, found ", sum);
  }
  chain.solve_stationary();
  return chain;
}

double MarkovChain::probability(std::int64_t context, int symbol) const {
  TS_CHECK(context >= 0 && context < contexts_ && symbol >= 0 && symbol < alphabet_,
           "MarkovChain::probability: expected a context in [0, ", contexts_,
           ") and a symbol in [0, ", alphabet_, "), found ", context, " and ", symbol);
  double p = noise_ / alphabet_;
  const auto b = static_cast<std::size_t>(branching_);
  for (std::size_t j = 0; j < b; ++j)
    if (successors_[static_cast<std::size_t>(context) * b + j] == symbol)
      p += (1.0 - noise_) * weights_[static_cast<std::size_t>(context) * b + j];
  return p;
}

std::vector<double> MarkovChain::transition(const std::vector<double>& dist) const {
  const auto n = static_cast<std::size_t>(contexts_);
  const auto a = static_cast<std::size_t>(alphabet_), b = static_cast<std::size_t>(branching_);
  std::vector<double> out(n, 0.0);
  if (noise_ > 0) {
    // A uniform symbol after c leads to (c mod a^(k-1)) * a + x: every context sharing the suffix
    // s = c mod a^(k-1) sends noise / a of its mass to each of s*a .. s*a + a-1.
    std::vector<double> suffix_mass(n / a, 0.0);
    for (std::size_t c = 0; c < n; ++c) suffix_mass[c % (n / a)] += dist[c];
    for (std::size_t c = 0; c < n; ++c) out[c] = noise_ / alphabet_ * suffix_mass[c / a];
  }
  for (std::size_t c = 0; c < n; ++c) {
    const double mass = (1.0 - noise_) * dist[c];
    for (std::size_t j = 0; j < b; ++j)
      out[static_cast<std::size_t>(next_context(
          static_cast<std::int64_t>(c), successors_[c * b + j]))] += mass * weights_[c * b + j];
  }
  return out;
}

void MarkovChain::solve_stationary() {
  // Power iteration on the lazy chain (I + P) / 2: same stationary distribution, but aperiodic,
  // so it converges even for a periodic chain (possible with noise 0), where pi P alone would
  // oscillate. It stops when the residual |pi P - pi|_1 is below the tolerance.
  const auto n = static_cast<std::size_t>(contexts_);
  stationary_.assign(n, 1.0 / static_cast<double>(n));
  double residual = 0;
  for (int iteration = 0; iteration < kMaxIterations; ++iteration) {
    std::vector<double> next = transition(stationary_);
    residual = 0;
    for (std::size_t c = 0; c < n; ++c) {
      residual += std::abs(next[c] - stationary_[c]);
      next[c] = 0.5 * (next[c] + stationary_[c]);
    }
    if (residual < kStationaryTolerance) return;
    const double sum = std::accumulate(next.begin(), next.end(), 0.0);
    for (double& p : next) p /= sum; // keeps rounding from drifting the total away from 1
    stationary_ = std::move(next);
  }
  TS_CHECK(false, "markov: expected the stationary distribution to converge (|pi P - pi|_1 < ",
           kStationaryTolerance, ") within ", kMaxIterations, " iterations, found a residual of ",
           residual,
           "; the chain mixes too slowly: raise data.markov_noise (e.g. to 0.02) or "
           "data.markov_branching");
}

double MarkovChain::entropy_rate() const {
  const auto b = static_cast<std::size_t>(branching_);
  const double floor_p = noise_ / alphabet_; // probability of a symbol outside the successors
  const double outside = floor_p > 0 ? -(alphabet_ - branching_) * floor_p * std::log(floor_p) : 0;
  double rate = 0;
  for (std::size_t c = 0; c < stationary_.size(); ++c) {
    double h = outside;
    for (std::size_t j = 0; j < b; ++j) {
      const double p = (1.0 - noise_) * weights_[c * b + j] + floor_p;
      if (p > 0) h -= p * std::log(p);
    }
    rate += stationary_[c] * h;
  }
  return rate;
}

int MarkovChain::sample(std::int64_t context, double u) const {
  // One uniform picks the mixture branch and the symbol: u < noise is a uniform symbol, otherwise
  // (u - noise) / (1 - noise) is inverted through the cumulative q_c.
  if (u < noise_) return std::min(static_cast<int>(u / noise_ * alphabet_), alphabet_ - 1);
  const double v = (u - noise_) / (1.0 - noise_);
  const auto b = static_cast<std::size_t>(branching_);
  const std::size_t row = static_cast<std::size_t>(context) * b;
  double cumulative = 0;
  std::size_t last_positive = 0;
  for (std::size_t j = 0; j < b; ++j) {
    cumulative += weights_[row + j];
    if (weights_[row + j] > 0) last_positive = j;
    if (v < cumulative) return successors_[row + j];
  }
  return successors_[row + last_positive]; // v beyond a cumulative sum rounded below 1
}

std::vector<std::uint8_t> MarkovChain::generate(std::int64_t n, std::uint64_t seed,
                                                std::uint64_t stream) const {
  TS_CHECK(n >= 0, "MarkovChain::generate: expected n >= 0, found ", n);
  const Philox rng(seed, stream);
  std::vector<std::uint8_t> out;
  out.reserve(static_cast<std::size_t>(n));
  // Value 0 of the stream draws the first context from pi; value t draws symbol t (t >= order).
  const double u0 = rng.uniform_at(0);
  std::int64_t context = contexts_ - 1;
  double cumulative = 0;
  for (std::int64_t c = 0; c < contexts_; ++c) {
    cumulative += stationary_[static_cast<std::size_t>(c)];
    if (u0 < cumulative) {
      context = c;
      break;
    }
  }
  std::int64_t place = contexts_ / alphabet_; // the oldest symbol is the highest digit
  for (int i = 0; i < order_ && std::ssize(out) < n; ++i, place /= alphabet_)
    out.push_back(static_cast<std::uint8_t>(context / place % alphabet_));
  for (std::int64_t t = order_; t < n; ++t) {
    const int symbol = sample(context, rng.uniform_at(static_cast<std::uint64_t>(t)));
    out.push_back(static_cast<std::uint8_t>(symbol));
    context = next_context(context, symbol);
  }
  return out;
}

} // namespace tinyscale::data
