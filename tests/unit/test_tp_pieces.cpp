// Chapter 05's single-rank pieces: how tensor parallelism cuts each parameter by name (c_attn in
// three blocks, one per q, k, v), cutting and joining as inverses, and the per-thread allocation
// counter behind `tinyscale bench tp`'s activation bytes.
#include "backend/memory_counter.hpp"
#include "tp/sharding.hpp"

#include <catch2/catch.hpp>

#include <thread>

using namespace tinyscale;

TEST_CASE("Tensor parallelism cuts each GPT-2 parameter by its name", "[unit][tp]") {
  CHECK(tp::shard_spec("wte.weight").dim == 0);
  CHECK(tp::shard_spec("wpe.weight").replicated());
  CHECK(tp::shard_spec("h.0.ln_1.weight").replicated());
  CHECK(tp::shard_spec("h.3.attn.c_attn.weight").dim == 1);
  CHECK(tp::shard_spec("h.3.attn.c_attn.weight").blocks == 3);
  CHECK(tp::shard_spec("h.3.attn.c_attn.bias").dim == 0);
  CHECK(tp::shard_spec("h.3.attn.c_proj.weight").dim == 0);
  CHECK(tp::shard_spec("h.3.attn.c_proj.bias").replicated());
  CHECK(tp::shard_spec("h.1.mlp.c_fc.weight").dim == 1);
  CHECK(tp::shard_spec("h.1.mlp.experts.2.c_fc.bias").dim == 0);
  CHECK(tp::shard_spec("h.1.mlp.experts.2.c_proj.weight").dim == 0);
  CHECK(tp::shard_spec("h.1.mlp.router.weight").replicated());
  CHECK(tp::shard_spec("ln_f.bias").replicated());
}

TEST_CASE("c_attn's shard holds the same heads of q, k and v, and joining the shards gives the "
          "tensor back",
          "[unit][tp]") {
  // c_attn [C = 2, 3C = 12] with column j holding the value j: q = 0..3, k = 4..7, v = 8..11.
  std::vector<double> values;
  for (int row = 0; row < 2; ++row)
    for (int j = 0; j < 12; ++j) values.push_back(j);
  const Tensor full = Tensor::from_vector(values, Shape({2, 12}), DType::Float64);
  const tp::ShardSpec spec = tp::shard_spec("h.0.attn.c_attn.weight");
  const Tensor rank1 = tp::cut_shard(full, spec, 1, 2); // heads of the second half
  CHECK(rank1.shape() == Shape({2, 6}));
  CHECK(rank1.to_vector() == std::vector<double>{2, 3, 6, 7, 10, 11, 2, 3, 6, 7, 10, 11});
  std::vector<Tensor> shards;
  for (int r = 0; r < 2; ++r) shards.push_back(tp::cut_shard(full, spec, r, 2));
  CHECK(tp::join_shards(shards, spec).to_vector() == values);
  // A size that does not split is refused with the sizes named.
  CHECK_THROWS_WITH(tp::cut_shard(full, spec, 0, 3),
                    Catch::Contains("a multiple of tp = 3") && Catch::Contains("[2, 12]"));
}

TEST_CASE("A rank draws only its shard of a tensor-parallel parameter, the same elements "
          "cut_shard cuts from the whole",
          "[unit][tp]") {
  for (const auto& [name, shape] :
       {std::pair<std::string, Shape>{"h.0.attn.c_attn.weight", Shape({4, 24})},
        {"h.0.attn.c_attn.bias", Shape({24})},
        {"h.0.mlp.c_fc.weight", Shape({4, 16})},
        {"h.0.mlp.c_proj.weight", Shape({16, 4})},
        {"wte.weight", Shape({8, 4})},
        {"h.0.ln_1.weight", Shape({4})}}) {
    const nn::ParameterSpec whole{
        name, shape, DType::Float64, true, {nn::ParameterInit::Kind::Normal, 0.02, 7}};
    const Tensor full = nn::initial_elements(whole, 0, shape.numel()).view(0, shape);
    const tp::ShardSpec spec = tp::shard_spec(name);
    for (int ranks : {1, 2, 4})
      for (int r = 0; r < ranks; ++r) {
        INFO(name << " rank " << r << " of " << ranks);
        const Tensor want = tp::cut_shard(full, spec, r, ranks);
        const Tensor drawn = nn::initial_pieces(whole, tp::shard_ranges(shape, spec, r, ranks),
                                                tp::shard_shape(shape, spec, ranks));
        CHECK(drawn.shape() == want.shape());
        CHECK(drawn.to_vector() == want.to_vector());
      }
  }
}

TEST_CASE("The allocation counter sees the buffers allocated on its thread inside its scope, "
          "until they are freed",
          "[unit][tp]") {
  MemoryCounter counter;
  Tensor outside = Tensor::zeros(Shape({100}));
  Tensor kept;
  {
    CountAllocations scope(counter);
    kept = Tensor::zeros(Shape({1000}));                 // 4000 bytes, kept
    { Tensor temporary = Tensor::zeros(Shape({2000})); } // 8000 bytes, freed at once
    std::thread([] { Tensor other = Tensor::zeros(Shape({5000})); }).join(); // another thread
  }
  CHECK(counter.live_bytes() == 4000);
  CHECK(counter.peak_bytes() >= 12000);
  CHECK(counter.peak_bytes() < 12000 + 20000);
  kept = Tensor(); // freed after the scope ended: still counted out
  CHECK(counter.live_bytes() == 0);
}
