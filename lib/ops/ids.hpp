// Internal: validation of integer ids (token ids, targets) before a kernel indexes with them.
#pragma once

#include "core/tensor.hpp"

namespace tinyscale::detail {

/// Throws unless every id is in [0, limit) or equals `allowed_extra`, naming `op` and the position.
void check_ids_in_range(const Tensor& ids, std::int64_t limit, std::int64_t allowed_extra,
                        const char* op, const char* what);

} // namespace tinyscale::detail
