// Chapters 02 and 12, checkpoints: a checkpoint round-trips bit-exactly, `latest` follows the
// newest write, and a flipped byte, a truncated file, a foreign file or a missing manifest is
// refused with a message that names the file, the tensor, what was expected and what was found.
#include "io/checkpoint.hpp"
#include "io/crc32.hpp"
#include "require_ts_error.hpp"
#include "scratch_dir.hpp"
#include "train/trainer.hpp"

#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

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

namespace {

using json = nlohmann::json;

json manifest_of(const std::string& dir) { return json::parse(read_bytes(dir + "/manifest.json")); }

// Flips one bit of byte `at` of `file`.
void flip_byte(const std::string& file, std::uint64_t at) {
  std::string bytes = read_bytes(file);
  bytes[at] = static_cast<char>(bytes[at] ^ 0x10);
  write_bytes(file, bytes);
}

std::string hex_crc_of_flipped(const std::string& file, const json& tensor) {
  const std::string bytes = read_bytes(file);
  const auto offset = tensor["offset"].get<std::uint64_t>();
  return crc32_hex(crc32(bytes.data() + offset, tensor["bytes"].get<std::size_t>()));
}

// A checkpoint whose middle tensor (3 MiB) spans several of the reader's 1 MiB chunks, between
// two small ones: a checksum that slips by one byte at a range or chunk edge blames the wrong one.
Checkpoint wide(std::int64_t step) {
  Checkpoint c;
  c.step = step;
  c.config_toml = "[train]\nsteps = 3\n";
  c.model = {{"a.bias", Tensor::randn(Shape{5}, 11)},
             {"b.weight", Tensor::randn(Shape{768, 1024}, 12)},
             {"c.bias", Tensor::randn(Shape{3}, 13)}};
  c.optimizer = {{"step", Tensor::from_ids({step}, Shape{1})}};
  c.state = json::object();
  return c;
}

} // namespace

TEST_CASE("the manifest records every tensor's name, dtype, shape, byte range and CRC-32",
          "[unit]") {
  testing::ScratchDir root;
  const Checkpoint c = sample(3);
  const std::string dir = write_checkpoint(root.path().string(), c);
  const json m = manifest_of(dir);
  CHECK(m["version"] == 2);
  const json& model = m["files"]["model.safetensors"];
  const std::string bytes = read_bytes(dir + "/model.safetensors");
  CHECK(model["bytes"] == bytes.size());
  REQUIRE(model["tensors"].size() == 2);
  const json& wte = model["tensors"][0];
  CHECK(wte["name"] == "wte.weight");
  CHECK(wte["dtype"] == "float32");
  CHECK(wte["shape"] == json::array({16, 8}));
  CHECK(wte["bytes"] == 16 * 8 * 4);
  // The checksum is that of the tensor's bytes where the file holds them (zlib.crc32 agrees).
  CHECK(wte["crc32"] == crc32_hex(crc32(c.model[0].second.raw_data(), 16 * 8 * 4)));
  CHECK(wte["crc32"] == hex_crc_of_flipped(dir + "/model.safetensors", wte));
  CHECK(model["header"]["bytes"] == wte["offset"]);
  CHECK(m["files"]["optimizer.safetensors"]["tensors"][2]["name"] == "step");
}

TEST_CASE("write_checkpoint passes its stages in order, and the last one is latest updated",
          "[unit]") {
  testing::ScratchDir root;
  std::vector<std::string> stages;
  write_checkpoint(root.path().string(), sample(5),
                   [&](SaveStage s) { stages.emplace_back(save_stage_name(s)); });
  CHECK(stages == std::vector<std::string>{"started", "model written", "optimizer written",
                                           "manifest written", "renamed into place",
                                           "latest updated"});
}

