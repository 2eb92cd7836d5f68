#include "tp/rules.hpp"

#include "core/error.hpp"

#include <string>

namespace tinyscale::tp {

void check_tp_layout(const nn::ModelConfig& m, std::int64_t seq_len, int tp,
                     bool sequence_parallel) {
  TS_CHECK(tp >= 1, "tensor parallel: expected tp >= 1, found ", tp);
  auto fix = [&](const char* key) {
    return std::string("; set ") + key + " to a multiple of " + std::to_string(tp) +
           " or choose a tp that divides it";
  };
  TS_CHECK(m.n_head % tp == 0, "tensor parallel: expected model.n_head (", m.n_head,
           ") divisible by tp = ", tp, " (each rank takes n_head / tp heads), found a remainder",
           fix("model.n_head"));
  TS_CHECK(m.kv_heads() % tp == 0, "tensor parallel: expected model.n_kv_head (", m.kv_heads(),
           ") divisible by tp = ", tp, " (each rank takes n_kv_head / tp key/value heads, the ",
           "ones its n_head / tp query heads read), found a remainder; a tp above n_kv_head would ",
           "need each key/value head copied onto several ranks, which this version does not do",
           fix("model.n_kv_head"));
  TS_CHECK(m.n_embd % tp == 0, "tensor parallel: expected model.n_embd (", m.n_embd,
           ") divisible by tp = ", tp, ", found a remainder", fix("model.n_embd"));
  TS_CHECK(m.n_inner() % tp == 0, "tensor parallel: expected the MLP width (", m.n_inner(),
           ": model.ffn_hidden, or its rule from model.n_embd) divisible by tp = ", tp,
           ", found a remainder", fix(m.ffn_hidden > 0 ? "model.ffn_hidden" : "model.n_embd"));
  TS_CHECK(m.vocab_size % tp == 0, "tensor parallel: expected model.vocab_size (", m.vocab_size,
           ") divisible by tp = ", tp, " (the embedding and the head are split by vocabulary), ",
           "found a remainder; pad the vocabulary: set model.vocab_size to a multiple of ", tp);
  TS_CHECK(!sequence_parallel || seq_len % tp == 0, "sequence parallel: expected train.seq_len (",
           seq_len, ") divisible by tp = ", tp, " (each rank holds seq_len / tp positions), ",
           "found a remainder", fix("train.seq_len"), ", or turn sequence parallelism off");
}

} // namespace tinyscale::tp
