#include "cp/rules.hpp"

#include "core/error.hpp"

namespace tinyscale::cp {

void check_cp_layout(const io::RunConfig& config, int cp, Split split) {
  const int count = chunk_count(cp, split);
  TS_CHECK(config.train.seq_len % count == 0,
           "context parallelism: train.seq_len = ", config.train.seq_len, " does not cut into ",
           count, " equal chunks (--cp ", cp, ", ", split_name(split),
           "); choose train.seq_len as a multiple of ", count,
           split == Split::LoadBalanced ? ", or --cp-split contiguous" : "");
}

Split parse_split(const std::string& name) {
  if (name == "load-balanced") return Split::LoadBalanced;
  TS_CHECK(name == "contiguous", "context parallelism: expected --cp-split load-balanced or ",
           "contiguous, found '", name, "'");
  return Split::Contiguous;
}

void check_cp_composition(const io::RunConfig& config, int cp, int tp, bool sequence_parallel,
                          int zero) {
  TS_CHECK(zero <= 1, "--cp ", cp, ": expected it with --zero 0 or 1 (not yet composed with ZeRO ",
           "stages 2 and 3), found --zero ", zero, "; use --zero 1, or leave out --cp");
  TS_CHECK(!sequence_parallel || config.train.seq_len % (cp * tp) == 0, "--cp ", cp,
           " with --sp and --tp ", tp, ": expected train.seq_len to cut into cp x tp = ", cp * tp,
           " equal parts (each tp rank holds a part of its cp rank's positions), found ",
           config.train.seq_len, "; choose a multiple of ", cp * tp);
}

} // namespace tinyscale::cp
