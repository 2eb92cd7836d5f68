// Traces (chapter 04): the recorder, the Chrome JSON round trip, and the readings of a trace on
// hand-made intervals whose answers are known exactly (every time here is a small binary
// fraction, so sums are exact and comparisons can be ==).
#include "metrics/trace.hpp"
#include "require_ts_error.hpp"
#include "scratch_dir.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <map>
#include <thread>

using namespace tinyscale;
using namespace tinyscale::metrics;
using Catch::Matchers::Contains;

namespace {

TraceEvent event(int rank, const std::string& stream, const std::string& category, double start,
                 double duration, std::int64_t bytes = 0) {
  return {rank, stream, category + " event", category, start, duration, bytes};
}

void require_same(const TraceEvent& got, const TraceEvent& want) {
  CHECK(got.rank == want.rank);
  CHECK(got.stream == want.stream);
  CHECK(got.name == want.name);
  CHECK(got.category == want.category);
  CHECK(got.start_us == want.start_us);
  CHECK(got.duration_us == want.duration_us);
  CHECK(got.bytes == want.bytes);
}

} // namespace

// ---- the recorder ------------------------------------------------------------------------------

TEST_CASE("a disabled recorder records nothing, by record or by Scope", "[trace]") {
  TraceRecorder recorder;
  REQUIRE_FALSE(recorder.enabled());
  const auto now = TraceClock::now();
  recorder.record("compute", "forward 0", "forward", now, now + std::chrono::milliseconds(1));
  { TraceRecorder::Scope scope(recorder, "comm", "all_reduce", "comm"); }
  REQUIRE(recorder.events().empty());
}

TEST_CASE("record measures from the origin in microseconds, and a reversed interval has length 0",
          "[trace]") {
  const auto origin = TraceClock::now();
  TraceRecorder recorder(3, origin);
  REQUIRE(recorder.enabled());
  REQUIRE(recorder.rank() == 3);
  using std::chrono::microseconds;
  recorder.record("comm", "all_reduce bucket 1", "comm", origin + microseconds(10),
                  origin + microseconds(35), 4096);
  recorder.record("compute", "odd", "forward", origin + microseconds(8), origin + microseconds(5));
  const auto events = recorder.events();
  REQUIRE(events.size() == 2);
  require_same(events[0], {3, "comm", "all_reduce bucket 1", "comm", 10.0, 25.0, 4096});
  CHECK(events[1].start_us == 8.0);
  CHECK(events[1].duration_us == 0.0);
  recorder.clear();
  REQUIRE(recorder.events().empty());
}

TEST_CASE("a Scope records the interval of its lifetime on its stream", "[trace]") {
  TraceRecorder recorder(0, TraceClock::now());
  const auto before = TraceClock::now();
  {
    TraceRecorder::Scope scope(recorder, "compute", "backward 2", "backward");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const double elapsed_us =
      std::chrono::duration<double, std::micro>(TraceClock::now() - before).count();
  const auto events = recorder.events();
  REQUIRE(events.size() == 1);
  CHECK(events[0].stream == "compute");
  CHECK(events[0].name == "backward 2");
  CHECK(events[0].category == "backward");
  CHECK(events[0].start_us >= 0);
  CHECK(events[0].duration_us >= 2000);
  CHECK(events[0].duration_us <= elapsed_us);
}

TEST_CASE("two threads recording at once lose no event", "[trace]") {
  TraceRecorder recorder(0, TraceClock::now());
  auto work = [&](const std::string& stream) {
    for (int i = 0; i < 1000; ++i) TraceRecorder::Scope scope(recorder, stream, "op", "forward");
  };
  std::thread compute(work, "compute"), comm(work, "comm");
  compute.join();
  comm.join();
  REQUIRE(recorder.events().size() == 2000);
}

// ---- Chrome JSON -------------------------------------------------------------------------------

TEST_CASE("write_chrome_trace then read_chrome_trace gives back every event exactly", "[trace]") {
  const std::vector<TraceEvent> events = {
      {0, "compute", "forward 0", "forward", 0.125, 1234.5678901234, 0},
      {0, "comm", "all_reduce bucket 0", "comm", 600.0000001, 250.75, 123456789012},
      {1, "compute", "backward 0", "backward", 3.0e6, 1.0 / 3.0, 0},
      {1, "custom", "", "", 7.0, 0.0, 0}};
  testing::ScratchDir dir;
  const std::string path = dir / "trace.json";
  write_chrome_trace(path, events);
  const auto back = read_chrome_trace(path);
  REQUIRE(back.size() == events.size());
  for (std::size_t i = 0; i < events.size(); ++i) require_same(back[i], events[i]);
}

TEST_CASE("the Chrome JSON names each rank's process and each stream's thread", "[trace]") {
  const std::vector<TraceEvent> events = {event(1, "comm", "comm", 5, 1, 64),
                                          event(0, "compute", "forward", 0, 2),
                                          event(1, "compute", "backward", 2, 3)};
  const auto doc = nlohmann::json::parse(chrome_trace_json(events));
  REQUIRE(doc["displayTimeUnit"] == "ms");
  std::map<std::string, std::string> names; // "process 1" / "thread 1 0" -> name
  int complete = 0;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name")
      names["process " + e["pid"].dump()] = e["args"]["name"];
    if (e["ph"] == "M" && e["name"] == "thread_name")
      names["thread " + e["pid"].dump() + " " + e["tid"].dump()] = e["args"]["name"];
    if (e["ph"] == "X") {
      ++complete;
      REQUIRE(e["cat"] == e["args"]["category"]);
    }
  }
  CHECK(complete == 3);
  CHECK(names["process 0"] == "rank 0");
  CHECK(names["process 1"] == "rank 1");
  // "compute" is tid 0 and "comm" tid 1 on every rank: compute is drawn first.
  CHECK(names["thread 0 0"] == "compute");
  CHECK(names["thread 1 0"] == "compute");
  CHECK(names["thread 1 1"] == "comm");
  CHECK(names.count("thread 0 1") == 0);        // rank 0 has no comm events
  const auto& last = doc["traceEvents"].back(); // the X events keep the order of `events`
  CHECK(last["ts"] == 2.0);
  CHECK(last["dur"] == 3.0);
  CHECK(last["pid"] == 1);
}

