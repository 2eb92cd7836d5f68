#include "ep/shard_map.hpp"

#include "comm/tensor_comm.hpp"

namespace tinyscale::ep {

bool ExpertShardMap::holds(const std::string& name) const {
  const int e = expert_index(name);
  return e < 0 || placement_.owner(e) == ep_->rank();
}

void ExpertShardMap::share(const std::string& name, Tensor& whole) {
  const int e = expert_index(name);
  if (e >= 0) comm::broadcast(*ep_, whole, placement_.owner(e)); // (stages device buffers itself)
}

} // namespace tinyscale::ep
