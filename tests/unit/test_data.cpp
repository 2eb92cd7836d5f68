// Chapter 02, the token dataset: batches as pure functions of (seed, step, row), data-parallel
// slices that reassemble the global batch, fixed validation windows, and the text and shard
// sources with their errors.
#include "core/rng.hpp"
#include "data/dataset.hpp"
#include "data/shards.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

using namespace tinyscale;
using namespace tinyscale::data;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

// A fresh directory under the system temp dir, removed when the test ends.
struct ScratchDir {
  fs::path path;
  explicit ScratchDir(const std::string& name) {
    std::string leaf = "tinyscale_";
    leaf += name;
    leaf += "_";
    leaf += std::to_string(::getpid());
    path = fs::temp_directory_path() / leaf;
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~ScratchDir() { fs::remove_all(path); }
  std::string file(const std::string& leaf) const { return (path / leaf).string(); }
};

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

DataConfig small_markov(std::uint64_t seed = 1234) {
  DataConfig c;
  c.seed = seed;
  c.markov_alphabet = 8;
  c.markov_train_tokens = 5000;
  c.markov_val_tokens = 1000;
  return c;
}

std::vector<std::int64_t> ids(const Tensor& t) {
  const auto* p = t.data<std::int64_t>();
  return {p, p + t.numel()};
}

} // namespace

TEST_CASE("targets are the inputs shifted by one, from the window the documented rule picks",
          "[unit]") {
  const auto ds = TokenDataset::open(small_markov(), 256);
  const std::int64_t B = 4, T = 16, step = 3;
  const auto batch = ds.batch(Split::Train, step, B, T);
  REQUIRE(batch.inputs.shape() == Shape{B, T});
  REQUIRE(batch.targets.dtype() == DType::Int64);
  const auto in = ids(batch.inputs), out = ids(batch.targets);
  const auto& tokens = ds.tokens(Split::Train);
  const Philox rng(1234, stream_id("data.batch.train"));
  for (std::int64_t r = 0; r < B; ++r) {
    const auto start = static_cast<std::int64_t>(
        std::floor(rng.uniform_at(static_cast<std::uint64_t>(step * B + r)) * (5000 - T)));
    for (std::int64_t t = 0; t < T; ++t) {
      CHECK(in[static_cast<std::size_t>(r * T + t)] == tokens[static_cast<std::size_t>(start + t)]);
      CHECK(out[static_cast<std::size_t>(r * T + t)] ==
            tokens[static_cast<std::size_t>(start + t + 1)]);
    }
  }
}

TEST_CASE("a train batch depends only on (seed, step, row), not on earlier calls", "[unit]") {
  const auto a = TokenDataset::open(small_markov(), 256),
             b = TokenDataset::open(small_markov(), 256);
  for (int s = 0; s < 5; ++s) (void)a.batch(Split::Train, s, 8, 32); // a has "run" 5 steps
  CHECK(ids(a.batch(Split::Train, 5, 8, 32).inputs) == ids(b.batch(Split::Train, 5, 8, 32).inputs));
  CHECK(ids(a.batch(Split::Train, 5, 8, 32).inputs) != ids(a.batch(Split::Train, 6, 8, 32).inputs));
}

TEST_CASE("the same seed gives the same markov tokens and a different seed different ones",
          "[unit]") {
  const auto a = TokenDataset::open(small_markov(7), 256),
             b = TokenDataset::open(small_markov(7), 256);
  const auto c = TokenDataset::open(small_markov(8), 256);
  CHECK(a.tokens(Split::Train) == b.tokens(Split::Train));
  CHECK(a.tokens(Split::Val) == b.tokens(Split::Val));
  CHECK(a.tokens(Split::Train) != c.tokens(Split::Train));
  CHECK(a.tokens(Split::Train) != a.tokens(Split::Val)); // separate streams
  CHECK(a.entropy_rate() == b.entropy_rate());
  REQUIRE(a.entropy_rate().has_value());
  CHECK(*a.entropy_rate() > 0);
  CHECK(*a.entropy_rate() < std::log(8.0)); // below the uniform rate over the alphabet
  CHECK(a.size(Split::Train) == 5000);
  CHECK(a.size(Split::Val) == 1000);
  CHECK_THAT(a.describe(), Contains("markov") && Contains("nats/token") && Contains("seed 7"));
}