TEST_CASE("read_chrome_trace reads a foreign trace: a bare array, threads without names",
          "[trace]") {
  testing::ScratchDir dir;
  const std::string path = dir / "foreign.json";
  testing::write_bytes(path, R"([{"ph": "B", "pid": 0, "tid": 0, "ts": 1},
    {"ph": "X", "name": "kernel", "cat": "gpu", "pid": 2, "tid": 7, "ts": 10, "dur": 5}])");
  const auto events = read_chrome_trace(path);
  REQUIRE(events.size() == 1);
  require_same(events[0], {2, "thread 7", "kernel", "gpu", 10.0, 5.0, 0});
}

TEST_CASE("read_chrome_trace names the path and the problem when the file is not a trace",
          "[trace]") {
  testing::ScratchDir dir;
  const std::string missing = dir / "missing.json";
  REQUIRE_TS_ERROR(read_chrome_trace(missing), Contains(missing) && Contains("cannot open"));
  const std::string text = dir / "notes.txt";
  testing::write_bytes(text, "step 1: loss 3.2\n");
  REQUIRE_TS_ERROR(read_chrome_trace(text), Contains(text) && Contains("is not JSON"));
  const std::string config = dir / "config.json";
  testing::write_bytes(config, R"({"model": {"layers": 2}})");
  REQUIRE_TS_ERROR(read_chrome_trace(config),
                   Contains(config) && Contains("not a Chrome trace") && Contains("traceEvents"));
  const std::string bad_pid = dir / "bad_pid.json";
  testing::write_bytes(bad_pid,
                       R"({"traceEvents": [{"ph": "X", "pid": "gpu", "ts": 0, "dur": 1}]})");
  REQUIRE_TS_ERROR(read_chrome_trace(bad_pid),
                   Contains(bad_pid) && Contains("traceEvents[0]") && Contains("\"pid\""));
}

TEST_CASE("write_chrome_trace names the path when it cannot write", "[trace]") {
  testing::ScratchDir dir;
  const std::string path = dir / "no_such_dir/trace.json";
  REQUIRE_TS_ERROR(write_chrome_trace(path, {event(0, "compute", "forward", 0, 1)}),
                   Contains("no_such_dir") && Contains("cannot open"));
}

// ---- overlap -----------------------------------------------------------------------------------

TEST_CASE("overlap counts the part of a comm event that falls inside compute", "[trace]") {
  const Overlap o =
      measure_overlap({event(0, "compute", "backward", 0, 100), event(0, "comm", "comm", 50, 100)});
  CHECK(o.comm_us == 100.0);
  CHECK(o.hidden_us == 50.0);
  CHECK(o.fraction() == 0.5);
}

TEST_CASE("overlap uses the union of compute events: overlapping ones do not count twice",
          "[trace]") {
  const Overlap o =
      measure_overlap({event(0, "compute", "backward", 0, 100),
                       event(0, "compute", "optimizer", 50, 70), // [50, 120): inside and beyond
                       event(0, "comm", "comm", 60, 100)});      // [60, 160)
  CHECK(o.comm_us == 100.0);
  CHECK(o.hidden_us == 60.0); // [60, 120)
}

