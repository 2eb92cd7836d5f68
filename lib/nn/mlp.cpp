#include "nn/mlp.hpp"

#include <cmath>

namespace tinyscale::nn {

Mlp::Mlp(ParameterList& params, const std::string& name, const ModelConfig& config,
         std::uint64_t seed)
    : c_fc(params, name + ".c_fc", config.n_embd, config.n_inner(), config.initializer_range,
           config.bias, seed, config.dtype),
      c_proj(params, name + ".c_proj", config.n_inner(), config.n_embd,
             config.initializer_range / std::sqrt(2.0 * config.n_layer), config.bias, seed,
             config.dtype) {}

SwiGlu::SwiGlu(ParameterList& params, const std::string& name, const ModelConfig& config,
               std::uint64_t seed)
    : gate_proj(params, name + ".gate_proj", config.n_embd, config.n_inner(),
                config.initializer_range, config.bias, seed, config.dtype),
      up_proj(params, name + ".up_proj", config.n_embd, config.n_inner(), config.initializer_range,
              config.bias, seed, config.dtype),
      down_proj(params, name + ".down_proj", config.n_inner(), config.n_embd,
                config.initializer_range / std::sqrt(2.0 * config.n_layer), config.bias, seed,
                config.dtype) {}

DenseFeedForward::DenseFeedForward(ParameterList& params, const std::string& name,
                                   const ModelConfig& config, std::uint64_t seed)
    : name_(name), dropout_(config.dropout) {
  if (config.llama())
    swiglu_.emplace(params, name, config, seed);
  else
    mlp_.emplace(params, name, config, seed);
}

FeedForwardOutput DenseFeedForward::forward(const Tensor& x, const ForwardContext& ctx) const {
  const Tensor h = mlp_ ? mlp_->forward(x) : swiglu_->forward(x);
  return FeedForwardOutput{ctx.dropout(h, dropout_, name_), Tensor(), Tensor(), std::nullopt};
}

} // namespace tinyscale::nn
