#include "ep/rules.hpp"

#include "core/error.hpp"
#include "ep/placement.hpp"
#include "train/rules.hpp"

namespace tinyscale::ep {

void check_ep_layout(const io::RunConfig& config, int data_parallel, int ep) {
  const nn::MoeConfig& moe = config.model.moe;
  TS_CHECK(ep >= 1, "expert parallelism: expected ep >= 1, found ", ep);
  TS_CHECK(moe.every > 0, "expert parallelism: expected a MoE model (model.moe.every > 0), found "
                          "a dense one; use a MoE config such as configs/moe-tiny.toml");
  TS_CHECK(moe.top_k <= moe.n_experts, "expert parallelism: expected model.moe.top_k (", moe.top_k,
           ") <= model.moe.n_experts (", moe.n_experts, ")");
  ExpertPlacement(moe.n_experts, ep); // n_experts % ep == 0
  TS_CHECK(data_parallel >= 1 && data_parallel % ep == 0, "expert parallelism: expected ep (", ep,
           ") to divide the data-parallel size (", data_parallel,
           "): --ep must divide the data-parallel ranks --dp, since the experts are spread over "
           "ep of the ranks that run their own rows; choose an ep that divides ",
           data_parallel, " or run ", ep, " x k data-parallel ranks");
  train::check_batch_split(config, data_parallel, "expert parallelism");
}

} // namespace tinyscale::ep