TEST_CASE("a flipped byte in any tensor is refused naming the file, the tensor and both CRC-32s",
          "[unit][ex12.1]") {
  testing::ScratchDir root;
  const std::string dir = write_checkpoint(root.path().string(), wide(9));
  const std::string file = dir + "/model.safetensors";
  const std::string pristine = read_bytes(file);
  const json tensors = manifest_of(dir)["files"]["model.safetensors"]["tensors"];
  REQUIRE(read_checkpoint(dir).model.size() == 3);
  for (const json& t : tensors) {
    const auto first = t["offset"].get<std::uint64_t>();
    const std::uint64_t last = first + t["bytes"].get<std::uint64_t>() - 1;
    for (std::uint64_t at : {first, first + (last - first) / 2, last}) {
      flip_byte(file, at);
      const std::string name = t["name"].get<std::string>();
      REQUIRE_TS_ERROR(read_checkpoint(dir),
                       Contains(file) && Contains("is corrupted in tensor '" + name + "'") &&
                           Contains("expected CRC-32 " + t["crc32"].get<std::string>()) &&
                           Contains("found " + hex_crc_of_flipped(file, t)));
      write_bytes(file, pristine);
    }
  }
  CHECK(read_checkpoint(root.path().string()).step == 9);
}

TEST_CASE("a flipped byte in the optimizer file names that file and its tensor", "[unit]") {
  testing::ScratchDir root;
  const std::string dir = write_checkpoint(root.path().string(), sample(4));
  const json t = manifest_of(dir)["files"]["optimizer.safetensors"]["tensors"][1];
  REQUIRE(t["name"] == "wte.weight.exp_avg_sq");
  flip_byte(dir + "/optimizer.safetensors", t["offset"].get<std::uint64_t>() + 17);
  REQUIRE_TS_ERROR(read_checkpoint(dir), Contains("optimizer.safetensors' is corrupted in tensor "
                                                  "'wte.weight.exp_avg_sq' (float32 [16,8]"));
}

TEST_CASE("a flipped byte in a safetensors header is refused naming the header", "[unit]") {
  testing::ScratchDir root;
  const std::string dir = write_checkpoint(root.path().string(), sample(4));
  flip_byte(dir + "/model.safetensors", 3); // the header length: the file no longer parses
  REQUIRE_TS_ERROR(read_checkpoint(dir), Contains("model.safetensors' is corrupted in its "
                                                  "safetensors header") &&
                                             Contains("expected CRC-32"));
}

TEST_CASE("a truncated file is refused naming the tensor whose bytes are missing", "[unit]") {
  testing::ScratchDir root;
  const std::string dir = write_checkpoint(root.path().string(), sample(4));
  const std::string file = dir + "/model.safetensors";
  const std::string pristine = read_bytes(file);
  const json tensors = manifest_of(dir)["files"]["model.safetensors"]["tensors"];
  const auto wte_end = tensors[0]["offset"].get<std::uint64_t>() + 512;
  write_bytes(file, pristine.substr(0, wte_end - 1)); // one byte short of wte.weight
  REQUIRE_TS_ERROR(read_checkpoint(dir),
                   Contains(file) && Contains("truncated") &&
                       Contains("expected " + std::to_string(pristine.size()) + " bytes") &&
                       Contains("found " + std::to_string(wte_end - 1)) &&
                       Contains("ends inside tensor 'wte.weight'") &&
                       Contains("the 1 tensors after it are incomplete"));
  write_bytes(file, pristine.substr(0, pristine.size() - 1));
  REQUIRE_TS_ERROR(read_checkpoint(dir), Contains("ends inside tensor 'h.0.ln_1.bias'"));
  write_bytes(file, pristine.substr(0, 20));
  REQUIRE_TS_ERROR(read_checkpoint(dir), Contains("ends inside its safetensors header"));
  write_bytes(file, pristine + "xx");
  REQUIRE_TS_ERROR(read_checkpoint(dir), Contains("2 bytes too many"));
  write_bytes(file, "");
  REQUIRE_TS_ERROR(read_checkpoint(dir), Contains("found 0 (truncated)"));
}

TEST_CASE("a file from another checkpoint or model is refused naming the tensors expected",
          "[unit]") {
  testing::ScratchDir root, other;
  const std::string dir = write_checkpoint(root.path().string(), sample(4));
  const std::string theirs = write_checkpoint(other.path().string(), wide(4));
  fs::copy_file(theirs + "/model.safetensors", dir + "/model.safetensors",
                fs::copy_options::overwrite_existing);
  REQUIRE_TS_ERROR(read_checkpoint(dir),
                   Contains("model.safetensors' is not the file its manifest describes") &&
                       Contains("expected the 2 tensors listed in") &&
                       Contains("found 3, without 'h.0.ln_1.bias', 'wte.weight', with 'a.bias', "
                                "'b.weight', 'c.bias' that the manifest does not list") &&
                       Contains("another checkpoint or model"));
  write_bytes(dir + "/model.safetensors", std::string(4000, 'x')); // not safetensors at all
  REQUIRE_TS_ERROR(read_checkpoint(dir), Contains("model.safetensors' has the wrong size"));
  // A safetensors file is not a checkpoint: the message says what a checkpoint is.
  REQUIRE_TS_ERROR(read_checkpoint(theirs + "/model.safetensors"),
                   Contains("expected a checkpoint directory") && Contains("manifest.json") &&
                       Contains("found a file"));
}