TEST_CASE("data-parallel slices of a batch concatenate to the whole batch", "[unit]") {
  const auto ds = TokenDataset::open(small_markov(), 256);
  for (Split split : {Split::Train, Split::Val}) {
    const auto whole = ids(ds.batch(split, 2, 8, 10).inputs);
    for (std::int64_t dp : {1, 2, 4, 8}) {
      std::vector<std::int64_t> joined;
      for (std::int64_t rank = 0; rank < dp; ++rank) {
        const auto part = ids(ds.batch(split, 2, 8, 10, rank * (8 / dp), 8 / dp).inputs);
        joined.insert(joined.end(), part.begin(), part.end());
      }
      CHECK(joined == whole);
    }
  }
  CHECK(ds.batch(Split::Train, 0, 8, 10, 6).inputs.shape() == Shape{2, 10}); // rows = -1: to end
  CHECK_THROWS_WITH(ds.batch(Split::Train, 0, 8, 10, 6, 4), Contains("inside [0, 8)"));
}

TEST_CASE("validation batches walk non-overlapping windows in order and wrap around", "[unit]") {
  const auto ds = TokenDataset::open(small_markov(), 256);
  const auto& val = ds.tokens(Split::Val);
  const std::int64_t T = 100, windows = (1000 - 1) / T; // 9 windows of 100 inputs + 1 target
  const auto b0 = ids(ds.batch(Split::Val, 0, 4, T).inputs);
  const auto t1 = ids(ds.batch(Split::Val, 1, 4, T).targets);
  for (std::int64_t t = 0; t < T; ++t) {
    CHECK(b0[static_cast<std::size_t>(2 * T + t)] == val[static_cast<std::size_t>(2 * T + t)]);
    // batch 1 row 3 = window 7
    CHECK(t1[static_cast<std::size_t>(3 * T + t)] == val[static_cast<std::size_t>(7 * T + t + 1)]);
  }
  // batch 2 row 1 = window 9 mod 9 = 0: the evaluation set repeats
  const auto b2 = ids(ds.batch(Split::Val, 2, 4, T).inputs);
  CHECK(std::vector<std::int64_t>(b2.begin() + T, b2.begin() + 2 * T) ==
        std::vector<std::int64_t>(b0.begin(), b0.begin() + T));
  CHECK(windows == 9);
  CHECK(ids(ds.batch(Split::Val, 0, 4, T).inputs) == b0);
}

TEST_CASE("the text source uses the file's bytes and holds out the last val_fraction", "[unit]") {
  ScratchDir dir("text");
  std::string text;
  for (int i = 0; i < 100; ++i) text += static_cast<char>('a' + i % 26);
  write_bytes(dir.file("tiny.txt"), text);
  DataConfig c;
  c.source = "text", c.path = dir.file("tiny.txt"), c.val_fraction = 0.2;
  const auto ds = TokenDataset::open(c, 256);
  CHECK(ds.size(Split::Train) == 80);
  CHECK(ds.size(Split::Val) == 20);
  CHECK(ds.tokens(Split::Train).front() == 'a');
  CHECK(ds.tokens(Split::Val).front() == 'a' + 80 % 26);
  CHECK_FALSE(ds.entropy_rate().has_value());
  CHECK_THROWS_WITH(ds.batch(Split::Val, 0, 1, 20), Contains("21 tokens") && Contains("tiny.txt") &&
                                                        Contains("found 20") &&
                                                        Contains("seq_len"));
  CHECK_THROWS_WITH(TokenDataset::open(c, 100), Contains("token 100") && Contains("vocab_size"));
}

