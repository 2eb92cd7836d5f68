// `train --init-from`: a Hugging Face GPT-2 or Llama folder as the step-0 checkpoint of a run.
#include "train/init_from.hpp"

#include "core/error.hpp"
#include "train/run.hpp"
#include "train/trainer.hpp"

#include <map>

namespace tinyscale::train {

io::RunConfig with_hf_model(io::RunConfig config, const nn::ModelConfig& hf) {
  TS_CHECK(config.model.moe.every == 0, "train --init-from: expected a dense model (GPT-2 and ",
           "Llama have one MLP per block), found model.moe.every = ", config.model.moe.every,
           "; remove the [model.moe] keys from the config");
  // The architecture is the folder's: every key that shapes the weights comes from it.
  nn::ModelConfig& m = config.model;
  m.arch = hf.arch;
  m.n_kv_head = hf.n_kv_head;
  m.rope_theta = hf.rope_theta;
  m.ffn_hidden = hf.ffn_hidden;
  m.tie_embeddings = hf.tie_embeddings;
  m.vocab_size = hf.vocab_size;
  m.n_positions = hf.n_positions;
  m.n_embd = hf.n_embd;
  m.n_layer = hf.n_layer;
  m.n_head = hf.n_head;
  m.layer_norm_epsilon = hf.layer_norm_epsilon;
  m.bias = hf.bias;
  TS_CHECK(config.train.seq_len <= m.n_positions, "train --init-from: expected train.seq_len <= ",
           "the model's n_positions = ", m.n_positions, ", found ", config.train.seq_len);
  return config;
}

std::string describe_hf_model(const std::string& dir, const nn::ModelConfig& hf) {
  const std::string heads =
      hf.llama() && hf.kv_heads() != hf.n_head
          ? formatted("%d heads over %d key/value heads", hf.n_head, hf.kv_heads())
          : formatted("%d heads", hf.n_head);
  return formatted("init: weights from the %s folder %s (%d layers, %s, d_model %lld, "
                   "vocabulary %lld, %lld positions); the optimizer starts fresh",
                   hf.llama() ? "Llama" : "GPT-2", dir.c_str(), hf.n_layer, heads.c_str(),
                   static_cast<long long>(hf.n_embd), static_cast<long long>(hf.vocab_size),
                   static_cast<long long>(hf.n_positions));
}

std::string write_init_checkpoint(const io::RunConfig& config, const io::HfModel& hf,
                                  const std::string& root) {
  io::RunConfig c = config;
  c.train.checkpoint_dir = root;
  c.train.checkpoint_keep_last = 0;
  c.train.checkpoint_keep_every = 0;
  const Trainer trainer(c); // the run as it would start: its step-0 state and seeds
  io::Checkpoint checkpoint = trainer.checkpoint();
  const std::map<std::string, Tensor> weights(hf.tensors.begin(), hf.tensors.end());
  for (auto& [name, tensor] : checkpoint.model) {
    auto it = weights.find(name);
    TS_CHECK(it != weights.end(), "train --init-from: expected a weight '", name,
             "' in the Hugging Face folder, found none");
    TS_CHECK(it->second.shape() == tensor.shape(), "train --init-from: weight '", name,
             "': expected shape ", tensor.shape().str(), ", found ", it->second.shape().str());
    const Tensor host =
        it->second.dtype() == tensor.dtype() ? it->second : it->second.to(tensor.dtype());
    tensor = tensor.device() == host.device() ? host : host.to(tensor.device());
  }
  return trainer.write_checkpoint(checkpoint);
}

} // namespace tinyscale::train
