// Chapter 09, topology files: the three shipped files load with the device counts they describe,
// the levels say which link joins two devices, and every malformed file is an error naming the
// file, the line and the key.
#include "mesh/topology.hpp"
#include "require_ts_error.hpp"

#include <filesystem>
#include <sstream>

using namespace tinyscale::mesh;
using Catch::Contains;

namespace {
std::string topology_path(const std::string& file) {
  return std::string(TINYSCALE_SOURCE_DIR) + "/configs/topologies/" + file;
}

// A valid two-level file whose lines the error tests replace one at a time.
const char* const kValid = R"(name = "t"
description = "two nodes of four"
[[levels]]
name = "nvlink"
unit = "node"
fan_out = 4
bandwidth_gb_s = 450
latency_us = 3.4
source = "test"
[[levels]]
name = "ib"
unit = "cluster"
fan_out = 2
bandwidth_gb_s = 50.0
latency_us = 9.6
source = "test"
)";

// kValid with line `line` (1-based) replaced by `text` ("" deletes it).
std::string with_line(int line, const std::string& text) {
  std::istringstream in(kValid);
  std::string out, current;
  for (int n = 1; std::getline(in, current); ++n) {
    if (n != line)
      out += current + "\n";
    else if (!text.empty())
      out += text + "\n";
  }
  return out;
}
} // namespace

TEST_CASE("the three topology files load with their device counts", "[unit]") {
  const Topology laptop = load_topology(topology_path("laptop.toml"));
  CHECK(laptop.name == "laptop");
  CHECK(laptop.levels.size() == 1);
  CHECK(laptop.device_count() == 8);

  const Topology dgx = load_topology(topology_path("dgx-h100-ib.toml"));
  REQUIRE(dgx.levels.size() == 2);
  CHECK(dgx.device_count() == 32);
  CHECK(dgx.levels[0].name == "nvlink");
  CHECK(dgx.levels[0].fan_out == 8);
  CHECK(dgx.levels[0].bandwidth_gb_s == 450.0);
  CHECK(dgx.levels[1].name == "infiniband");
  CHECK(dgx.levels[1].bandwidth_gb_s == 50.0);

  const Topology nvl72 = load_topology(topology_path("nvl72.toml"));
  REQUIRE(nvl72.levels.size() == 2);
  CHECK(nvl72.levels[0].fan_out == 72);
  CHECK(nvl72.levels[0].bandwidth_gb_s == 900.0);
  CHECK(nvl72.device_count() == 288);
}

TEST_CASE("every shipped topology file cites a source for every level", "[unit]") {
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(TINYSCALE_SOURCE_DIR) +
                                                               "/configs/topologies")) {
    if (entry.path().extension() != ".toml") continue;
    INFO(entry.path().string());
    const Topology t = load_topology(entry.path().string());
    CHECK_FALSE(t.description.empty());
    for (const LinkLevel& level : t.levels) CHECK(level.source.size() > 10);
    ++files;
  }
  CHECK(files >= 3);
}

TEST_CASE("the innermost level holding both devices is the link between them", "[unit]") {
  const Topology dgx = load_topology(topology_path("dgx-h100-ib.toml"));
  CHECK(dgx.level_joining(3, 3) == -1);
  CHECK(dgx.level_joining(0, 7) == 0);
  CHECK(dgx.level_joining(7, 8) == 1);
  CHECK(dgx.level_joining(9, 14) == 0);
  CHECK(dgx.level_joining(0, 31) == 1);
  CHECK(dgx.unit_of(17, 0) == 2);
  CHECK(dgx.unit_of(17, 1) == 0);
  REQUIRE_TS_ERROR(dgx.level_joining(0, 32), Contains("devices in 0..31") && Contains("32"));
  CHECK(dgx.describe() == "8 x 4 = 32 devices (nvlink joins 8 devices into a node, infiniband "
                          "joins 4 nodes into a cluster)");

  const Topology three = parse_topology(with_line(13, "fan_out = 3") + R"([[levels]]
name = "ethernet"
unit = "campus"
fan_out = 2
bandwidth_gb_s = 12.5
latency_us = 20
source = "test"
)",
                                        "three.toml");
  CHECK(three.device_count() == 24);
  CHECK(three.level_joining(0, 11) == 1);
  CHECK(three.level_joining(11, 12) == 2);
  CHECK(three.unit_of(13, 1) == 1);
}

