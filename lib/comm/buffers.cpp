// Moving a collective's bytes wherever they live (chapters 04 and 11): host to host is a memcpy;
// anything that touches a device goes through that device's backend and waits for it.
#include "comm/buffers.hpp"

#include "backend/backend.hpp"
#include "core/error.hpp"

#include <cstring>

namespace tinyscale::comm {

void copy_bytes(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0 || dst == src) return;
  const Device to = memory_of(dst), from = memory_of(src);
  if (to.is_host() && from.is_host()) {
    std::memcpy(dst, src, bytes);
    return;
  }
  TS_CHECK(to.is_host() || from.is_host() || to == from, "copy_bytes: expected one device, found ",
           from.str(), " to ", to.str(), "; tinyscale drives one device per process");
  Backend& backend = backend_for(to.is_host() ? from : to);
  if (from.is_host())
    backend.copy_from_host(dst, src, bytes);
  else if (to.is_host())
    backend.copy_to_host(dst, src, bytes);
  else
    backend.copy(dst, src, bytes);
  backend.synchronize();
}

std::shared_ptr<void> scratch_like(const void* like, std::size_t bytes) {
  const Device memory = memory_of(like);
  if (memory.is_host()) return std::make_shared_for_overwrite<std::byte[]>(bytes);
  return backend_for(memory).allocate(bytes);
}

} // namespace tinyscale::comm