TEST_CASE("a manifest of a newer version is refused, and a version 1 manifest is still read",
          "[unit]") {
  testing::ScratchDir root;
  const Checkpoint c = sample(6);
  const std::string dir = write_checkpoint(root.path().string(), c);
  json m = manifest_of(dir);
  // Version 1 recorded each file's size and CRC-32 only.
  json v1 = m;
  v1["version"] = 1;
  for (const char* name : {"model.safetensors", "optimizer.safetensors"}) {
    const std::string file = dir + "/" + name;
    v1["files"][name] = {{"bytes", fs::file_size(file)}, {"crc32", crc32_hex(crc32_file(file))}};
  }
  write_bytes(dir + "/manifest.json", v1.dump(2));
  const Checkpoint r = read_checkpoint(dir);
  CHECK(bit_equal(r.model, c.model));
  CHECK(bit_equal(r.optimizer, c.optimizer));
  flip_byte(dir + "/model.safetensors", fs::file_size(dir + "/model.safetensors") - 3);
  REQUIRE_TS_ERROR(read_checkpoint(dir), Contains("model.safetensors' is corrupted") &&
                                             Contains("of the whole file") &&
                                             Contains("no per-tensor checksums"));
  m["version"] = 3;
  write_bytes(dir + "/manifest.json", m.dump(2));
  REQUIRE_TS_ERROR(read_checkpoint(dir), Contains("expected manifest version 1 to 2") &&
                                             Contains("found 3") &&
                                             Contains("another tinyscale version"));
}

TEST_CASE("a damaged per-tensor record in the manifest is refused as a damaged manifest",
          "[unit]") {
  testing::ScratchDir root;
  const std::string dir = write_checkpoint(root.path().string(), sample(6));
  json m = manifest_of(dir);
  m["files"]["model.safetensors"]["tensors"][1]["offset"] = 3;
  write_bytes(dir + "/manifest.json", m.dump(2));
  REQUIRE_TS_ERROR(read_checkpoint(dir),
                   Contains("to follow each other") && Contains("the manifest is damaged"));
  m["files"]["model.safetensors"].erase("header");
  write_bytes(dir + "/manifest.json", m.dump(2));
  REQUIRE_TS_ERROR(read_checkpoint(dir),
                   Contains("expected bytes, header") && Contains("the manifest is damaged"));
}

TEST_CASE("leftovers of a killed writer are swept by the next save, and a live writer's are kept",
          "[unit]") {
  testing::ScratchDir root;
  write_checkpoint(root.path().string(), sample(1));
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  REQUIRE(dead > 0);
  ::waitpid(dead, nullptr, 0); // reaped: no process has this pid now
  const std::string d = std::to_string(dead), live = std::to_string(::getppid());
  for (const std::string& name :
       {".step_00000002.tmp-" + d, ".step_00000001.old-" + d, ".step_00000003.tmp-" + live}) {
    fs::create_directories(root / name);
    write_bytes(root / name + "/model.safetensors", "partial");
  }
  write_bytes(root / (".latest.tmp-" + d + "-77"), "step_0000");
  write_bytes(root / "notes.txt", "kept");
  write_checkpoint(root.path().string(), sample(2));
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(root.path()))
    names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{".step_00000003.tmp-" + live, "latest", "notes.txt",
                                          "step_00000001", "step_00000002"});
}

