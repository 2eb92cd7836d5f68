// The training loop (chapter 02): a resumed run reproduces the uninterrupted run bit for bit,
// micro-batching equals the whole batch, and a corrupted checkpoint stops a resume with a clear
// error instead of training from garbage.
#include "io/hf_export.hpp"
#include "require_ts_error.hpp"
#include "tinyscale.hpp"
#include "train/run.hpp"
#include "train/trainer.hpp"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

using namespace tinyscale;
namespace fs = std::filesystem;

namespace {
io::RunConfig small_run(const std::string& checkpoint_dir) {
  io::RunConfig c;
  c.model.vocab_size = 256;
  c.model.n_positions = 16;
  c.model.n_layer = 2;
  c.model.n_head = 2;
  c.model.n_embd = 16;
  c.model.dropout = 0.1; // exercise the dropout streams across the resume
  c.data.markov_train_tokens = 4096;
  c.data.markov_val_tokens = 1024;
  c.train.steps = 6;
  c.train.batch_size = 4;
  c.train.seq_len = 16;
  c.train.eval_batches = 2;
  c.train.checkpoint_dir = checkpoint_dir;
  c.optim.warmup_steps = 2;
  return c;
}

fs::path fresh_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("tinyscale_test_" + name);
  fs::remove_all(dir);
  return dir;
}
} // namespace

TEST_CASE("A resumed run reproduces the uninterrupted run's losses and parameters bit for bit",
          "[unit][train][emu]") {
  const fs::path dir = fresh_dir("resume");
  io::RunConfig config = small_run(dir.string());
  SECTION("dense") {}
  SECTION("MoE with dropping") { config.model.moe = {2, 3, 2, 0.8, 1e-2, 1e-3}; }
  SECTION("dense, on the emulated device: the checkpoint goes through the host and back") {
    config.train.device = "emu";
  }
  train::Trainer straight(config);
  std::vector<double> expected;
  for (int i = 0; i < 6; ++i) expected.push_back(straight.train_step().loss);

  train::Trainer first(config);
  for (int i = 0; i < 3; ++i)
    CHECK(first.train_step().loss == expected[static_cast<std::size_t>(i)]);
  first.save_checkpoint();
  train::Trainer second(config); // a new process would start exactly like this
  second.resume(dir.string());
  CHECK(second.step() == 3);
  for (int i = 3; i < 6; ++i)
    CHECK(second.train_step().loss == expected[static_cast<std::size_t>(i)]);
  for (std::size_t i = 0; i < straight.model().parameters().size(); ++i)
    CHECK(straight.model().parameters()[i].tensor.to_vector() ==
          second.model().parameters()[i].tensor.to_vector());
  CHECK(second.evaluate() == straight.evaluate());
  fs::remove_all(dir);
}

// float64: the attention key bias has an exactly zero gradient (a constant added to every key
// shifts all scores of a query equally), so in fp32 its gradient is rounding noise that AdamW
// normalises into lr-sized steps of random sign. Any regrouping of the sums (micro-batches here,
// data parallelism in chapter 04) then moves those biases apart by ~lr * noise / eps.
TEST_CASE("Gradient accumulation over micro-batches equals one batch (float64, rel. error 1e-10)",
          "[unit][train]") {
  io::RunConfig config = small_run(fresh_dir("micro").string());
  config.model.dropout = 0.1; // masks follow the global row, so they agree too
  config.model.dtype = DType::Float64;
  train::Trainer whole(config);
  config.train.micro_batches = 2;
  train::Trainer split(config);
  for (int i = 0; i < 3; ++i) {
    const auto a = whole.train_step(), b = split.train_step();
    CHECK(b.loss == Approx(a.loss).epsilon(1e-12));
    CHECK(b.grad_norm == Approx(a.grad_norm).epsilon(1e-10));
  }
  for (std::size_t i = 0; i < whole.model().parameters().size(); ++i) {
    auto a = whole.model().parameters()[i].tensor.to_vector();
    auto b = split.model().parameters()[i].tensor.to_vector();
    double worst = 0, scale = 0;
    for (std::size_t j = 0; j < a.size(); ++j)
      worst = std::max(worst, std::abs(a[j] - b[j])), scale = std::max(scale, std::abs(a[j]));
    INFO(whole.model().parameters()[i].name);
    CHECK(worst <= 1e-10 * std::max(scale, 1e-3));
  }
}

