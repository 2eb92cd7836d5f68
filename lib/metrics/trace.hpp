// Traces (chapter 04): every rank records what it computed and what it communicated, as intervals
// on named streams ("compute", "comm"), and the run writes them as Chrome trace-event JSON that
// Perfetto and chrome://tracing open (one track per rank and stream). The overlap fraction is
// measured from the same events: the communication time during which the rank was computing,
// over all communication time. The easy thing to get wrong: times from different processes only
// line up when every rank measures from a common origin, so the origin is taken right after a
// barrier (on one machine steady_clock is system-wide; across machines it is approximate).
#pragma once

#include "comm/communicator.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace tinyscale::metrics {

using TraceClock = std::chrono::steady_clock;

/// One interval of one rank on one stream. Times are microseconds since the run's origin.
struct TraceEvent {
  int rank = 0;           ///< world rank (the Chrome "pid": one process row per rank)
  std::string stream;     ///< "compute" or "comm" (the Chrome "tid": one track per stream)
  std::string name;       ///< "forward 0", "backward 1", "all_reduce bucket 3", "wait", ...
  std::string category;   ///< "forward", "backward", "optimizer", "comm", "wait", ...
  double start_us = 0;    ///< start, microseconds since the origin
  double duration_us = 0; ///< length in microseconds (>= 0)
  std::int64_t bytes = 0; ///< bytes communicated (comm events; 0 otherwise)

  /// The end of the interval, microseconds since the origin.
  double end_us() const { return start_us + duration_us; }
};

/// Collects one rank's events. Thread-safe: a communication worker may record while the compute
/// thread does. Disabled recorders (enabled() false) make every call a no-op, so the code that
/// records needs no branches.
class TraceRecorder {
public:
  /// A disabled recorder.
  TraceRecorder() = default;
  /// An enabled recorder for world rank `rank`, measuring from `origin`.
  TraceRecorder(int rank, TraceClock::time_point origin);

  /// False for a default-constructed recorder: then every call records nothing.
  bool enabled() const { return enabled_; }
  /// The world rank stamped on every event.
  int rank() const { return rank_; }
  /// The time point that is 0 us in this recorder's events.
  TraceClock::time_point origin() const { return origin_; }

  /// Records [start, end) on `stream`.
  void record(const std::string& stream, const std::string& name, const std::string& category,
              TraceClock::time_point start, TraceClock::time_point end, std::int64_t bytes = 0);

  /// RAII: records [construction, destruction) on `stream`.
  class Scope {
  public:
    Scope(TraceRecorder& recorder, std::string stream, std::string name, std::string category);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

  private:
    TraceRecorder& recorder_;
    std::string stream_, name_, category_;
    TraceClock::time_point start_;
  };

  /// A copy of the events recorded so far, in the order they were recorded.
  std::vector<TraceEvent> events() const;
  /// Forgets every event (for example the warm-up steps of a benchmark).
  void clear();

private:
  bool enabled_ = false;
  int rank_ = 0;
  TraceClock::time_point origin_{};
  mutable std::mutex mutex_;
  std::vector<TraceEvent> events_;
};

/// A barrier on `world`, then now(): the origin every rank of a traced run measures from.
TraceClock::time_point synchronized_origin(comm::Communicator& world);
/// Collective over `world` when `path` is not empty (every rank passes the same path): this
/// rank's enabled recorder, measuring from synchronized_origin(world); nullptr when it is empty.
std::unique_ptr<TraceRecorder> make_trace_recorder(comm::Communicator& world,
                                                   const std::string& path);
/// Collective over `world`: gathers every rank's events of `trace` and writes them to `path`
/// from rank 0, which prints where they went; returns the events on rank 0 (empty elsewhere).
std::vector<TraceEvent> write_gathered_trace(comm::Communicator& world, const TraceRecorder& trace,
                                             const std::string& path);

/// Collective over `world`: returns every rank's `events` on rank 0 (in rank order), and an empty
/// vector on the other ranks. Works on every backend (the events travel as encoded int64 words).
std::vector<TraceEvent> gather_events(comm::Communicator& world,
                                      const std::vector<TraceEvent>& events);

/// Chrome trace-event JSON ({"traceEvents": [...], "displayTimeUnit": "ms"}): one "X" (complete)
/// event per TraceEvent, in order, with ts/dur in microseconds, pid = rank, tid = a small integer
/// per stream ("compute" 0, "comm" 1, others after them by name), cat = category and args
/// {category, bytes}, plus "M" metadata events that name each process "rank R" and each thread by
/// its stream, so Perfetto shows one track per rank and stream.
std::string chrome_trace_json(const std::vector<TraceEvent>& events);
/// Writes chrome_trace_json(events) to `path` (through `path`.partial, renamed when complete);
/// an Error naming the path when it cannot.
void write_chrome_trace(const std::string& path, const std::vector<TraceEvent>& events);
/// Reads a file written by write_chrome_trace (or any trace with "X" events whose pid is an
/// integer; a thread without a thread_name becomes the stream "thread T" for its tid T); an Error
/// naming the path and what is wrong when it is not such a file.
std::vector<TraceEvent> read_chrome_trace(const std::string& path);

/// Communication hidden behind computation (docs/theory.md has no formula; this is the definition).
struct Overlap {
  double comm_us = 0;   ///< total time of "comm" stream events, summed over ranks
  double hidden_us = 0; ///< the part of it during which the same rank had a "compute" event
  /// hidden_us / comm_us (0 when there is no communication).
  double fraction() const { return comm_us > 0 ? hidden_us / comm_us : 0.0; }
};
/// Measures the overlap of each rank's "comm" events with the union of its "compute" events
/// (events of category "wait" do not count as compute: a rank waiting for communication is not
/// hiding it), summed over ranks. The streams can be named: context parallelism's ring records
/// its attention on "ring" and its transfers on "ring comm" (cp/ring_attention.hpp).
Overlap measure_overlap(const std::vector<TraceEvent>& events,
                        const std::string& compute_stream = "compute",
                        const std::string& comm_stream = "comm");

/// Time per category of the events on `stream`, summed over ranks, divided by the number of ranks
/// in `events` (all streams), in microseconds, in order of first appearance (the step-time
/// breakdown: forward, backward, wait, optimizer, ...).
std::vector<std::pair<std::string, double>> time_by_category(const std::vector<TraceEvent>& events,
                                                             const std::string& stream);

/// An ASCII timeline, `width` columns wide: a scale line, then one row per rank and stream (rank
/// order; "compute" first, then "comm", then the others) like "rank 0 compute |FFFFBBBBBB..W.O|",
/// each column showing the category that covers most of its time slice ('.' when idle time covers
/// more than any category), then a legend. A category's letter is the first letter of its name,
/// upper case, not taken by a category seen earlier ("comm" is C, then "compute" would be O).
std::string render_timeline(const std::vector<TraceEvent>& events, int width = 100);

} // namespace tinyscale::metrics
