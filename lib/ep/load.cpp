#include "ep/load.hpp"

#include <algorithm>
#include <cstdio>
#include <numeric>

namespace tinyscale::ep {

void EpLayerLoad::reset() {
  std::fill(expert_rows.begin(), expert_rows.end(), 0);
  std::fill(tokens_per_expert.begin(), tokens_per_expert.end(), 0);
  assignments = dropped = 0;
  std::fill(rows_sent.begin(), rows_sent.end(), 0);
  std::fill(rows_received.begin(), rows_received.end(), 0);
  bytes_sent = bytes_received = 0;
  dispatch_seconds = compute_seconds = combine_seconds = backward_seconds = 0;
}

double imbalance(const std::vector<std::int64_t>& tokens_per_expert) {
  if (tokens_per_expert.empty()) return 0;
  const std::int64_t total =
      std::accumulate(tokens_per_expert.begin(), tokens_per_expert.end(), std::int64_t{0});
  if (total == 0) return 0;
  const double mean = static_cast<double>(total) / static_cast<double>(tokens_per_expert.size());
  return static_cast<double>(
             *std::max_element(tokens_per_expert.begin(), tokens_per_expert.end())) /
         mean;
}

namespace {
template <typename T> std::string json_list(const std::vector<T>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i > 0) s += ",";
    s += std::to_string(v[i]);
  }
  return s + "]";
}
} // namespace

std::string to_json(const EpLayerLoad& l) {
  char times[256];
  std::snprintf(times, sizeof times,
                "\"dispatch_s\":%.6g,\"compute_s\":%.6g,\"combine_s\":%.6g,\"backward_a2a_s\":%.6g",
                l.dispatch_seconds, l.compute_seconds, l.combine_seconds, l.backward_seconds);
  std::string s = "{\"layer\":";
  s += std::to_string(l.layer);
  s += ",\"ep_rank\":";
  s += std::to_string(l.ep_rank);
  s += ",\"experts\":" + json_list(l.experts);
  s += ",\"tokens_per_expert\":" + json_list(l.tokens_per_expert);
  s += ",\"assignments\":" + std::to_string(l.assignments);
  s += ",\"dropped\":" + std::to_string(l.dropped);
  s += ",\"imbalance\":" + std::to_string(imbalance(l.tokens_per_expert));
  s += ",\"expert_rows\":" + json_list(l.expert_rows);
  s += ",\"rows_sent\":" + json_list(l.rows_sent);
  s += ",\"rows_received\":" + json_list(l.rows_received);
  s += ",\"bytes_sent\":" + std::to_string(l.bytes_sent);
  s += ",\"bytes_received\":" + std::to_string(l.bytes_received);
  s += ",";
  s += times;
  return s + "}";
}

} // namespace tinyscale::ep
