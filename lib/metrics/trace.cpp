// Traces (chapter 04): the recorder, the gather to rank 0, Chrome trace-event JSON, and the three
// readings of a trace (overlap, time per category, an ASCII timeline).
// The easy thing to get wrong: overlap is measured against the *union* of a rank's compute
// intervals (two compute events at once must not hide the same communication twice), and "wait"
// events are not compute: a rank blocked on a handle hides nothing.
#include "metrics/trace.hpp"

#include "comm/tensor_comm.hpp"
#include "core/error.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace tinyscale::metrics {

// ---- recording -------------------------------------------------------------------------------

TraceRecorder::TraceRecorder(int rank, TraceClock::time_point origin)
    : enabled_(true), rank_(rank), origin_(origin) {}

void TraceRecorder::record(const std::string& stream, const std::string& name,
                           const std::string& category, TraceClock::time_point start,
                           TraceClock::time_point end, std::int64_t bytes) {
  if (!enabled_) return;
  using Micros = std::chrono::duration<double, std::micro>;
  TraceEvent event{rank_,
                   stream,
                   name,
                   category,
                   Micros(start - origin_).count(),
                   std::max(0.0, Micros(end - start).count()),
                   bytes};
  std::lock_guard<std::mutex> lock(mutex_);
  events_.push_back(std::move(event));
}

TraceRecorder::Scope::Scope(TraceRecorder& recorder, std::string stream, std::string name,
                            std::string category)
    : recorder_(recorder), stream_(std::move(stream)), name_(std::move(name)),
      category_(std::move(category)),
      start_(recorder.enabled() ? TraceClock::now() : TraceClock::time_point{}) {}

TraceRecorder::Scope::~Scope() {
  if (recorder_.enabled()) recorder_.record(stream_, name_, category_, start_, TraceClock::now());
}

std::vector<TraceEvent> TraceRecorder::events() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_;
}

void TraceRecorder::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  events_.clear();
}

TraceClock::time_point synchronized_origin(comm::Communicator& world) {
  world.barrier();
  return TraceClock::now();
}

std::unique_ptr<TraceRecorder> make_trace_recorder(comm::Communicator& world,
                                                   const std::string& path) {
  if (path.empty()) return nullptr;
  return std::make_unique<TraceRecorder>(world.rank(), synchronized_origin(world));
}

std::vector<TraceEvent> write_gathered_trace(comm::Communicator& world, const TraceRecorder& trace,
                                             const std::string& path) {
  std::vector<TraceEvent> events = gather_events(world, trace.events());
  if (world.rank() != 0) return events;
  write_chrome_trace(path, events);
  std::printf("trace: %s (%zu events; open it in https://ui.perfetto.dev or run `tinyscale "
              "trace %s`)\n",
              path.c_str(), events.size(), path.c_str());
  return events;
}

// ---- gather: events as int64 words ------------------------------------------------------------
// Layout: [event count] then per event [rank][stream][name][category][start][duration][bytes],
// where a string is [byte length][bytes packed 8 per word] and a double is its bit pattern.

namespace {

constexpr int kGatherTag = 7304; // any tag >= 0 that nothing else uses during the gather

void put_string(std::vector<std::int64_t>& words, const std::string& s) {
  words.push_back(static_cast<std::int64_t>(s.size()));
  const std::size_t first = words.size();
  words.resize(first + (s.size() + 7) / 8, 0);
  if (!s.empty()) std::memcpy(words.data() + first, s.data(), s.size());
}

std::vector<std::int64_t> encode_events(const std::vector<TraceEvent>& events) {
  std::vector<std::int64_t> words = {static_cast<std::int64_t>(events.size())};
  for (const TraceEvent& e : events) {
    words.push_back(e.rank);
    put_string(words, e.stream);
    put_string(words, e.name);
    put_string(words, e.category);
    words.push_back(std::bit_cast<std::int64_t>(e.start_us));
    words.push_back(std::bit_cast<std::int64_t>(e.duration_us));
    words.push_back(e.bytes);
  }
  return words;
}

/// Reads words in order; every read checks that the message is long enough.
class WordReader {
public:
  WordReader(const std::vector<std::int64_t>& words, int from) : words_(words), from_(from) {}

