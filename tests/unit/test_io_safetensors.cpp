// Chapter 02, safetensors: tensors round-trip bit-exactly with their names, dtypes, shapes and
// metadata; the file layout is the published one; and every malformed file (foreign bytes, a
// truncated file, a flipped byte, a lying header) is rejected with the file named.
#include "io/crc32.hpp"
#include "io/safetensors.hpp"
#include "require_ts_error.hpp"
#include "scratch_dir.hpp"

#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

using namespace tinyscale;
using namespace tinyscale::io;
using Catch::Contains;
using tinyscale::testing::read_bytes;
using tinyscale::testing::write_bytes;

namespace {

// A safetensors file from a header text and `data_bytes` zero bytes of data.
std::string handmade(const std::string& header, std::size_t data_bytes) {
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  return file + header + std::string(data_bytes, '\0');
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.numel() * dtype_size(a.dtype())) == 0;
}

NamedTensors sample_tensors() {
  return {{"b.weight", Tensor::randn(Shape{3, 5}, 1, 0, DType::Float32)},
          {"a.bias", Tensor::randn(Shape{7}, 2, 0, DType::Float64)},
          {"ids", Tensor::from_ids({-1, 0, 1LL << 40}, Shape{3})},
          {"scalar", Tensor::scalar(2.5)},
          {"empty", Tensor::zeros(Shape{0, 4})}};
}

} // namespace

TEST_CASE("CRC-32 matches the standard check value and chains across buffers", "[unit]") {
  const std::string digits = "123456789";
  CHECK(crc32(digits.data(), digits.size()) == 0xCBF43926U);
  CHECK(crc32_hex(0xCBF43926U) == "cbf43926");
  const std::uint32_t first = crc32_update(0, digits.data(), 4);
  CHECK(crc32_update(first, digits.data() + 4, 5) == 0xCBF43926U);
  CHECK(crc32(nullptr, 0) == 0U);
}

TEST_CASE("safetensors round-trips names, dtypes, shapes, values and metadata bit-exactly",
          "[unit]") {
  testing::ScratchDir dir;
  const NamedTensors tensors = sample_tensors();
  save_safetensors(dir / "t.safetensors", tensors, {{"note", "hello"}});
  const SafetensorsFile loaded = load_safetensors(dir / "t.safetensors");
  REQUIRE(loaded.tensors.size() == tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    INFO(tensors[i].first);
    CHECK(loaded.tensors[i].first == tensors[i].first); // data-offset order = write order
    CHECK(bit_equal(loaded.tensors[i].second, tensors[i].second));
    CHECK(loaded.tensors[i].second.device() == Device::cpu());
  }
  CHECK(loaded.metadata.at("note") == "hello");
  CHECK(loaded.metadata.count(kCrc32Key) == 1);
  CHECK(bit_equal(loaded.at("a.bias"), tensors[1].second));
  REQUIRE_TS_ERROR(loaded.at("nope"), Contains("'nope'") && Contains("b.weight"));
}

TEST_CASE("a safetensors file has a little-endian header length, an aligned JSON header, then data",
          "[unit]") {
  testing::ScratchDir dir;
  const Tensor t = Tensor::from_vector({1.0, -2.0, 0.5}, Shape{3});
  save_safetensors(dir / "x.safetensors", {{"x", t}});
  const std::string bytes = read_bytes(dir / "x.safetensors");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  CHECK(n % 8 == 0);
  REQUIRE(bytes.size() == 8 + n + 12);
  const std::string header = bytes.substr(8, n);
  CHECK_THAT(header, Contains("\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]}") &&
                         Contains("\"__metadata__\"") && Contains(kCrc32Key));
  CHECK(std::memcmp(bytes.data() + 8 + n, t.raw_data(), 12) == 0);
  const std::string crc = crc32_hex(crc32(t.raw_data(), 12));
  CHECK_THAT(header, Contains(crc));
}

TEST_CASE("saving over a file replaces it and leaves no temporary files behind", "[unit]") {
  testing::ScratchDir dir;
  save_safetensors(dir / "m.safetensors", {{"w", Tensor::ones(Shape{2})}});
  save_safetensors(dir / "m.safetensors", {{"w", Tensor::zeros(Shape{4})}});
  CHECK(load_safetensors(dir / "m.safetensors").at("w").numel() == 4);
  // A failed save (a duplicate name) must leave the old file untouched.
  const Tensor one = Tensor::ones(Shape{1});
  REQUIRE_TS_ERROR(save_safetensors(dir / "m.safetensors", {{"w", one}, {"w", one}}),
                   Contains("'w' twice"));
  CHECK(load_safetensors(dir / "m.safetensors").at("w").numel() == 4);
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    (void)entry;
    ++files;
  }
  CHECK(files == 1);
}

