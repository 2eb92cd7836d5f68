// Chapter 02, run configs: every key round-trips through TOML, a typo is an error that names the
// file, the line and the nearest valid key, ill-typed values name both types, and the docs in
// configs/README.md cannot drift from the key registry.
#include "io/config.hpp"
#include "io/config_keys.hpp"
#include "require_ts_error.hpp"
#include "scratch_dir.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

using namespace tinyscale;
using namespace tinyscale::io;
using Catch::Contains;

namespace {

// Every field set to a valid value different from its default.
RunConfig every_field_changed() {
  RunConfig c;
  c.model.vocab_size = 512;
  c.model.n_positions = 128;
  c.model.n_layer = 3;
  c.model.n_head = 4;
  c.model.n_embd = 96;
  c.model.bias = false;
  c.model.dropout = 0.1 + 0.2; // not exactly 0.3: the text must keep all 17 digits
  c.model.layer_norm_epsilon = 1e-6;
  c.model.initializer_range = 0.01;
  c.model.dtype = DType::Float64;
  c.model.moe.every = 2;
  c.model.moe.n_experts = 4;
  c.model.moe.top_k = 2;
  c.model.moe.capacity_factor = -1;
  c.model.moe.aux_loss_coeff = 0.05;
  c.model.moe.z_loss_coeff = 0.0;
  c.optim.lr = 3e-4;
  c.optim.min_lr = 3e-5;
  c.optim.warmup_steps = 7;
  c.optim.decay_steps = 70;
  c.optim.beta1 = 0.8;
  c.optim.beta2 = 0.99;
  c.optim.eps = 1e-10;
  c.optim.weight_decay = 0.0;
  c.optim.grad_clip = 0.0;
  c.data.source = "text";
  c.data.path = "data/\"quoted\" \\ path.txt";
  c.data.val_path = "val.txt";
  c.data.val_fraction = 0.25;
  c.data.seed = 99;
  c.data.markov_alphabet = 20;
  c.data.markov_order = 3;
  c.data.markov_branching = 5;
  c.data.markov_noise = 0.5;
  c.data.markov_train_tokens = 1000;
  c.data.markov_val_tokens = 100;
  c.train.steps = 10;
  c.train.batch_size = 12;
  c.train.seq_len = 100;
  c.train.micro_batches = 3;
  c.train.seed = 7;
  c.train.eval_every = 5;
  c.train.eval_batches = 2;
  c.train.log_every = 1;
  c.train.checkpoint_every = 5;
  c.train.checkpoint_dir = "ckpt";
  c.train.peak_gflops = 1234.5;
  return c;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

} // namespace

TEST_CASE("a config with every field changed survives to_toml and parse_config unchanged",
          "[unit]") {
  const RunConfig c = every_field_changed();
  const RunConfig r = parse_config(to_toml(c), "roundtrip.toml");
  CHECK(r.model.vocab_size == c.model.vocab_size);
  CHECK(r.model.n_positions == c.model.n_positions);
  CHECK(r.model.n_layer == c.model.n_layer);
  CHECK(r.model.n_head == c.model.n_head);
  CHECK(r.model.n_embd == c.model.n_embd);
  CHECK(r.model.bias == c.model.bias);
  CHECK(r.model.dropout == c.model.dropout);
  CHECK(r.model.layer_norm_epsilon == c.model.layer_norm_epsilon);
  CHECK(r.model.initializer_range == c.model.initializer_range);
  CHECK(r.model.dtype == c.model.dtype);
  CHECK(r.model.moe.every == c.model.moe.every);
  CHECK(r.model.moe.n_experts == c.model.moe.n_experts);
  CHECK(r.model.moe.top_k == c.model.moe.top_k);
  CHECK(r.model.moe.capacity_factor == c.model.moe.capacity_factor);
  CHECK(r.model.moe.aux_loss_coeff == c.model.moe.aux_loss_coeff);
  CHECK(r.model.moe.z_loss_coeff == c.model.moe.z_loss_coeff);
  CHECK(r.optim.lr == c.optim.lr);
  CHECK(r.optim.min_lr == c.optim.min_lr);
  CHECK(r.optim.warmup_steps == c.optim.warmup_steps);
  CHECK(r.optim.decay_steps == c.optim.decay_steps);
  CHECK(r.optim.beta1 == c.optim.beta1);
  CHECK(r.optim.beta2 == c.optim.beta2);
  CHECK(r.optim.eps == c.optim.eps);
  CHECK(r.optim.weight_decay == c.optim.weight_decay);
  CHECK(r.optim.grad_clip == c.optim.grad_clip);
  CHECK(r.data.source == c.data.source);
  CHECK(r.data.path == c.data.path);
  CHECK(r.data.val_path == c.data.val_path);
  CHECK(r.data.val_fraction == c.data.val_fraction);
  CHECK(r.data.seed == c.data.seed);
  CHECK(r.data.markov_alphabet == c.data.markov_alphabet);
  CHECK(r.data.markov_order == c.data.markov_order);
  CHECK(r.data.markov_branching == c.data.markov_branching);
  CHECK(r.data.markov_noise == c.data.markov_noise);
  CHECK(r.data.markov_train_tokens == c.data.markov_train_tokens);
  CHECK(r.data.markov_val_tokens == c.data.markov_val_tokens);
  CHECK(r.train.steps == c.train.steps);
  CHECK(r.train.batch_size == c.train.batch_size);
  CHECK(r.train.seq_len == c.train.seq_len);
  CHECK(r.train.micro_batches == c.train.micro_batches);
  CHECK(r.train.seed == c.train.seed);
  CHECK(r.train.eval_every == c.train.eval_every);
  CHECK(r.train.eval_batches == c.train.eval_batches);
  CHECK(r.train.log_every == c.train.log_every);
  CHECK(r.train.checkpoint_every == c.train.checkpoint_every);
  CHECK(r.train.checkpoint_dir == c.train.checkpoint_dir);
  CHECK(r.train.peak_gflops == c.train.peak_gflops);
  CHECK(to_toml(r) == to_toml(c));
}

TEST_CASE("every registry key appears in to_toml output, and an empty file gives the defaults",
          "[unit]") {
  const std::string text = to_toml(RunConfig{});
  for (const ConfigKey& key : config_keys()) {
    std::string header = "[";
    header += key.section();
    header += "]";
    std::string assignment(key.name.substr(key.section().size() + 1));
    assignment += " = ";
    INFO(key.name);
    CHECK_THAT(text, Contains(header) && Contains(assignment));
  }
  const RunConfig empty = parse_config("", "empty.toml");
  CHECK(to_toml(empty) == text);
  CHECK(empty.model.n_embd == nn::ModelConfig{}.n_embd);
  CHECK(empty.train.checkpoint_dir == "checkpoints");
}

TEST_CASE("a misspelt key names the file, the line, the key and the nearest valid key", "[unit]") {
  const std::string text = "[model]\nn_layer = 2\nn_emdb = 64\n";
  REQUIRE_TS_ERROR(parse_config(text, "run.toml"), Contains("run.toml:3") &&
                                                       Contains("unknown key 'model.n_emdb'") &&
                                                       Contains("did you mean 'model.n_embd'?"));
  REQUIRE_TS_ERROR(parse_config("[modle]\nn_embd = 64\n", "run.toml"),
                   Contains("run.toml:1") && Contains("unknown section 'modle'") &&
                       Contains("did you mean 'model'?"));
  // The right name in the wrong section points at the section that has it.
  REQUIRE_TS_ERROR(parse_config("[optim]\nseq_len = 32\n", "run.toml"),
                   Contains("did you mean 'train.seq_len'?"));
  REQUIRE_TS_ERROR(parse_config("[model.moe]\ntopk = 2\n", "run.toml"),
                   Contains("did you mean 'model.moe.top_k'?"));
  // A key cut short points at the key it begins.
  REQUIRE_TS_ERROR(parse_config("[model.moe]\ncapacity = 1.0\n", "run.toml"),
                   Contains("did you mean 'model.moe.capacity_factor'?"));
}

TEST_CASE("every problem of a file is reported at once, in line order", "[unit]") {
  const std::string text = "[train]\nstep = 3\n\n[model]\nn_embd = 1.5\n";
  REQUIRE_TS_ERROR(parse_config(text, "run.toml"),
                   Contains("run.toml:2") && Contains("train.step") && Contains("run.toml:5") &&
                       Contains("model.n_embd"));
}

TEST_CASE("an ill-typed value names the expected and the found type", "[unit]") {
  REQUIRE_TS_ERROR(parse_config("[model]\nn_embd = \"64\"\n", "t.toml"),
                   Contains("t.toml:2") && Contains("model.n_embd") &&
                       Contains("expected an integer") && Contains("found a string"));
  REQUIRE_TS_ERROR(parse_config("[model]\nn_layer = 2.0\n", "t.toml"),
                   Contains("expected an integer") && Contains("found a float"));
  REQUIRE_TS_ERROR(parse_config("[model]\nbias = 1\n", "t.toml"),
                   Contains("expected a boolean") && Contains("found an integer"));
  REQUIRE_TS_ERROR(parse_config("[model]\ndtype = \"float16\"\n", "t.toml"),
                   Contains("\"float32\" or \"float64\"") && Contains("float16"));
  REQUIRE_TS_ERROR(parse_config("[data]\nseed = -1\n", "t.toml"),
                   Contains("data.seed") && Contains("non-negative integer"));
  REQUIRE_TS_ERROR(parse_config("[model]\nn_layer = 4294967296\n", "t.toml"),
                   Contains("model.n_layer") && Contains("32 bits"));
  REQUIRE_TS_ERROR(parse_config("model = 3\n", "t.toml"),
                   Contains("model") && Contains("expected a section"));
}

TEST_CASE("floats accept integers, and model.dtype reads float32 and float64", "[unit]") {
  const RunConfig c =
      parse_config("[optim]\nlr = 1\nmin_lr = 0\n[model]\ndtype = \"float64\"\n", "t.toml");
  CHECK(c.optim.lr == 1.0);
  CHECK(c.optim.min_lr == 0.0);
  CHECK(c.model.dtype == DType::Float64);
}

TEST_CASE("a TOML syntax error names the file, line and column", "[unit]") {
  REQUIRE_TS_ERROR(parse_config("[model]\nn_embd = = 3\n", "bad.toml"),
                   Contains("bad.toml:2") && Contains("expected valid TOML"));
}

TEST_CASE("overrides take TOML values, bare strings for string keys, in order", "[unit]") {
  const RunConfig c =
      parse_config("[model]\nn_embd = 32\n", "t.toml",
                   {"model.n_embd=128", "model.n_embd = 256", "data.source=text",
                    "data.path=/tmp/a b.txt", "optim.lr=3e-4", "model.dtype=float64",
                    "model.bias=false", "data.val_path=\"v.txt\"", "train.checkpoint_dir=123"});
  CHECK(c.model.n_embd == 256);
  CHECK(c.data.source == "text");
  CHECK(c.data.path == "/tmp/a b.txt");
  CHECK(c.optim.lr == 3e-4);
  CHECK(c.model.dtype == DType::Float64);
  CHECK_FALSE(c.model.bias);
  CHECK(c.data.val_path == "v.txt");
  CHECK(c.train.checkpoint_dir == "123");
}

TEST_CASE("a bad override names the override and suggests the nearest key", "[unit]") {
  REQUIRE_TS_ERROR(parse_config("", "t.toml", {"model.n_emb=64"}),
                   Contains("override 'model.n_emb=64'") &&
                       Contains("did you mean 'model.n_embd'?"));
  REQUIRE_TS_ERROR(parse_config("", "t.toml", {"model.n_embd=abc"}),
                   Contains("model.n_embd") && Contains("expected a TOML integer") &&
                       Contains("abc"));
  REQUIRE_TS_ERROR(parse_config("", "t.toml", {"model.n_embd=1.5"}),
                   Contains("expected an integer") && Contains("found a float"));
  REQUIRE_TS_ERROR(parse_config("", "t.toml", {"model.n_embd"}), Contains("no '='"));
  // An override sets a key, so a section name is never the suggestion.
  REQUIRE_TS_ERROR(parse_config("", "t.toml", {"model=3"}),
                   Contains("unknown key 'model'") && !Contains("did you mean 'model'?"));
  REQUIRE_TS_ERROR(parse_config("", "t.toml", {"model.dtype=int64"}),
                   Contains("\"float32\" or \"float64\""));
}

TEST_CASE("validation runs after the overrides and checks across sections", "[unit]") {
  REQUIRE_TS_ERROR(parse_config("[train]\nseq_len = 65\n", "t.toml"),
                   Contains("t.toml") && Contains("train.seq_len") &&
                       Contains("model.n_positions = 64") && Contains("65"));
  REQUIRE_TS_ERROR(parse_config("", "t.toml", {"train.micro_batches=3"}),
                   Contains("with overrides") && Contains("train.batch_size") &&
                       Contains("micro_batches = 3"));
  REQUIRE_TS_ERROR(parse_config("[optim]\nlr = 1e-4\nmin_lr = 1e-3\n", "t.toml"),
                   Contains("optim.min_lr"));
  REQUIRE_TS_ERROR(parse_config("[optim]\nbeta2 = 1.0\n", "t.toml"),
                   Contains("optim.beta2") && Contains("[0, 1)"));
  REQUIRE_TS_ERROR(parse_config("[train]\nsteps = 0\n", "t.toml"), Contains("train.steps"));
  REQUIRE_TS_ERROR(parse_config("[train]\nsteps = 5\n[optim]\nwarmup_steps = 6\n", "t.toml"),
                   Contains("optim.warmup_steps: expected at most train.steps = 5"));
  REQUIRE_TS_ERROR(parse_config("[model]\nn_embd = 63\n", "t.toml"), Contains("model.n_embd"));
  REQUIRE_TS_ERROR(parse_config("[data]\nsource = \"csv\"\n", "t.toml"), Contains("data.source"));
  REQUIRE_TS_ERROR(parse_config("[data]\nsource = \"text\"\n", "t.toml"), Contains("data.path"));
}

TEST_CASE("load_config reads a file and names a missing one", "[unit]") {
  testing::ScratchDir dir;
  {
    std::ofstream out(dir / "run.toml");
    out << "[train]\nsteps = 5\n[optim]\nwarmup_steps = 2\n";
  }
  const RunConfig c = load_config(dir / "run.toml", {"train.log_every=5"});
  CHECK(c.train.steps == 5);
  CHECK(c.train.log_every == 5);
  REQUIRE_TS_ERROR(load_config(dir / "missing.toml"), Contains("missing.toml"));
}

TEST_CASE("describe_keys has one aligned row per key with its type and default", "[unit]") {
  const std::string table = describe_keys();
  std::istringstream lines(table);
  std::string header;
  std::getline(lines, header);
  CHECK_THAT(header, Contains("key") && Contains("type") && Contains("default"));
  const auto doc_column = header.find("doc");
  std::size_t rows = 0;
  for (std::string line; std::getline(lines, line); ++rows) CHECK(line.size() > doc_column);
  CHECK(rows == config_keys().size());
  CHECK_THAT(table, Contains("model.n_embd") && Contains("integer") && Contains("64"));
  CHECK_THAT(table, Contains("model.dtype") && Contains("\"float32\""));
}

TEST_CASE("configs/README.md documents every config key", "[unit]") {
  const std::string readme = read_text(std::string(TINYSCALE_SOURCE_DIR) + "/configs/README.md");
  REQUIRE_FALSE(readme.empty());
  for (const ConfigKey& key : config_keys()) {
    INFO("configs/README.md lacks `" << key.name << "`; add a row for it");
    std::string quoted = "`";
    quoted += key.name;
    quoted += "`";
    CHECK_THAT(readme, Contains(quoted));
  }
}

TEST_CASE("every run config configs/*.toml parses and validates", "[unit]") {
  const std::filesystem::path configs = std::string(TINYSCALE_SOURCE_DIR) + "/configs";
  int parsed = 0;
  for (const auto& entry : std::filesystem::directory_iterator(configs)) {
    if (entry.path().extension() != ".toml") continue;
    INFO(entry.path().string());
    CHECK_NOTHROW(load_config(entry.path().string()));
    ++parsed;
  }
  CHECK(parsed >= 1);
}