  std::int64_t next() {
    TS_CHECK(at_ < words_.size(), "gather_events: the message from rank ", from_, " ended early (",
             words_.size(),
             " words); expected more event fields. Every rank must call gather_events with "
             "the same build of tinyscale");
    return words_[at_++];
  }
  std::string next_string() {
    const std::int64_t length = next();
    const std::size_t n_words = (static_cast<std::size_t>(length) + 7) / 8;
    TS_CHECK(length >= 0 && at_ + n_words <= words_.size(), "gather_events: the message from rank ",
             from_, " holds a string of ", length, " bytes that does not fit in its ",
             words_.size(), " words; the message is corrupt");
    std::string s(static_cast<std::size_t>(length), '\0');
    if (length > 0) std::memcpy(s.data(), words_.data() + at_, s.size());
    at_ += n_words;
    return s;
  }
  double next_double() { return std::bit_cast<double>(next()); }
  /// Throws unless every word was read (a longer message means the sender wrote another layout).
  void expect_end() const {
    TS_CHECK(
        at_ == words_.size(), "gather_events: the message from rank ", from_, " holds ",
        words_.size(), " words, expected ", at_,
        " for its events; every rank must call gather_events with the same build of tinyscale");
  }

private:
  const std::vector<std::int64_t>& words_;
  int from_;
  std::size_t at_ = 0;
};

void decode_events(const std::vector<std::int64_t>& words, int from, std::vector<TraceEvent>& out) {
  WordReader in(words, from);
  const std::int64_t count = in.next();
  for (std::int64_t i = 0; i < count; ++i) {
    TraceEvent e;
    e.rank = static_cast<int>(in.next());
    e.stream = in.next_string();
    e.name = in.next_string();
    e.category = in.next_string();
    e.start_us = in.next_double();
    e.duration_us = in.next_double();
    e.bytes = in.next();
    out.push_back(std::move(e));
  }
  in.expect_end();
}

} // namespace

std::vector<TraceEvent> gather_events(comm::Communicator& world,
                                      const std::vector<TraceEvent>& events) {
  const std::vector<std::int64_t> words = encode_events(events);
  // Through tensors, so a communicator that reads only device memory (nccl) gets them staged.
  const std::int64_t my_count = static_cast<std::int64_t>(words.size());
  const std::vector<std::int64_t> counts =
      comm::all_gather_values(world, std::vector<std::int64_t>{my_count});
  if (world.rank() != 0) {
    comm::send(world, Tensor::from_ids(words, Shape({my_count})), 0, kGatherTag);
    return {};
  }
  std::vector<TraceEvent> all = events;
  for (int r = 1; r < world.size(); ++r) {
    Tensor theirs = Tensor::empty(Shape({counts[r]}), DType::Int64);
    comm::recv(world, theirs, r, kGatherTag);
    const std::int64_t* p = theirs.data<std::int64_t>();
    decode_events({p, p + counts[r]}, r, all);
  }
  return all;
}

// ---- Chrome trace-event JSON -------------------------------------------------------------------

namespace {

/// "compute" first, "comm" second, every other stream after them by name.
bool stream_before(const std::string& a, const std::string& b) {
  auto group = [](const std::string& s) { return s == "compute" ? 0 : s == "comm" ? 1 : 2; };
  if (group(a) != group(b)) return group(a) < group(b);
  return a < b;
}

/// Every stream of `events`, in display order; a stream's index here is its Chrome tid.
std::vector<std::string> ordered_streams(const std::vector<TraceEvent>& events) {
  std::set<std::string> seen;
  for (const TraceEvent& e : events) seen.insert(e.stream);
  std::vector<std::string> streams(seen.begin(), seen.end());
  std::sort(streams.begin(), streams.end(), stream_before);
  return streams;
}

nlohmann::json metadata_event(const char* what, int pid, int tid, const std::string& name) {
  return {{"ph", "M"}, {"name", what}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}};
}

} // namespace

