// hf_step: tinyscale's side of the independent Llama check (tests/hf/check_llama). It reads a
// Hugging Face folder (import_hf), runs one fixed batch forward and backward and takes one AdamW
// step, and writes what it computed for the Python reference to recompute:
//   OUT/batch.safetensors   input_ids and targets [B, T] (int64), logits [B, T, V], loss []
//   OUT/grads/              the gradients, as a Hugging Face folder (export_hf: the folder's
//                           names and orientation, so the reference reads them like weights)
//   OUT/stepped/            the weights after one AdamW step, as a Hugging Face folder
// Usage: hf_step DIR OUT [--lr X] [--eps X] [--weight-decay X] (betas 0.9, 0.95; no clipping).
#include "tinyscale.hpp"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

using namespace tinyscale;

namespace {

int usage(const char* why) {
  std::fprintf(stderr,
               "hf_step: %s\nusage: hf_step DIR OUT [--lr X] [--eps X] [--weight-decay X]\n", why);
  return 2;
}

} // namespace

int main(int argc, char** argv) {
  if (argc < 3) return usage("expected a Hugging Face folder and an output folder");
  const std::string dir = argv[1], out = argv[2];
  optim::OptimConfig optim;
  optim.weight_decay = 0.1;
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    const double value = std::strtod(argv[i + 1], nullptr);
    if (key == "--lr")
      optim.lr = value;
    else if (key == "--eps")
      optim.eps = value;
    else if (key == "--weight-decay")
      optim.weight_decay = value;
    else
      return usage(("unknown option " + key).c_str());
  }
  try {
    const io::HfModel hf = io::import_hf(dir);
    nn::ModelConfig config = hf.config;
    config.dropout = 0;
    nn::GPT model(config, 0);
    const std::map<std::string, Tensor> weights(hf.tensors.begin(), hf.tensors.end());
    for (const auto& p : model.parameters()) {
      Tensor target = p.tensor;
      target.copy_(weights.at(p.name));
    }
    // A fixed batch: every id of the vocabulary visited, no two rows alike.
    const std::int64_t B = 2, T = std::min<std::int64_t>(12, config.n_positions);
    std::vector<std::int64_t> ids, targets;
    for (std::int64_t i = 0; i < B * T; ++i) {
      ids.push_back((i * 7 + 3) % config.vocab_size);
      targets.push_back((i * 5 + 1) % config.vocab_size);
    }
    const Tensor input = Tensor::from_ids(ids, Shape{B, T});
    const Tensor target = Tensor::from_ids(targets, Shape{B, T});
    const nn::ModelOutput result = model.forward(input, target, {});
    backward(result.loss);

    namespace fs = std::filesystem;
    fs::create_directories(out);
    io::save_safetensors((fs::path(out) / "batch.safetensors").string(),
                         {{"input_ids", input},
                          {"targets", target},
                          {"logits", result.logits.detach()},
                          {"loss", result.loss.detach()}});
    nn::ParameterList grads;
    for (const auto& p : model.parameters()) grads.push_back({p.name, p.tensor.grad(), p.decay});
    io::export_hf((fs::path(out) / "grads").string(), config, grads);
    optim::AdamW adamw(model.parameters(), optim);
    adamw.step(optim.lr);
    io::export_hf((fs::path(out) / "stepped").string(), config, model.parameters());
    std::printf("hf_step: %s, batch [%lld, %lld], loss %.9g -> %s\n", dir.c_str(),
                static_cast<long long>(B), static_cast<long long>(T), result.loss.to_vector().at(0),
                out.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hf_step: %s\n", e.what());
    return 1;
  }
  return 0;
}
