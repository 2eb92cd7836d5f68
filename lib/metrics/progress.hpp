// A training progress bar with an ETA (chapter 02). On a terminal one line is redrawn with '\r';
// in a pipe or CI log a plain line is written only when the status changes, so logs stay short.
// Easy to get wrong: the first step pays for warm-up (allocation, page faults, caches), so the
// rate behind the ETA is measured from the first update on, and there is no ETA ("--") before it.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

namespace tinyscale::metrics {

/// "0:05", "1:05", "1:02:03" (seconds rounded to the nearest); "--" for a negative or non-finite
/// duration.
std::string format_duration(double seconds);

/// A progress bar for `total` steps written to `out`.
class Progress {
public:
  /// Seconds on some monotonic clock; injectable so tests control time.
  using Clock = std::function<double()>;

  /// Starts the clock. `interactive`: redraw one line in place (a terminal); else plain lines.
  Progress(std::int64_t total, std::ostream& out, bool interactive, Clock clock = {});

  /// Reports `done` of total steps (0 <= done <= total) with a short status such as the loss.
  void update(std::int64_t done, const std::string& status);
  /// Reports completion: the final line with the total elapsed time, then a newline.
  void finish(const std::string& status);

  /// The line update() would draw now, without the bar (for logs and tests).
  std::string line(std::int64_t done, const std::string& status) const;

private:
  double now() const;

  std::int64_t total_;
  std::ostream& out_;
  bool interactive_;
  Clock clock_;
  double start_ = 0;
  bool have_first_ = false;     // the first update happened: the rate is measured from it
  double first_time_ = 0;       // time of the first update
  std::int64_t first_done_ = 0; // steps done at the first update
  std::string last_status_;     // non-interactive: the last status written
  bool wrote_status_ = false;   // non-interactive: any line written yet
  std::size_t last_width_ = 0;  // interactive: length of the line drawn last, to blank it
};

} // namespace tinyscale::metrics