TEST_CASE("overlap does not count wait events as compute", "[trace]") {
  const Overlap o =
      measure_overlap({event(0, "compute", "backward", 0, 50), event(0, "compute", "wait", 50, 50),
                       event(0, "comm", "comm", 0, 100)});
  CHECK(o.comm_us == 100.0);
  CHECK(o.hidden_us == 50.0);
  CHECK(o.fraction() == 0.5);
}

TEST_CASE("overlap is per rank: one rank's compute never hides another's communication",
          "[trace]") {
  const Overlap o = measure_overlap({event(0, "compute", "backward", 0, 100),
                                     event(0, "comm", "comm", 50, 100), // 50 of 100 hidden
                                     event(1, "compute", "backward", 100, 200),
                                     event(1, "comm", "comm", 0, 100)}); // none hidden
  CHECK(o.comm_us == 200.0);
  CHECK(o.hidden_us == 50.0);
  CHECK(o.fraction() == 0.25);
}

TEST_CASE("overlap of a trace without communication is 0, not a division by zero", "[trace]") {
  const Overlap o = measure_overlap({event(0, "compute", "forward", 0, 10)});
  CHECK(o.comm_us == 0.0);
  CHECK(o.fraction() == 0.0);
}

// ---- time by category --------------------------------------------------------------------------

TEST_CASE("time_by_category is the mean over ranks, in order of first appearance", "[trace]") {
  const std::vector<TraceEvent> events = {
      event(0, "compute", "forward", 0, 30), event(0, "compute", "backward", 30, 60),
      event(0, "comm", "comm", 30, 64),      event(0, "compute", "forward", 90, 10),
      event(1, "compute", "forward", 0, 20), event(1, "compute", "backward", 20, 40),
      event(1, "compute", "wait", 60, 10),   event(1, "comm", "comm", 20, 16)};
  const auto compute = time_by_category(events, "compute");
  REQUIRE(compute.size() == 3);
  CHECK(compute[0] == std::pair<std::string, double>{"forward", 30.0}); // (30 + 10 + 20) / 2
  CHECK(compute[1] == std::pair<std::string, double>{"backward", 50.0});
  CHECK(compute[2] == std::pair<std::string, double>{"wait", 5.0});
  const auto comm = time_by_category(events, "comm");
  REQUIRE(comm.size() == 1);
  CHECK(comm[0] == std::pair<std::string, double>{"comm", 40.0});
  CHECK(time_by_category(events, "no such stream").empty());
}

// ---- the timeline ------------------------------------------------------------------------------

TEST_CASE("render_timeline draws a row per rank and stream, compute first, letters per slice",
          "[trace]") {
  // 100 us in 10 columns of 10 us each.
  const std::vector<TraceEvent> events = {
      event(0, "comm", "comm", 20, 80), event(0, "compute", "forward", 0, 40),
      event(0, "compute", "backward", 40, 40), event(1, "compute", "forward", 0, 60),
      event(1, "compute", "wait", 60, 40)};
  const std::string t = render_timeline(events, 10);
  INFO(t);
  CHECK_THAT(t, Contains("0.100 ms"));
  CHECK_THAT(t, Contains("rank 0 compute |FFFFBBBB..|"));
  CHECK_THAT(t, Contains("rank 0 comm    |..CCCCCCCC|"));
  CHECK_THAT(t, Contains("rank 1 compute |FFFFFFWWWW|"));
  CHECK(t.find("rank 1 comm") == std::string::npos);
  CHECK(t.find("rank 0 compute") < t.find("rank 0 comm"));
  CHECK(t.find("rank 0 comm") < t.find("rank 1 compute"));
  CHECK_THAT(t, Contains("C comm") && Contains("F forward") && Contains("B backward") &&
                    Contains("W wait") && Contains(". idle"));
}

TEST_CASE("render_timeline shows '.' where idle time covers most of a column", "[trace]") {
  // Column 1 holds 4 us of forward and 6 us idle; column 9 is half backward (a tie: the event).
  const std::string t = render_timeline(
      {event(0, "compute", "forward", 0, 14), event(0, "compute", "backward", 95, 5)}, 10);
  INFO(t);
  CHECK_THAT(t, Contains("rank 0 compute |F........B|"));
}

TEST_CASE("render_timeline gives categories with the same initial letter different letters",
          "[trace]") {
  const std::string t = render_timeline(
      {event(0, "comm", "all_reduce", 0, 50), event(0, "comm", "all_gather", 50, 50)}, 4);
  INFO(t);
  CHECK_THAT(t, Contains("|AALL|"));
  CHECK_THAT(t, Contains("A all_reduce") && Contains("L all_gather"));
}
