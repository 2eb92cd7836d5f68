// The progress bar and its ETA (chapter 02).
#include "metrics/progress.hpp"

#include "core/error.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>

namespace tinyscale::metrics {

namespace {
constexpr int kBarWidth = 20;
} // namespace

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--";
  const long long s = std::llround(seconds);
  char buf[48];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld", s / 60, s % 60);
  return buf;
}

Progress::Progress(std::int64_t total, std::ostream& out, bool interactive, Clock clock)
    : total_(total), out_(out), interactive_(interactive), clock_(std::move(clock)) {
  TS_CHECK(total >= 0, "Progress: expected a total of >= 0 steps, found ", total);
  start_ = now();
}

double Progress::now() const {
  if (clock_) return clock_();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string Progress::line(std::int64_t done, const std::string& status) const {
  const double t = now();
  const int percent = total_ > 0 ? static_cast<int>(100 * done / total_) : 100;
  // Rate from the first update on: steps (done - first_done) in (t - first_time) seconds.
  std::string eta = "--";
  if (done >= total_) {
    eta = "0:00";
  } else if (have_first_ && done > first_done_ && t > first_time_) {
    const double per_step = (t - first_time_) / static_cast<double>(done - first_done_);
    eta = format_duration(per_step * static_cast<double>(total_ - done));
  }
  return detail::concat(done, "/", total_, " ", percent, "% elapsed ", format_duration(t - start_),
                        " ETA ", eta, status.empty() ? "" : " | ", status);
}

void Progress::update(std::int64_t done, const std::string& status) {
  TS_CHECK(done >= 0 && done <= total_, "Progress::update: expected 0 <= done <= ", total_,
           ", found ", done);
  // Build the line before recording the first update, so the first line shows ETA "--".
  const std::string text = line(done, status);
  if (!have_first_) {
    have_first_ = true;
    first_time_ = now();
    first_done_ = done;
  }
  if (!interactive_) {
    if (wrote_status_ && status == last_status_) return;
    out_ << text << "\n";
    out_.flush();
    last_status_ = status;
    wrote_status_ = true;
    return;
  }
  const auto filled = total_ > 0 ? static_cast<int>(kBarWidth * done / total_) : kBarWidth;
  std::string bar =
      detail::concat("[", std::string(static_cast<std::size_t>(filled), '#'),
                     std::string(static_cast<std::size_t>(kBarWidth - filled), '.'), "] ", text);
  const std::size_t width = bar.size();
  if (width < last_width_) bar.append(last_width_ - width, ' '); // blank a longer old line
  out_ << "\r" << bar;
  out_.flush();
  last_width_ = width;
}

void Progress::finish(const std::string& status) {
  if (interactive_) {
    update(total_, status);
    out_ << "\n";
  } else {
    out_ << line(total_, status) << "\n";
  }
  out_.flush();
}

} // namespace tinyscale::metrics