TEST_CASE("load_safetensors rejects missing, tiny and foreign files, naming the file", "[unit]") {
  testing::ScratchDir dir;
  REQUIRE_TS_ERROR(load_safetensors(dir / "none.safetensors"),
                   Contains("none.safetensors") && Contains("no file"));
  write_bytes(dir / "tiny.safetensors", "abc");
  REQUIRE_TS_ERROR(load_safetensors(dir / "tiny.safetensors"), Contains("tiny.safetensors") &&
                                                                   Contains("at least 8 bytes") &&
                                                                   Contains("found 3"));
  std::mt19937 rng(7);
  std::string noise(4096, '\0');
  for (char& c : noise) c = static_cast<char>(rng());
  write_bytes(dir / "noise.bin", noise);
  REQUIRE_TS_ERROR(load_safetensors(dir / "noise.bin"),
                   Contains("noise.bin") && Contains("not a safetensors file"));
  write_bytes(dir / "json.safetensors", handmade("{not json}", 0));
  REQUIRE_TS_ERROR(load_safetensors(dir / "json.safetensors"),
                   Contains("json.safetensors") && Contains("JSON"));
}

TEST_CASE("a truncated safetensors file is rejected with expected and found byte counts",
          "[unit]") {
  testing::ScratchDir dir;
  save_safetensors(dir / "t.safetensors", sample_tensors());
  const std::string bytes = read_bytes(dir / "t.safetensors");
  write_bytes(dir / "t.safetensors", bytes.substr(0, bytes.size() - 10));
  REQUIRE_TS_ERROR(load_safetensors(dir / "t.safetensors"),
                   Contains("truncated") && Contains("expected " + std::to_string(bytes.size())) &&
                       Contains("found " + std::to_string(bytes.size() - 10)));
  write_bytes(dir / "t.safetensors", bytes + "xx");
  REQUIRE_TS_ERROR(load_safetensors(dir / "t.safetensors"), Contains("trailing bytes"));
}

TEST_CASE("a flipped data byte fails the CRC-32 check", "[unit]") {
  testing::ScratchDir dir;
  save_safetensors(dir / "t.safetensors", sample_tensors());
  std::string bytes = read_bytes(dir / "t.safetensors");
  bytes[bytes.size() - 30] ^= 0x10;
  write_bytes(dir / "t.safetensors", bytes);
  REQUIRE_TS_ERROR(load_safetensors(dir / "t.safetensors"),
                   Contains("t.safetensors") && Contains("corrupted") && Contains("CRC-32"));
}

TEST_CASE("headers with bad dtypes, sizes or offsets are rejected before any data is read",
          "[unit]") {
  testing::ScratchDir dir;
  const std::string path = dir / "h.safetensors";
  auto rejects = [&](const std::string& header, std::size_t data, const std::string& fragment) {
    write_bytes(path, handmade(header, data));
    INFO(header);
    REQUIRE_TS_ERROR(load_safetensors(path), Contains("h.safetensors") && Contains(fragment));
  };
  rejects(R"({"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})", 4, "F16");
  rejects(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8, "expected 12 bytes");
  rejects(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
          R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
          12, "overlaps");
  rejects(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8, "hole");
  rejects(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8, "truncated");
  rejects(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4, "non-negative");
  rejects(R"({"a":{"dtype":"F32","shape":[2]}})", 8, "data_offsets");
  rejects(R"({"__metadata__":{"n":1}})", 0, "string value");
  rejects(R"([1,2])", 0, "JSON object");
}

TEST_CASE("a file without a CRC (as other tools write it) still loads", "[unit]") {
  testing::ScratchDir dir;
  std::string file = handmade(R"({"__metadata__":{"format":"pt"},)"
                              R"("w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})",
                              0);
  const double value = 1.5;
  file.append(reinterpret_cast<const char*>(&value), sizeof value);
  write_bytes(dir / "w.safetensors", file);
  const SafetensorsFile loaded = load_safetensors(dir / "w.safetensors");
  CHECK(loaded.metadata.at("format") == "pt");
  CHECK(loaded.at("w").item() == 1.5);
}