std::string chrome_trace_json(const std::vector<TraceEvent>& events) {
  const std::vector<std::string> streams = ordered_streams(events);
  auto tid_of = [&](const std::string& stream) {
    return static_cast<int>(std::find(streams.begin(), streams.end(), stream) - streams.begin());
  };
  std::set<std::pair<int, int>> threads; // (pid, tid) pairs that appear
  for (const TraceEvent& e : events) threads.insert({e.rank, tid_of(e.stream)});

  nlohmann::json trace = nlohmann::json::array();
  std::set<int> named_ranks;
  for (const auto& [pid, tid] : threads) {
    if (named_ranks.insert(pid).second)
      trace.push_back(metadata_event("process_name", pid, 0, "rank " + std::to_string(pid)));
    trace.push_back(metadata_event("thread_name", pid, tid, streams[tid]));
  }
  for (const TraceEvent& e : events) {
    trace.push_back({{"ph", "X"},
                     {"name", e.name},
                     {"cat", e.category},
                     {"ts", e.start_us},
                     {"dur", e.duration_us},
                     {"pid", e.rank},
                     {"tid", tid_of(e.stream)},
                     {"args", {{"category", e.category}, {"bytes", e.bytes}}}});
  }
  return nlohmann::json{{"traceEvents", trace}, {"displayTimeUnit", "ms"}}.dump(1) + "\n";
}

void write_chrome_trace(const std::string& path, const std::vector<TraceEvent>& events) {
  const std::string text = chrome_trace_json(events);
  // Write a neighbour file and rename it, so a reader never sees half a trace.
  const std::string partial = path + ".partial";
  {
    std::ofstream out(partial, std::ios::binary | std::ios::trunc);
    TS_CHECK(out.good(), "write_chrome_trace: cannot open ", partial,
             " for writing; check that the directory exists and is writable");
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.close();
    TS_CHECK(!out.fail(), "write_chrome_trace: writing ", text.size(), " bytes to ", partial,
             " failed (disk full?); the trace was not written to ", path);
  }
  std::error_code error;
  std::filesystem::rename(partial, path, error);
  if (error) std::filesystem::remove(partial, error);
  TS_CHECK(!error, "write_chrome_trace: cannot move the finished trace to ", path, ": ",
           error.message());
}

namespace {

/// The stream names of a trace: (pid, tid) -> the thread_name metadata.
using ThreadNames = std::map<std::pair<std::int64_t, std::string>, std::string>;

/// e[key] when it is a string, else "" (a foreign trace may hold anything).
std::string string_field(const nlohmann::json& e, const char* key) {
  const auto it = e.find(key);
  return it != e.end() && it->is_string() ? it->get<std::string>() : std::string();
}

/// A tid as text: traces may give it as a number or a string.
std::string tid_text(const nlohmann::json& tid) {
  return tid.is_string() ? tid.get<std::string>() : tid.dump();
}

ThreadNames thread_names(const nlohmann::json& trace) {
  ThreadNames names;
  for (const nlohmann::json& e : trace) {
    if (!e.is_object() || string_field(e, "ph") != "M" || string_field(e, "name") != "thread_name")
      continue;
    if (!e.contains("pid") || !e["pid"].is_number_integer() || !e.contains("tid")) continue;
    const auto args = e.value("args", nlohmann::json::object());
    if (args.is_object() && args.contains("name") && args["name"].is_string())
      names[{e["pid"].get<std::int64_t>(), tid_text(e["tid"])}] = args["name"].get<std::string>();
  }
  return names;
}

TraceEvent parse_complete_event(const nlohmann::json& e, std::size_t index,
                                const ThreadNames& names, const std::string& path) {
  auto where = [&] { return detail::concat(path, ": traceEvents[", index, "] (\"X\" event)"); };
  TS_CHECK(e.contains("pid") && e["pid"].is_number_integer(), where(),
           ": expected an integer \"pid\" (the rank), found ", e.value("pid", nlohmann::json()));
  TS_CHECK(e.contains("ts") && e["ts"].is_number() && e.contains("dur") && e["dur"].is_number(),
           where(), ": expected numbers \"ts\" and \"dur\" (microseconds), found ", e.dump());
  TraceEvent out;
  out.rank = e["pid"].get<int>();
  const std::string tid = e.contains("tid") ? tid_text(e["tid"]) : "0";
  const auto named = names.find({out.rank, tid});
  out.stream = named != names.end() ? named->second : "thread " + tid;
  out.name = string_field(e, "name");
  out.start_us = e["ts"].get<double>();
  out.duration_us = e["dur"].get<double>();
  const auto args = e.value("args", nlohmann::json::object());
  out.category = string_field(e, "cat");
  if (args.is_object() && args.contains("category") && args["category"].is_string())
    out.category = args["category"].get<std::string>();
  if (args.is_object() && args.contains("bytes") && args["bytes"].is_number_integer())
    out.bytes = args["bytes"].get<std::int64_t>();
  return out;
}

} // namespace

