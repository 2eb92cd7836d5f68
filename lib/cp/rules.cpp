#include "cp/rules.hpp"

#include "core/error.hpp"

#include <cstdint>
#include <numeric>
#include <string>

namespace tinyscale::cp {

namespace {
// "train.seq_len = 60 or 66": the multiples of `count` nearest the run's, that the model's
// positions allow (every fix a refusal names must be one the run then accepts).
std::string seq_lens_that_cut(const io::RunConfig& config, std::int64_t count) {
  const std::int64_t below = config.train.seq_len / count * count, above = below + count;
  std::string out;
  if (below >= count) out = std::to_string(below);
  if (above <= config.model.n_positions) out += (out.empty() ? "" : " or ") + std::to_string(above);
  return out.empty() ? "a multiple of " + std::to_string(count) + " (raise model.n_positions)"
                     : out;
}
} // namespace

// The multiple of which train.seq_len must be, for the chunks and, with --sp, for cp x tp parts
// (each of those a multiple of tp): one number, so a suggested length meets every rule at once.
std::int64_t required_multiple(int cp, Split split, int tp, bool sequence_parallel) {
  const std::int64_t count = chunk_count(cp, split);
  return sequence_parallel ? std::lcm(count, static_cast<std::int64_t>(cp) * tp) : count;
}

void check_cp_layout(const io::RunConfig& config, int cp, Split split, int tp,
                     bool sequence_parallel) {
  const int count = chunk_count(cp, split);
  const std::int64_t multiple = required_multiple(cp, split, tp, sequence_parallel);
  // contiguous cuts into cp chunks: a fix only where the sequence then meets every rule
  const bool contiguous_fits =
      split == Split::LoadBalanced &&
      config.train.seq_len % required_multiple(cp, Split::Contiguous, tp, sequence_parallel) == 0;
  TS_CHECK(config.train.seq_len % count == 0,
           "context parallelism: train.seq_len = ", config.train.seq_len, " does not cut into ",
           count, " equal chunks (--cp ", cp, ", ", split_name(split),
           "); set train.seq_len = ", seq_lens_that_cut(config, multiple),
           contiguous_fits ? ", or use --cp-split contiguous" : "");
}

Split parse_split(const std::string& name) {
  if (name == "load-balanced") return Split::LoadBalanced;
  TS_CHECK(name == "contiguous", "context parallelism: expected --cp-split load-balanced or ",
           "contiguous, found '", name, "'");
  return Split::Contiguous;
}

void check_cp_composition(const io::RunConfig& config, int cp, int tp, bool sequence_parallel,
                          int zero, Split split) {
  TS_CHECK(zero <= 1, "--cp ", cp, ": expected it with --zero 0 or 1 (not yet composed with ZeRO ",
           "stages 2 and 3), found --zero ", zero, "; use --zero 1, or leave out --cp");
  TS_CHECK(!sequence_parallel || config.train.seq_len % (cp * tp) == 0, "--cp ", cp,
           " with --sp and --tp ", tp, ": expected train.seq_len to cut into cp x tp = ", cp * tp,
           " equal parts (each tp rank holds a part of its cp rank's positions), found ",
           config.train.seq_len, "; set train.seq_len = ",
           seq_lens_that_cut(config, required_multiple(cp, split, tp, true)));
}

} // namespace tinyscale::cp
