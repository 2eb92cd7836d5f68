#include "backend/host_traffic.hpp"

#include <map>
#include <mutex>
#include <sstream>

namespace tinyscale {

namespace detail {
struct TrafficState {
  std::mutex mutex; // one rank's thread counts, but a test may read from another
  std::map<std::pair<bool, std::string>, HostTransfers> sites;
};
} // namespace detail

namespace {
thread_local std::shared_ptr<detail::TrafficState> active_traffic;

std::int64_t total(const HostTraffic& t, bool to_host, bool bytes) {
  std::int64_t n = 0;
  for (const HostTransfers& s : t.sites())
    if (s.to_host == to_host) n += bytes ? s.bytes : s.count;
  return n;
}
} // namespace

HostTraffic::HostTraffic() : state_(std::make_shared<detail::TrafficState>()) {}

std::vector<HostTransfers> HostTraffic::sites() const {
  std::lock_guard lock(state_->mutex);
  std::vector<HostTransfers> out;
  for (const auto& [key, site] : state_->sites) out.push_back(site);
  return out;
}

std::int64_t HostTraffic::copies_to_host() const { return total(*this, true, false); }
std::int64_t HostTraffic::bytes_to_host() const { return total(*this, true, true); }
std::int64_t HostTraffic::copies_to_device() const { return total(*this, false, false); }
std::int64_t HostTraffic::bytes_to_device() const { return total(*this, false, true); }

void HostTraffic::reset() {
  std::lock_guard lock(state_->mutex);
  state_->sites.clear();
}

std::string HostTraffic::table() const {
  std::ostringstream out;
  for (const HostTransfers& s : sites())
    out << (s.to_host ? "to host  " : "to device") << "  " << s.count << " copies  " << s.bytes
        << " bytes  " << s.where << "\n";
  return out.str();
}

CountHostTraffic::CountHostTraffic(HostTraffic& traffic) : previous_(active_traffic) {
  active_traffic = traffic.state_;
}

CountHostTraffic::~CountHostTraffic() { active_traffic = previous_; }

void record_host_transfer(bool to_host, std::size_t bytes, const CallSite& where) {
  if (!active_traffic) return;
  std::string site = site_name(where);
  std::lock_guard lock(active_traffic->mutex);
  HostTransfers& s = active_traffic->sites[{to_host, site}];
  s.where = std::move(site);
  s.to_host = to_host;
  s.count += 1;
  s.bytes += static_cast<std::int64_t>(bytes);
}

std::string site_name(const CallSite& where) {
  std::string file = where.file;
  // The project's top-level source folders; anything else keeps its file name only.
  std::size_t cut = std::string::npos;
  for (const char* top : {"lib/", "apps/", "tests/", "kernels/", "chapters/", "exercises/"}) {
    const std::size_t at = file.rfind(std::string("/") + top);
    if (at != std::string::npos && (cut == std::string::npos || at > cut)) cut = at + 1;
    if (file.rfind(top, 0) == 0 && cut == std::string::npos) cut = 0;
  }
  if (cut == std::string::npos) cut = file.find_last_of('/') + 1; // npos + 1 == 0
  return file.substr(cut) + ":" + std::to_string(where.line);
}

} // namespace tinyscale
