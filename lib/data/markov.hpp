// A seeded order-k Markov chain whose entropy rate is known exactly (chapter 02): the "markov"
// data source. A model's validation loss can never go below that rate, so a training curve gets
// a true floor to compare against. The easy thing to get wrong: the rate weights each context's
// entropy by the *stationary* probability of the context, not by 1 / contexts.
#pragma once

#include <cstdint>
#include <vector>

namespace tinyscale::data {

/// The byte that encodes Markov symbol `symbol` (0..255): 'a'..'z', 'A'..'Z', '0'..'9', the other
/// printable ASCII bytes, then bytes 128..255, then control bytes; a permutation of all 256.
std::uint8_t markov_symbol_byte(int symbol);

/// Throws unless the settings describe a chain MarkovChain can build: alphabet in [2, 256],
/// order >= 1 with alphabet^order <= 2^22 contexts, branching in [1, alphabet],
/// contexts * branching <= 2^24 and noise in [0, 1].
void check_markov_settings(int alphabet, int order, int branching, double noise);

/// P(x | c) = (1 - noise) * q_c(x) + noise / alphabet over contexts c of the last `order` symbols.
class MarkovChain {
public:
  /// A random chain: each context gets `branching` distinct next symbols with Dirichlet(1)
  /// probabilities q_c, all drawn from Philox streams of `seed`.
  static MarkovChain random(int alphabet, int order, int branching, double noise,
                            std::uint64_t seed);
  /// A chain with given probabilities: probs[c * alphabet + x] = P(x | c), each row summing to 1.
  static MarkovChain from_probabilities(int alphabet, int order, const std::vector<double>& probs);

  /// Number of symbols.
  int alphabet() const { return alphabet_; }
  /// Context length k.
  int order() const { return order_; }
  /// Number of contexts, alphabet^order.
  std::int64_t contexts() const { return contexts_; }
  /// The context after `context` emits `symbol`; the newest symbol is the lowest base-alphabet
  /// digit.
  std::int64_t next_context(std::int64_t context, int symbol) const {
    return (context * alphabet_ + symbol) % contexts_;
  }
  /// P(symbol | context).
  double probability(std::int64_t context, int symbol) const;
  /// The stationary distribution over contexts (power iteration until |pi P - pi|_1 < 1e-13).
  const std::vector<double>& stationary() const { return stationary_; }
  /// pi P: one step of the chain applied to a distribution over contexts.
  std::vector<double> transition(const std::vector<double>& dist) const;
  /// -sum_c pi(c) sum_x P(x|c) log P(x|c), in nats per symbol.
  double entropy_rate() const;
  /// n symbols from Philox(seed, stream): the first context drawn from the stationary
  /// distribution (so the stream is stationary from its first symbol), then the chain.
  std::vector<std::uint8_t> generate(std::int64_t n, std::uint64_t seed,
                                     std::uint64_t stream) const;

private:
  MarkovChain(int alphabet, int order, int branching, double noise);
  void solve_stationary();
  int sample(std::int64_t context, double u) const;

  int alphabet_, order_, branching_;
  double noise_;
  std::int64_t contexts_;
  std::vector<std::uint8_t> successors_; // [contexts, branching] next symbols of q_c
  std::vector<double> weights_;          // [contexts, branching] q_c of those symbols
  std::vector<double> stationary_;
};

} // namespace tinyscale::data