std::vector<TraceEvent> read_chrome_trace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TS_CHECK(in.good(), "read_chrome_trace: cannot open ", path,
           "; expected a Chrome trace JSON file written by a traced run (check the path)");
  const nlohmann::json doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  TS_CHECK(!doc.is_discarded(), "read_chrome_trace: ", path,
           " is not JSON; expected a Chrome trace ({\"traceEvents\": [...]})");
  // Chrome accepts both {"traceEvents": [...]} and a bare array of events.
  const bool wrapped = doc.is_object() && doc.contains("traceEvents");
  const nlohmann::json& trace = wrapped ? doc["traceEvents"] : doc;
  TS_CHECK(trace.is_array(), "read_chrome_trace: ", path,
           " is JSON but not a Chrome trace; expected an object with a \"traceEvents\" array, "
           "found ",
           doc.is_object() ? "an object without one" : doc.type_name());
  const ThreadNames names = thread_names(trace);
  std::vector<TraceEvent> events;
  for (std::size_t i = 0; i < trace.size(); ++i) {
    const nlohmann::json& e = trace[i];
    if (e.is_object() && string_field(e, "ph") == "X")
      events.push_back(parse_complete_event(e, i, names, path));
  }
  return events;
}

// ---- reading a trace ---------------------------------------------------------------------------

namespace {

struct Interval {
  double start, end;
};

/// The union of `intervals` as disjoint intervals sorted by start.
std::vector<Interval> merge_intervals(std::vector<Interval> intervals) {
  std::sort(intervals.begin(), intervals.end(),
            [](const Interval& a, const Interval& b) { return a.start < b.start; });
  std::vector<Interval> merged;
  for (const Interval& i : intervals) {
    if (!merged.empty() && i.start <= merged.back().end)
      merged.back().end = std::max(merged.back().end, i.end);
    else
      merged.push_back(i);
  }
  return merged;
}

/// How much of [start, end) the disjoint intervals `cover` cover.
double covered_us(const std::vector<Interval>& cover, double start, double end) {
  double total = 0;
  for (const Interval& c : cover)
    total += std::max(0.0, std::min(end, c.end) - std::max(start, c.start));
  return total;
}

std::set<int> ranks_of(const std::vector<TraceEvent>& events) {
  std::set<int> ranks;
  for (const TraceEvent& e : events) ranks.insert(e.rank);
  return ranks;
}

} // namespace

Overlap measure_overlap(const std::vector<TraceEvent>& events, const std::string& compute_stream,
                        const std::string& comm_stream) {
  Overlap overlap;
  for (int rank : ranks_of(events)) {
    std::vector<Interval> compute;
    for (const TraceEvent& e : events)
      if (e.rank == rank && e.stream == compute_stream && e.category != "wait")
        compute.push_back({e.start_us, e.end_us()});
    const std::vector<Interval> busy = merge_intervals(std::move(compute));
    for (const TraceEvent& e : events) {
      if (e.rank != rank || e.stream != comm_stream) continue;
      overlap.comm_us += e.duration_us;
      overlap.hidden_us += covered_us(busy, e.start_us, e.end_us());
    }
  }
  return overlap;
}

std::vector<std::pair<std::string, double>> time_by_category(const std::vector<TraceEvent>& events,
                                                             const std::string& stream) {
  std::vector<std::pair<std::string, double>> totals;
  for (const TraceEvent& e : events) {
    if (e.stream != stream) continue;
    auto it = std::find_if(totals.begin(), totals.end(),
                           [&](const auto& t) { return t.first == e.category; });
    if (it == totals.end()) it = totals.insert(totals.end(), {e.category, 0.0});
    it->second += e.duration_us;
  }
  const double ranks = static_cast<double>(ranks_of(events).size());
  for (auto& t : totals) t.second /= ranks;
  return totals;
}

// ---- the ASCII timeline ------------------------------------------------------------------------

