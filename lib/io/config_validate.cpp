// Run-config validation (chapter 02): the model checks itself; optimizer, data and training
// settings, and the checks that span sections, are here.
#include "io/config_validate.hpp"

#include "core/error.hpp"

#include <cmath>
#include <cstdint>
#include <limits>

namespace tinyscale::io {

namespace {

void validate_optim(const optim::OptimConfig& o) {
  TS_CHECK(o.lr > 0, "optim.lr: expected > 0, found ", o.lr);
  TS_CHECK(o.min_lr >= 0 && o.min_lr <= o.lr,
           "optim.min_lr: expected a value in [0, optim.lr = ", o.lr, "], found ", o.min_lr,
           "; the cosine decay ends at min_lr, so lower it");
  TS_CHECK(o.warmup_steps >= 0, "optim.warmup_steps: expected >= 0, found ", o.warmup_steps);
  TS_CHECK(o.decay_steps >= 0, "optim.decay_steps: expected >= 0 (0 = until train.steps), found ",
           o.decay_steps);
  TS_CHECK(o.beta1 >= 0 && o.beta1 < 1, "optim.beta1: expected a value in [0, 1), found ", o.beta1);
  TS_CHECK(o.beta2 >= 0 && o.beta2 < 1, "optim.beta2: expected a value in [0, 1), found ", o.beta2);
  TS_CHECK(o.eps > 0, "optim.eps: expected > 0, found ", o.eps);
  TS_CHECK(o.weight_decay >= 0, "optim.weight_decay: expected >= 0, found ", o.weight_decay);
}

void validate_data(const data::DataConfig& d) {
  const bool known = d.source == "markov" || d.source == "text" || d.source == "shards";
  TS_CHECK(known, "data.source: expected \"markov\", \"text\" or \"shards\", found \"", d.source,
           "\"");
  TS_CHECK(d.source == "markov" || !d.path.empty(),
           "data.path: expected a path for data.source = \"", d.source,
           "\", found an empty string; set data.path");
  TS_CHECK(d.val_fraction >= 0 && d.val_fraction < 1,
           "data.val_fraction: expected a value in [0, 1), found ", d.val_fraction);
  TS_CHECK(d.seed <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()),
           "data.seed: expected at most 2^63 - 1 (TOML integers are signed 64-bit), found ",
           d.seed);
  TS_CHECK(d.markov_alphabet >= 1 && d.markov_alphabet <= 256,
           "data.markov_alphabet: expected 1..256 symbols, found ", d.markov_alphabet);
  TS_CHECK(d.markov_order >= 1, "data.markov_order: expected >= 1, found ", d.markov_order);
  TS_CHECK(d.markov_branching >= 1 && d.markov_branching <= d.markov_alphabet,
           "data.markov_branching: expected 1..data.markov_alphabet = ", d.markov_alphabet,
           ", found ", d.markov_branching);
  TS_CHECK(d.markov_noise >= 0 && d.markov_noise <= 1,
           "data.markov_noise: expected a probability in [0, 1], found ", d.markov_noise);
  TS_CHECK(d.markov_train_tokens > 0, "data.markov_train_tokens: expected > 0, found ",
           d.markov_train_tokens);
  TS_CHECK(d.markov_val_tokens > 0, "data.markov_val_tokens: expected > 0, found ",
           d.markov_val_tokens);
}

void validate_train(const train::TrainConfig& t, const nn::ModelConfig& model) {
  TS_CHECK(t.steps > 0, "train.steps: expected > 0, found ", t.steps);
  TS_CHECK(t.batch_size > 0, "train.batch_size: expected > 0, found ", t.batch_size);
  (void)nn::parse_recompute(t.recompute); // names the three modes
  TS_CHECK(
      t.recompute_blocks >= -1 && t.recompute_blocks <= model.n_layer,
      "train.recompute_blocks: expected -1 (every block) or 0..model.n_layer = ", model.n_layer,
      " (the first N blocks of each pipeline stage), found ", t.recompute_blocks);
  TS_CHECK(t.recompute_blocks == -1 || t.recompute != "none",
           "train.recompute_blocks = ", t.recompute_blocks,
           ": expected train.recompute = \"selective\" or \"full\" to choose ",
           "what those blocks recompute, found \"none\"; set train.recompute or leave ",
           "train.recompute_blocks at -1");
  TS_CHECK(std::isfinite(t.memory_cap_mib) && t.memory_cap_mib >= 0,
           "train.memory_cap_mib: expected 0 (no cap) or a positive number of MiB, found ",
           t.memory_cap_mib);
  TS_CHECK(t.micro_batches > 0, "train.micro_batches: expected > 0, found ", t.micro_batches);
  TS_CHECK(t.batch_size % t.micro_batches == 0, "train.batch_size: expected a multiple of ",
           "train.micro_batches = ", t.micro_batches, ", found ", t.batch_size,
           "; each micro-batch must hold the same number of sequences");
  TS_CHECK(t.seq_len > 0 && t.seq_len <= model.n_positions,
           "train.seq_len: expected 1..model.n_positions = ", model.n_positions, ", found ",
           t.seq_len, "; shorten seq_len or raise model.n_positions");
  TS_CHECK(t.seed <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()),
           "train.seed: expected at most 2^63 - 1 (TOML integers are signed 64-bit), found ",
           t.seed);
  TS_CHECK(t.eval_every >= 0, "train.eval_every: expected >= 0, found ", t.eval_every);
  TS_CHECK(t.eval_batches > 0, "train.eval_batches: expected > 0, found ", t.eval_batches);
  TS_CHECK(t.log_every > 0, "train.log_every: expected > 0, found ", t.log_every);
  TS_CHECK(t.checkpoint_every >= 0, "train.checkpoint_every: expected >= 0 (0 = never), found ",
           t.checkpoint_every);
  TS_CHECK(t.checkpoint_keep_last >= 0,
           "train.checkpoint_keep_last: expected >= 0 (0 = keep every checkpoint), found ",
           t.checkpoint_keep_last);
  TS_CHECK(t.checkpoint_keep_every >= 0 &&
               (t.checkpoint_keep_every == 0 || t.checkpoint_keep_last > 0),
           "train.checkpoint_keep_every: expected 0, or N > 0 together with "
           "train.checkpoint_keep_last > 0 (it keeps every N-th step of those keep_last would "
           "delete), found ",
           t.checkpoint_keep_every, " with train.checkpoint_keep_last = ", t.checkpoint_keep_last);
  TS_CHECK(t.checkpoint_every == 0 || !t.checkpoint_dir.empty(),
           "train.checkpoint_dir: expected a directory when train.checkpoint_every > 0, found an ",
           "empty string");
  TS_CHECK(t.peak_gflops >= 0, "train.peak_gflops: expected >= 0 (0 = look up), found ",
           t.peak_gflops);
  TS_CHECK(t.threads >= 0 && t.threads <= 4096,
           "train.threads: expected 0 (the default: TINYSCALE_THREADS, else the cores divided by "
           "the ranks on this machine) or 1..4096 threads per rank, found ",
           t.threads);
}

} // namespace

void validate_run_config(const RunConfig& run) {
  run.model.validate();
  validate_optim(run.optim);
  validate_data(run.data);
  validate_train(run.train, run.model);
  TS_CHECK(run.optim.decay_steps > 0 || run.optim.warmup_steps <= run.train.steps,
           "optim.warmup_steps: expected at most train.steps = ", run.train.steps,
           " (the cosine decay runs over the steps after warm-up), found ", run.optim.warmup_steps,
           "; lower optim.warmup_steps or raise train.steps");
  TS_CHECK(!run.optim.offload || run.train.device != "cpu",
           "optim.offload: expected train.device = \"emu\" or \"cuda\" (offload moves AdamW's ",
           "state from the device to the host), found \"cpu\", where it is in host memory ",
           "already; set optim.offload = false");
}

} // namespace tinyscale::io