TEST_CASE("the text source names a missing or empty file", "[unit]") {
  ScratchDir dir("text_errors");
  DataConfig c;
  c.source = "text", c.path = dir.file("absent.txt");
  CHECK_THROWS_WITH(TokenDataset::open(c, 256), Contains("absent.txt"));
  write_bytes(dir.file("empty.txt"), "");
  c.path = dir.file("empty.txt");
  CHECK_THROWS_WITH(TokenDataset::open(c, 256), Contains("empty.txt") && Contains("empty file"));
}

TEST_CASE("a shard is a 256-int32 header (magic, version, count) and uint16 tokens", "[unit]") {
  ScratchDir dir("shard_format");
  write_token_shard(dir.file("a.bin"), {1, 258, 65535});
  std::ifstream in(dir.file("a.bin"), std::ios::binary);
  const std::vector<unsigned char> b((std::istreambuf_iterator<char>(in)), {});
  REQUIRE(b.size() == 1024 + 6);
  CHECK(b[0] + (b[1] << 8) + (b[2] << 16) + (b[3] << 24) == 20240520);
  CHECK(b[4] == 1);
  CHECK(b[8] == 3);
  CHECK(b[1024 + 2] == 2); // 258 little-endian: 0x02 0x01
  CHECK(b[1024 + 3] == 1);
  CHECK(read_token_shard(dir.file("a.bin"), 65536) == std::vector<std::uint16_t>{1, 258, 65535});
}

TEST_CASE("a shard directory is read as its *.bin files in sorted order", "[unit]") {
  ScratchDir dir("shard_dir");
  write_token_shard(dir.file("train_001.bin"), {3, 4});
  write_token_shard(dir.file("train_000.bin"), {1, 2});
  write_bytes(dir.file("notes.txt"), "ignored");
  CHECK(read_token_shards(dir.path.string(), 50257) == std::vector<std::uint16_t>{1, 2, 3, 4});
  std::vector<std::uint16_t> many(1000);
  for (std::size_t i = 0; i < many.size(); ++i) many[i] = static_cast<std::uint16_t>(i * 7 % 500);
  write_token_shard(dir.file("train_002.bin"), many);
  DataConfig c;
  c.source = "shards", c.path = dir.path.string(), c.val_fraction = 0.5;
  const auto ds = TokenDataset::open(c, 50257);
  CHECK(ds.size(Split::Train) + ds.size(Split::Val) == 1004);
  CHECK(ds.size(Split::Val) == 502);
  CHECK_THAT(ds.describe(), Contains("shards") && Contains("3 files"));
}

TEST_CASE("val_path shards are the validation split and may not overlap the train shards",
          "[unit]") {
  ScratchDir dir("shard_val");
  fs::create_directories(dir.path / "train");
  write_token_shard(dir.file("train/t.bin"), std::vector<std::uint16_t>(100, 5));
  write_token_shard(dir.file("val.bin"), std::vector<std::uint16_t>(40, 9));
  DataConfig c;
  c.source = "shards", c.path = dir.file("train"), c.val_path = dir.file("val.bin");
  const auto ds = TokenDataset::open(c, 10);
  CHECK(ds.size(Split::Train) == 100);
  CHECK(ds.tokens(Split::Val) == std::vector<std::uint16_t>(40, 9));
  c.val_path = dir.file("train/t.bin");
  CHECK_THROWS_WITH(TokenDataset::open(c, 10), Contains("t.bin") && Contains("in both"));
}

