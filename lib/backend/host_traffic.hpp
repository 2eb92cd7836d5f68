// Host traffic (chapter 11): every copy between host memory and a device's memory, counted per
// thread (one rank of the threads backend is one thread) and per call site. Tensor::to(Device),
// and through it item(), to_vector() and from_vector(), is the only way host code moves a device
// tensor's bytes, so a HostTraffic scope around one training step sees all of them: tests assert
// that after warm-up a step moves only the documented scalars and the batch.
// The easy thing to get wrong: copies on another thread (a communicator's worker) are not in the
// calling thread's scope; tinyscale issues every host transfer from the rank's own thread.
#pragma once

#include "core/call_site.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tinyscale {

namespace detail {
struct TrafficState;
} // namespace detail

/// The copies made at one call site in one direction.
struct HostTransfers {
  std::string where;      ///< "lib/train/trainer.cpp:97", the code that asked for the copy
  bool to_host = false;   ///< device -> host (true) or host -> device (false)
  std::int64_t count = 0; ///< copies
  std::int64_t bytes = 0; ///< bytes, all copies together
};

/// The host <-> device copies made on the threads that counted into it, by call site.
class HostTraffic {
public:
  HostTraffic();
  /// Every call site with at least one copy, sorted by direction, then by site.
  std::vector<HostTransfers> sites() const;
  std::int64_t copies_to_host() const;
  std::int64_t bytes_to_host() const;
  std::int64_t copies_to_device() const;
  std::int64_t bytes_to_device() const;
  /// Forgets every copy counted so far (call it after the warm-up step).
  void reset();
  /// One line per site: direction, copies, bytes, where.
  std::string table() const;

private:
  friend class CountHostTraffic;
  std::shared_ptr<detail::TrafficState> state_;
};

/// Makes the host <-> device copies made on the calling thread count into `traffic` while it
/// lives. Scopes nest: the innermost one counts.
class CountHostTraffic {
public:
  explicit CountHostTraffic(HostTraffic& traffic);
  ~CountHostTraffic();
  CountHostTraffic(const CountHostTraffic&) = delete;
  CountHostTraffic& operator=(const CountHostTraffic&) = delete;

private:
  std::shared_ptr<detail::TrafficState> previous_;
};

/// For Tensor::to: records one copy of `bytes` in the calling thread's scope, if any.
void record_host_transfer(bool to_host, std::size_t bytes, const CallSite& where);

/// `where` as "dir/file.cpp:line", the path cut to start at the project's top-level folder.
std::string site_name(const CallSite& where);

} // namespace tinyscale
