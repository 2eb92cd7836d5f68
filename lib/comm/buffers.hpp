// Moving a collective's bytes wherever they live (chapters 04 and 11). The threads backend is
// handed raw buffers in host memory or in a device's (one GPU shared by several rank threads,
// or emu, the emulated device); it asks the backends whose memory each pointer is in
// (memory_of) and moves device bytes device to device on the calling rank's stream.
// The easy thing to get wrong: a device copy is queued, not done; these return only once it has
// finished, because the next reader may be another rank's thread on another stream.
#pragma once

#include <cstddef>
#include <memory>

namespace tinyscale::comm {

/// Copies `bytes` from `src` to `dst`, each in host or device memory; done when it returns.
void copy_bytes(void* dst, const void* src, std::size_t bytes);

/// `bytes` of uninitialised scratch in the memory that `like` points into.
std::shared_ptr<void> scratch_like(const void* like, std::size_t bytes);

} // namespace tinyscale::comm