namespace {

/// One letter per category, in order of first appearance: the first letter of its name not yet
/// taken (upper case), so "forward" is F, "backward" B, "comm" C, and a second "c..." category
/// takes another of its letters. '.' is idle and never given out.
std::vector<std::pair<std::string, char>> assign_letters(const std::vector<TraceEvent>& events) {
  std::vector<std::pair<std::string, char>> letters;
  std::set<char> taken = {'.'};
  for (const TraceEvent& e : events) {
    auto known = [&](const auto& l) { return l.first == e.category; };
    if (std::any_of(letters.begin(), letters.end(), known)) continue;
    char letter = '?';
    std::string candidates = e.category + "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    for (char c : candidates) {
      const char up = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      if (std::isalnum(static_cast<unsigned char>(up)) && !taken.count(up)) {
        letter = up;
        break;
      }
    }
    taken.insert(letter);
    letters.push_back({e.category, letter});
  }
  return letters;
}

/// One row: per column, the letter of the category covering most of the slice, or '.' when
/// idle time covers more than any category.
std::string render_row(const std::vector<const TraceEvent*>& row,
                       const std::vector<std::pair<std::string, char>>& letters, double t0,
                       double slice, int width) {
  std::vector<std::vector<double>> cover(width, std::vector<double>(letters.size(), 0.0));
  for (const TraceEvent* e : row) {
    const std::size_t k = std::find_if(letters.begin(), letters.end(),
                                       [&](const auto& l) { return l.first == e->category; }) -
                          letters.begin();
    const int first = std::clamp(static_cast<int>((e->start_us - t0) / slice), 0, width - 1);
    const int last = std::clamp(static_cast<int>((e->end_us() - t0) / slice), 0, width - 1);
    for (int c = first; c <= last; ++c) {
      const double a = t0 + c * slice, b = a + slice;
      cover[c][k] += std::max(0.0, std::min(b, e->end_us()) - std::max(a, e->start_us));
    }
  }
  std::string out(static_cast<std::size_t>(width), '.');
  for (int c = 0; c < width; ++c) {
    const auto best = std::max_element(cover[c].begin(), cover[c].end());
    if (best == cover[c].end() || *best <= 0) continue;
    double busy = 0;
    for (double v : cover[c]) busy += v;
    if (slice - busy > *best) continue; // mostly idle
    out[c] = letters[best - cover[c].begin()].second;
  }
  return out;
}

std::string format_ms(double us) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f ms", us / 1000.0);
  return buf;
}

} // namespace

std::string render_timeline(const std::vector<TraceEvent>& events, int width) {
  TS_CHECK(width >= 1, "render_timeline: expected a width of at least 1 column, found ", width);
  if (events.empty()) return "timeline: no events\n";
  double t0 = events.front().start_us, t1 = events.front().end_us();
  for (const TraceEvent& e : events) {
    t0 = std::min(t0, e.start_us);
    t1 = std::max(t1, e.end_us());
  }
  const double span = std::max(t1 - t0, 1e-3); // a trace of zero-length events still renders
  const double slice = span / width;

  // Rows: rank order, then "compute", "comm", other streams.
  std::map<int, std::map<std::string, std::vector<const TraceEvent*>, decltype(&stream_before)>>
      rows;
  for (const TraceEvent& e : events)
    rows.try_emplace(e.rank, &stream_before).first->second[e.stream].push_back(&e);
  std::vector<std::pair<std::string, const std::vector<const TraceEvent*>*>> labelled;
  std::size_t label_width = 0;
  for (const auto& [rank, streams] : rows)
    for (const auto& [stream, row] : streams) {
      labelled.push_back({"rank " + std::to_string(rank) + " " + stream, &row});
      label_width = std::max(label_width, labelled.back().first.size());
    }

  const auto letters = assign_letters(events);
  std::ostringstream out;
  out << "timeline: " << format_ms(span) << " from t = " << format_ms(t0) << ", " << width
      << " columns of " << format_ms(slice) << "\n";
  for (const auto& [label, row] : labelled)
    out << label << std::string(label_width - label.size(), ' ') << " |"
        << render_row(*row, letters, t0, slice, width) << "|\n";
  out << "legend:";
  for (const auto& [category, letter] : letters) out << "  " << letter << " " << category;
  out << "  . idle\n";
  return out.str();
}

} // namespace tinyscale::metrics