TEST_CASE("resuming a trainer from another model's checkpoint is refused naming the difference",
          "[unit]") {
  testing::ScratchDir root;
  io::RunConfig a;
  a.model.vocab_size = 256;
  a.model.n_positions = 8;
  a.model.n_layer = 1;
  a.model.n_head = 2;
  a.model.n_embd = 16;
  a.data.markov_train_tokens = 2048;
  a.data.markov_val_tokens = 256;
  a.train.steps = 2;
  a.train.batch_size = 2;
  a.train.seq_len = 8;
  a.optim.warmup_steps = 0;
  a.train.checkpoint_dir = root.path().string();
  train::Trainer first(a);
  first.train_step();
  CHECK(fs::exists(first.save_checkpoint()));
  io::RunConfig b = a;
  b.model.n_layer = 2;
  train::Trainer second(b);
  REQUIRE_TS_ERROR(second.resume(root.path().string()),
                   Contains(root.path().string()) &&
                       Contains("model.n_layer = 1 in the checkpoint") && Contains("2 now"));
}

TEST_CASE("retention keeps the newest keep_last checkpoints and every keep_every-th step, and "
          "never the step latest names",
          "[unit]") {
  testing::ScratchDir root;
  const std::string r = root.path().string();
  for (std::int64_t step = 1; step <= 10; ++step)
    write_checkpoint(r, sample(step), Retention{2, 4});
  CHECK(checkpoint_steps(r) == std::vector<std::int64_t>{4, 8, 9, 10});
  // Without retention nothing is removed; keep_last 0 keeps everything.
  write_checkpoint(r, sample(11));
  CHECK(checkpoint_steps(r).size() == 5);
  CHECK(prune_checkpoints(r, Retention{}).empty());
  // A run resumed from an older step writes below the newest: latest names it and it stays.
  write_checkpoint(r, sample(5), Retention{1, 0});
  CHECK(read_bytes(root / "latest") == "step_00000005\n");
  CHECK(checkpoint_steps(r) == std::vector<std::int64_t>{5, 11});
  CHECK(read_checkpoint(r).step == 5);
  // Removal goes through a hidden name, and nothing hidden is left behind.
  for (const auto& entry : fs::directory_iterator(root.path()))
    CHECK(entry.path().filename().string()[0] != '.');
  REQUIRE_TS_ERROR(prune_checkpoints(r, Retention{-1, 0}), Contains("keep_last >= 0"));
}

TEST_CASE("retention never touches a save still being written (another writer's hidden folder)",
          "[unit]") {
  testing::ScratchDir root;
  const std::string r = root.path().string();
  for (std::int64_t step = 1; step <= 3; ++step) write_checkpoint(r, sample(step));
  // A save of step 4 in progress: its files are still going into a hidden folder.
  const fs::path in_progress = root / ".step_00000004.tmp-99999";
  fs::create_directories(in_progress);
  std::ofstream(in_progress / "model.safetensors") << "half written";
  CHECK(prune_checkpoints(r, Retention{1, 0}) == std::vector<std::int64_t>{1, 2});
  CHECK(checkpoint_steps(r) == std::vector<std::int64_t>{3});
  CHECK(fs::exists(in_progress / "model.safetensors"));
}

TEST_CASE("holds_checkpoint: false for a missing or empty folder, true once a save ended, and "
          "an error for step directories without latest",
          "[unit]") {
  testing::ScratchDir root;
  CHECK_FALSE(holds_checkpoint((root / "missing")));
  fs::create_directories(root / "empty");
  CHECK_FALSE(holds_checkpoint((root / "empty")));
  const std::string dir = write_checkpoint((root / "run"), sample(3));
  CHECK(holds_checkpoint((root / "run")));
  CHECK(holds_checkpoint(dir));
  fs::remove(root / "run/latest"); // a first save killed before latest existed
  REQUIRE_TS_ERROR(holds_checkpoint((root / "run")),
                   Contains("holds 1 step directories (the newest step_00000003) but no 'latest'"));
}

TEST_CASE("a damaged checkpoint's error lists the older checkpoints and how to resume from one",
          "[unit]") {
  testing::ScratchDir root;
  const std::string r = root.path().string();
  for (std::int64_t step : {2, 4, 6}) write_checkpoint(r, sample(step));
  {
    std::fstream f(root / "step_00000006/model.safetensors",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x5a');
  }
  REQUIRE_TS_ERROR(read_checkpoint(r),
                   Contains("newest first: step_00000004, step_00000002; resume from one with "
                            "--resume " +
                            (root / "step_00000004")));
  const std::string first = write_checkpoint((root / "alone"), sample(1));
  fs::remove(fs::path(first) / "manifest.json");
  REQUIRE_TS_ERROR(read_checkpoint(first), Contains("(no older checkpoint in"));
}