TEST_CASE("an unknown key names the file, its line and the valid keys", "[unit]") {
  REQUIRE_NOTHROW(parse_topology(kValid, "t.toml"));
  REQUIRE_TS_ERROR(parse_topology(with_line(7, "bandwith_gb_s = 450"), "t.toml"),
                   Contains("t.toml:7:") && Contains("unknown key 'bandwith_gb_s'") &&
                       Contains("bandwidth_gb_s, latency_us"));
  REQUIRE_TS_ERROR(parse_topology(with_line(2, "descripton = \"x\""), "t.toml"),
                   Contains("t.toml:2:") && Contains("unknown key 'descripton'") &&
                       Contains("missing key 'description'"));
}

TEST_CASE("a missing key names the key and the level it is missing from", "[unit]") {
  REQUIRE_TS_ERROR(parse_topology(with_line(15, ""), "t.toml"),
                   Contains("t.toml:10:") && Contains("missing key 'latency_us'") &&
                       Contains("[[levels]] number 2"));
  REQUIRE_TS_ERROR(parse_topology(with_line(1, ""), "t.toml"), Contains("missing key 'name'"));
  REQUIRE_TS_ERROR(parse_topology("name = \"t\"\ndescription = \"d\"\n", "t.toml"),
                   Contains("t.toml") && Contains("at least one [[levels]]"));
}

TEST_CASE("non-positive or mistyped numbers are errors with their line and value", "[unit]") {
  REQUIRE_TS_ERROR(parse_topology(with_line(6, "fan_out = 0"), "t.toml"),
                   Contains("t.toml:6:") &&
                       Contains("[[levels]] number 1: fan_out: expected a positive integer") &&
                       Contains("(0)"));
  REQUIRE_TS_ERROR(parse_topology(with_line(6, "fan_out = 2.5"), "t.toml"),
                   Contains("positive integer") && Contains("a float (2.5)"));
  REQUIRE_TS_ERROR(parse_topology(with_line(14, "bandwidth_gb_s = -50"), "t.toml"),
                   Contains("t.toml:14:") && Contains("positive number") && Contains("-50"));
  REQUIRE_TS_ERROR(parse_topology(with_line(8, "latency_us = 0.0"), "t.toml"),
                   Contains("t.toml:8:") && Contains("latency_us: expected a positive number"));
  REQUIRE_TS_ERROR(parse_topology(with_line(7, "bandwidth_gb_s = \"450\""), "t.toml"),
                   Contains("bandwidth_gb_s: expected a positive number") &&
                       Contains("found a string ('450')"));
  REQUIRE_TS_ERROR(parse_topology(with_line(4, "name = \"\""), "t.toml"),
                   Contains("t.toml:4:") && Contains("non-empty string"));
}

TEST_CASE("every problem of a topology file is reported at once, in line order", "[unit]") {
  std::string text = with_line(6, "fan_out = -1");
  text = text.substr(0, text.find("latency_us = 9.6")) + "colour = 1\n";
  try {
    parse_topology(text, "t.toml");
    FAIL("expected an Error");
  } catch (const tinyscale::Error& e) {
    const std::string message = e.what();
    const auto fan_out = message.find("t.toml:6:");
    const auto colour = message.find("unknown key 'colour'");
    const auto latency = message.find("missing key 'latency_us'");
    CHECK(fan_out != std::string::npos);
    CHECK(colour != std::string::npos);
    CHECK(latency != std::string::npos);
    CHECK(fan_out < latency);
  }
}

TEST_CASE("a file that is not TOML or not there is an error naming it", "[unit]") {
  REQUIRE_TS_ERROR(parse_topology("name = \n", "bad.toml"),
                   Contains("bad.toml:1:") && Contains("expected valid TOML"));
  REQUIRE_TS_ERROR(parse_topology("levels = 3\nname = \"t\"\ndescription = \"d\"\n", "t.toml"),
                   Contains("t.toml:1:") && Contains("expected [[levels]] tables"));
  REQUIRE_THROWS_AS(load_topology(topology_path("no-such-file.toml")), tinyscale::Error);
  REQUIRE_THROWS_WITH(load_topology(topology_path("no-such-file.toml")),
                      Contains("no-such-file.toml"));
}

TEST_CASE("a one-level topology describes itself without a product", "[unit]") {
  const Topology laptop = load_topology(topology_path("laptop.toml"));
  CHECK(laptop.describe() == "8 devices (shared-memory joins 8 devices into a machine)");
  CHECK(laptop.level_joining(0, 7) == 0);
}