TEST_CASE("Resuming from a corrupted checkpoint fails with a clear error", "[unit][train]") {
  const fs::path dir = fresh_dir("corrupt");
  io::RunConfig config = small_run(dir.string());
  train::Trainer t(config);
  t.train_step();
  const fs::path step_dir = t.save_checkpoint();
  const fs::path model = step_dir / "model.safetensors";
  {
    std::fstream f(model, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(model) / 2));
    f.put('\x7f');
  }
  train::Trainer again(config);
  CHECK_THROWS_WITH(again.resume(dir.string()), Catch::Contains("model.safetensors"));
  fs::resize_file(model, fs::file_size(model) - 100);
  CHECK_THROWS_WITH(again.resume(dir.string()), Catch::Contains("model.safetensors"));
  // a checkpoint of another model shape is refused by name
  io::RunConfig wider = config;
  wider.model.n_embd = 32;
  wider.train.checkpoint_dir = (dir / "other").string();
  train::Trainer w(wider);
  w.save_checkpoint();
  CHECK_THROWS_WITH(again.resume((dir / "other").string()),
                    Catch::Contains("model.n_embd = 32 in the checkpoint, 16 now"));
  fs::remove_all(dir);
}

TEST_CASE(
    "Resume refuses a changed run but accepts changed logging, checkpoint and thread settings",
    "[unit][train]") {
  const fs::path dir = fresh_dir("resume_config");
  io::RunConfig config = small_run(dir.string());
  train::Trainer t(config);
  t.train_step();
  t.save_checkpoint();
  io::RunConfig other = config;
  other.train.batch_size = 8; // other data rows: not the interrupted run
  other.train.steps = 7;      // another cosine schedule
  train::Trainer refused(other);
  CHECK_THROWS_WITH(refused.resume(dir.string()),
                    Catch::Contains("train.batch_size = 4 in the checkpoint, 8 now") &&
                        Catch::Contains("train.steps = 6 in the checkpoint, 7 now"));
  CHECK(refused.step() == 0); // nothing was restored
  io::RunConfig chatty = config;
  chatty.train.log_every = 1;
  chatty.train.eval_batches = 1;
  chatty.train.threads = 3; // threads change no result (chapter 02, section 6.8)
  train::Trainer accepted(chatty);
  accepted.resume(dir.string());
  CHECK(accepted.step() == 1);
  fs::remove_all(dir);
}

TEST_CASE("A trained model exported to Hugging Face GPT-2 layout re-imports bit for bit",
          "[unit][train]") {
  const fs::path dir = fresh_dir("export");
  io::RunConfig config = small_run((dir / "ckpt").string());
  train::Trainer t(config);
  t.train_step();
  io::export_hf((dir / "hf").string(), config.model, t.model().parameters());
  io::HfModel back = io::import_hf((dir / "hf").string());
  CHECK(back.config.n_embd == config.model.n_embd);
  CHECK(back.config.n_layer == config.model.n_layer);
  CHECK(back.tensors.size() == t.model().parameters().size());
  for (const auto& [name, tensor] : back.tensors) {
    INFO(name);
    CHECK(tensor.to_vector() ==
          nn::find_parameter(t.model().parameters(), name).tensor.to_vector());
  }
  fs::remove_all(dir);
}

TEST_CASE("train::formatted prints any length and refuses what printf cannot encode",
          "[unit][train]") {
  const std::string long_text(1000, 'x'); // longer than the fixed buffers it replaced
  CHECK(train::formatted("%s|%d|%lld|%.2f", long_text.c_str(), 7, 123456789012LL, 0.5) ==
        long_text + "|7|123456789012|0.50");
  CHECK(train::formatted("%s", "").empty());
  // In the C locale (a test binary never calls setlocale) a wide character past ASCII has no
  // encoding: printf returns -1, which must not become a huge length.
  REQUIRE_TS_ERROR(train::formatted("%ls", L"\u00e9"),
                   Catch::Contains("train::formatted") && Catch::Contains("encoding error"));
}
