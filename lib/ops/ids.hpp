// Internal: validation of integer ids (token ids, targets) before a kernel indexes with them.
#pragma once

#include "core/tensor.hpp"

#include <optional>

namespace tinyscale::detail {

/// Throws unless every id is in [0, limit) or equals `allowed_extra` (an ignore index, if any),
/// naming `op` and the position of the first bad id. Checks host ids only: reading device ids
/// back would stall the device; there the backend checks them (CUDA's embedding flag, emu's
/// kernels), and the dataset checked every token against the vocabulary when it opened.
void check_ids_in_range(const Tensor& ids, std::int64_t limit,
                        std::optional<std::int64_t> allowed_extra, const char* op,
                        const char* what);

} // namespace tinyscale::detail
