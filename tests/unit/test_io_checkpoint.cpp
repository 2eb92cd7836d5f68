// Chapter 02, checkpoints: a checkpoint round-trips bit-exactly, `latest` follows the newest
// write, and a flipped byte, a truncated file or a missing manifest is refused with a message
// that names the file, what was expected and what was found.
#include "io/checkpoint.hpp"
#include "require_ts_error.hpp"
#include "scratch_dir.hpp"

#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

using namespace tinyscale;
using namespace tinyscale::io;
using Catch::Contains;
using tinyscale::testing::read_bytes;
using tinyscale::testing::write_bytes;
namespace fs = std::filesystem;

namespace {

bool bit_equal(const NamedTensors& a, const NamedTensors& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const Tensor& x = a[i].second;
    const Tensor& y = b[i].second;
    if (a[i].first != b[i].first || x.shape() != y.shape() || x.dtype() != y.dtype() ||
        std::memcmp(x.raw_data(), y.raw_data(), x.numel() * dtype_size(x.dtype())) != 0)
      return false;
  }
  return true;
}

Checkpoint sample(std::int64_t step) {
  Checkpoint c;
  c.step = step;
  c.config_toml = "[train]\nsteps = 300\n";
  c.model = {{"wte.weight", Tensor::randn(Shape{16, 8}, 3)},
             {"h.0.ln_1.bias", Tensor::randn(Shape{8}, 4)}};
  c.optimizer = {{"wte.weight.exp_avg", Tensor::randn(Shape{16, 8}, 5)},
                 {"wte.weight.exp_avg_sq", Tensor::uniform(Shape{16, 8}, 6)},
                 {"step", Tensor::from_ids({step}, Shape{1})}};
  c.state = {{"rng", {{"seed", 42}, {"offset", 1234567}}}, {"loss", 2.5}, {"note", "ok"}};
  return c;
}

} // namespace

TEST_CASE("a checkpoint round-trips tensors bit-exactly, with its state and config text",
          "[unit]") {
  testing::ScratchDir root;
  const Checkpoint c = sample(100);
  const std::string dir = write_checkpoint(root.path().string(), c);
  CHECK(fs::path(dir).filename() == "step_00000100");
  CHECK(fs::exists(fs::path(dir) / "model.safetensors"));
  CHECK(fs::exists(fs::path(dir) / "optimizer.safetensors"));
  CHECK(fs::exists(fs::path(dir) / "manifest.json"));
  for (const std::string& from : {dir, root.path().string()}) {
    const Checkpoint r = read_checkpoint(from);
    CHECK(r.step == 100);
    CHECK(r.config_toml == c.config_toml);
    CHECK(r.state == c.state);
    CHECK(bit_equal(r.model, c.model));
    CHECK(bit_equal(r.optimizer, c.optimizer));
  }
  const auto manifest = nlohmann::json::parse(read_bytes(dir + "/manifest.json"));
  CHECK(manifest["format"] == kCheckpointFormat);
  CHECK(manifest["version"] == kCheckpointVersion);
  CHECK(manifest["files"]["model.safetensors"]["bytes"] ==
        fs::file_size(fs::path(dir) / "model.safetensors"));
}

TEST_CASE("latest names the newest checkpoint, and no temporary directories remain", "[unit]") {
  testing::ScratchDir root;
  write_checkpoint(root.path().string(), sample(100));
  write_checkpoint(root.path().string(), sample(200));
  CHECK(read_bytes(root / "latest") == "step_00000200\n");
  CHECK(read_checkpoint(root.path().string()).step == 200);
  // Writing a step again replaces that checkpoint.
  Checkpoint again = sample(200);
  again.state["note"] = "second";
  write_checkpoint(root.path().string(), again);
  CHECK(read_checkpoint(root.path().string()).state["note"] == "second");
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(root.path()))
    names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"latest", "step_00000100", "step_00000200"});
}

TEST_CASE("a byte flipped in the middle of model.safetensors is rejected", "[unit]") {
  testing::ScratchDir root;
  const std::string dir = write_checkpoint(root.path().string(), sample(7));
  const std::string file = dir + "/model.safetensors";
  std::string bytes = read_bytes(file);
  bytes[bytes.size() / 2] ^= 0x01;
  write_bytes(file, bytes);
  REQUIRE_TS_ERROR(read_checkpoint(dir), Contains("model.safetensors") && Contains("corrupted") &&
                                             Contains("expected CRC-32") && Contains("found"));
}

TEST_CASE("a truncated checkpoint file is rejected naming expected and found sizes", "[unit]") {
  testing::ScratchDir root;
  const std::string dir = write_checkpoint(root.path().string(), sample(7));
  const std::string file = dir + "/optimizer.safetensors";
  const std::string bytes = read_bytes(file);
  write_bytes(file, bytes.substr(0, bytes.size() - 100));
  REQUIRE_TS_ERROR(read_checkpoint(root.path().string()),
                   Contains("optimizer.safetensors") && Contains("truncated") &&
                       Contains("expected " + std::to_string(bytes.size()) + " bytes") &&
                       Contains("found " + std::to_string(bytes.size() - 100)));
}

TEST_CASE("a checkpoint without its manifest, or with a foreign one, is rejected", "[unit]") {
  testing::ScratchDir root;
  const std::string dir = write_checkpoint(root.path().string(), sample(7));
  fs::remove(fs::path(dir) / "manifest.json");
  REQUIRE_TS_ERROR(read_checkpoint(dir), Contains("manifest.json") && Contains("no such file"));
  write_bytes(dir + "/manifest.json", R"({"format": "something-else"})");
  REQUIRE_TS_ERROR(read_checkpoint(dir),
                   Contains("not a tinyscale checkpoint") && Contains("something-else"));
  write_bytes(dir + "/manifest.json", "{broken");
  REQUIRE_TS_ERROR(read_checkpoint(dir), Contains("manifest.json") && Contains("JSON"));
  REQUIRE_TS_ERROR(read_checkpoint(root / "nowhere"),
                   Contains("nowhere") && Contains("found nothing"));
  write_bytes(root / "latest", "step_00000999\n");
  REQUIRE_TS_ERROR(read_checkpoint(root.path().string()),
                   Contains("step_00000999") && Contains("no such directory"));
}