TEST_CASE("llm.c-style train and val shards in one directory are told apart by patterns",
          "[unit]") {
  ScratchDir dir("shard_glob");
  write_token_shard(dir.file("fw_train_000001.bin"), {3, 4, 5});
  write_token_shard(dir.file("fw_train_000000.bin"), {1, 2});
  write_token_shard(dir.file("fw_val_000000.bin"), {7, 7, 7});
  DataConfig c;
  c.source = "shards", c.path = dir.file("fw_train_*.bin"), c.val_path = dir.file("fw_val_*.bin");
  const auto ds = TokenDataset::open(c, 8);
  CHECK(ds.tokens(Split::Train) == std::vector<std::uint16_t>{1, 2, 3, 4, 5});
  CHECK(ds.tokens(Split::Val) == std::vector<std::uint16_t>{7, 7, 7});
  c.path = dir.file("fw_test_*.bin");
  CHECK_THROWS_WITH(TokenDataset::open(c, 8), Contains("matching") && Contains("fw_test_*.bin"));
}

TEST_CASE("shard errors name the file and what was expected and found", "[unit]") {
  ScratchDir dir("shard_errors");
  CHECK_THROWS_WITH(read_token_shard(dir.file("none.bin"), 10), Contains("none.bin"));
  // A foreign file: the first int32 is not the magic.
  std::string foreign(1024, '\0');
  foreign[0] = 'G', foreign[1] = 'G', foreign[2] = 'U', foreign[3] = 'F';
  write_bytes(dir.file("model.bin"), foreign);
  CHECK_THROWS_WITH(read_token_shard(dir.file("model.bin"), 10),
                    Contains("expected magic 20240520") && Contains("model.bin"));
  write_bytes(dir.file("short.bin"), "abc");
  CHECK_THROWS_WITH(read_token_shard(dir.file("short.bin"), 10), Contains("3 bytes"));
  // Wrong version: patch int32 1 of a good shard.
  write_token_shard(dir.file("v2.bin"), {1, 2});
  {
    std::fstream f(dir.file("v2.bin"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4);
    f.put(2);
  }
  CHECK_THROWS_WITH(read_token_shard(dir.file("v2.bin"), 10),
                    Contains("expected version 1") && Contains("found 2"));
  // Truncated: the header says 5 tokens, the file holds 3.
  write_token_shard(dir.file("cut.bin"), {1, 2, 3, 4, 5});
  fs::resize_file(dir.file("cut.bin"), 1024 + 6);
  CHECK_THROWS_WITH(read_token_shard(dir.file("cut.bin"), 10),
                    Contains("header says 5 tokens") && Contains("found 3"));
  write_token_shard(dir.file("big.bin"), {1, 2, 50257});
  CHECK_THROWS_WITH(read_token_shard(dir.file("big.bin"), 50257),
                    Contains("token 50257") && Contains("position 2") &&
                        Contains("vocab_size = 50257"));
  CHECK_THROWS_WITH(read_token_shards(dir.file("nowhere"), 10), Contains("nowhere"));
  fs::create_directories(dir.path / "empty");
  CHECK_THROWS_WITH(read_token_shards(dir.file("empty"), 10), Contains("found none"));
}

TEST_CASE("DataConfig is checked up front, naming the valid choices", "[unit]") {
  DataConfig c;
  c.source = "parquet";
  CHECK_THROWS_WITH(TokenDataset::open(c, 256),
                    Contains("\"markov\", \"text\" or \"shards\"") && Contains("\"parquet\""));
  c = DataConfig{};
  c.markov_alphabet = 300;
  CHECK_THROWS_WITH(check_data_config(c), Contains("markov_alphabet in [2, 256]"));
  c = DataConfig{};
  c.source = "text";
  CHECK_THROWS_WITH(check_data_config(c), Contains("data.path"));
  c.path = "x.txt", c.val_fraction = 0;
  CHECK_THROWS_WITH(check_data_config(c), Contains("val_fraction in (0, 1)"));
  c.val_fraction = 0.1, c.val_path = "v.bin";
  CHECK_THROWS_WITH(check_data_config(c), Contains("val_path"));
  CHECK_NOTHROW(check_data_config(DataConfig{}));
}
