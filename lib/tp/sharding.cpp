#include "tp/sharding.hpp"

#include "autograd/grad_mode.hpp"
#include "comm/tensor_comm.hpp"
#include "core/error.hpp"
#include "ops/ops.hpp"

namespace tinyscale::tp {

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
} // namespace

ShardSpec shard_spec(const std::string& name) {
  if (name == "wte.weight") return {0, 1};
  if (ends_with(name, ".c_attn.weight")) return {1, 3};
  if (ends_with(name, ".c_attn.bias")) return {0, 3};
  if (ends_with(name, ".c_fc.weight")) return {1, 1};
  if (ends_with(name, ".c_fc.bias")) return {0, 1};
  if (ends_with(name, ".c_proj.weight")) return {0, 1};
  // the Llama family's: q, k, v, gate and up by columns (k and v by their own kv heads), the
  // output and down projections by rows, the untied head by vocabulary like wte
  for (const char* column : {".q_proj", ".k_proj", ".v_proj", ".gate_proj", ".up_proj"}) {
    if (ends_with(name, std::string(column) + ".weight")) return {1, 1};
    if (ends_with(name, std::string(column) + ".bias")) return {0, 1};
  }
  if (ends_with(name, ".o_proj.weight") || ends_with(name, ".down_proj.weight")) return {0, 1};
  if (name == "lm_head.weight") return {0, 1};
  return {}; // wpe, ln_*, ln_f, c_proj, o_proj and down_proj biases, the MoE router
}

namespace {
// The elements of one block along spec.dim of a `full` tensor, checked to split into `ranks`
// pieces.
std::int64_t block_size(const Shape& full, const ShardSpec& spec, int ranks) {
  TS_CHECK(spec.dim < full.rank(), "tp: cutting a shard, expected a tensor with a dimension ",
           spec.dim, ", found ", full.str());
  const std::int64_t block = full[spec.dim] / spec.blocks;
  TS_CHECK(block * spec.blocks == full[spec.dim] && block % ranks == 0,
           "tp: cutting a shard, expected dimension ", spec.dim, " of ", full.str(), " to split ",
           "into ", spec.blocks, " block(s) of a multiple of tp = ", ranks, " elements, found ",
           full[spec.dim], "; choose model sizes divisible by tp");
  return block;
}
} // namespace

Shape shard_shape(const Shape& full, const ShardSpec& spec, int ranks) {
  if (spec.replicated()) return full;
  std::vector<std::int64_t> dims = full.dims();
  dims[static_cast<std::size_t>(spec.dim)] = block_size(full, spec, ranks) / ranks * spec.blocks;
  return Shape(dims);
}

std::vector<nn::ElementRange> shard_ranges(const Shape& full, const ShardSpec& spec, int rank,
                                           int ranks) {
  if (spec.replicated()) return {{0, full.numel()}};
  const std::int64_t piece = block_size(full, spec, ranks) / ranks;
  // a row-major tensor is `outer` runs of [size(dim) x inner] elements: in each run the shard
  // takes, from every block, its piece x inner contiguous elements
  std::int64_t outer = 1, inner = 1;
  for (int d = 0; d < spec.dim; ++d) outer *= full[d];
  for (int d = spec.dim + 1; d < full.rank(); ++d) inner *= full[d];
  const std::int64_t row = full[spec.dim] * inner;
  std::vector<nn::ElementRange> out;
  for (std::int64_t o = 0; o < outer; ++o)
    for (int b = 0; b < spec.blocks; ++b)
      out.push_back({o * row + (b * piece * ranks + rank * piece) * inner, piece * inner});
  return out;
}

Tensor cut_shard(const Tensor& full, const ShardSpec& spec, int rank, int ranks) {
  NoGradGuard no_grad;
  if (spec.replicated()) return full.detach().clone();
  const std::int64_t block = block_size(full.shape(), spec, ranks), piece = block / ranks;
  std::vector<Tensor> parts;
  for (int b = 0; b < spec.blocks; ++b) {
    const std::int64_t start = b * block + rank * piece;
    parts.push_back(slice(full.detach(), spec.dim, start, start + piece));
  }
  return parts.size() == 1 ? parts[0] : concat(parts, spec.dim);
}

Tensor join_shards(const std::vector<Tensor>& shards, const ShardSpec& spec) {
  NoGradGuard no_grad;
  TS_CHECK(!shards.empty(), "tp::join_shards: expected at least one shard, found none");
  if (spec.replicated()) return shards[0].detach().clone();
  const std::int64_t piece = shards[0].size(spec.dim) / spec.blocks;
  std::vector<Tensor> parts;
  for (int b = 0; b < spec.blocks; ++b)
    for (const Tensor& s : shards)
      parts.push_back(slice(s.detach(), spec.dim, b * piece, (b + 1) * piece));
  return concat(parts, spec.dim);
}

Tensor gather_full(comm::Communicator& tp, const Tensor& shard, const ShardSpec& spec) {
  NoGradGuard no_grad;
  if (spec.replicated() || tp.size() == 1) return shard.detach().to(Device::cpu()).clone();
  Tensor rows = comm::all_gather(tp, reshape(shard.detach(), {1, -1})).to(Device::cpu());
  std::vector<Tensor> shards;
  for (int r = 0; r < tp.size(); ++r)
    shards.push_back(reshape(slice(rows, 0, r, r + 1), shard.shape().dims()));
  return join_shards(shards, spec);
}

} // namespace tinyscale::tp
