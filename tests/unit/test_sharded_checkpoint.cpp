// The one join and cut of sharded checkpoints (chapter 12, lib/train/sharded_checkpoint.hpp), on
// one rank with stand-in shard maps: the join visits every parameter in the single-rank order and
// takes a value from share() where this rank holds none; the cut gives this rank its pieces in its
// own order, with their moments and step counts, and refuses a checkpoint of another model.
#include "io/config.hpp"
#include "train/sharded_checkpoint.hpp"

#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

using namespace tinyscale;

namespace {

Tensor values(std::vector<double> v) {
  const auto n = static_cast<std::int64_t>(v.size());
  return Tensor::from_vector(v, Shape({n}), DType::Float64);
}

// Rank `rank` of two holds the half [rank n/2, (rank + 1) n/2) of every parameter but "b", which
// it does not hold at all; share() hands it "b" as if broadcast from its owner (the value 7).
class HalfMap : public train::ShardMap {
public:
  explicit HalfMap(int rank) : rank_(rank) {}
  bool holds(const std::string& name) const override { return name != "b"; }
  Tensor join(const std::string& name, const Tensor& piece) override {
    joined.push_back(name);
    std::vector<double> v = piece.to_vector(), whole(2 * v.size(), -1.0); // the other half: -1
    for (std::size_t i = 0; i < v.size(); ++i) whole[rank_ * v.size() + i] = v[i];
    return values(whole);
  }
  void share(const std::string& name, Tensor& whole) override {
    shared.push_back(name);
    if (name == "b") whole.fill_(7.0);
  }
  Tensor cut(const std::string& name, const Tensor& whole) const override {
    (void)name;
    const std::vector<double> v = whole.to_vector();
    const std::size_t half = v.size() / 2;
    return values(std::vector<double>(v.begin() + rank_ * half, v.begin() + (rank_ + 1) * half));
  }
  std::vector<std::string> joined, shared;

private:
  int rank_;
};

} // namespace

TEST_CASE("join_checkpoint visits every parameter in the single-rank order and takes a parameter "
          "it does not hold from share()",
          "[checkpoint][reshard]") {
  HalfMap map(1);
  const nn::ParameterList whole = {
      {"a", values({0, 0, 0, 0})}, {"b", values({0, 0})}, {"c", values({0, 0})}};
  const io::Checkpoint c =
      train::join_checkpoint(map, nn::specs_of(whole), [](const std::string& name) {
        train::HeldParameter h;
        h.value = name == "a" ? values({1, 2}) : values({3});
        h.exp_avg = name == "a" ? values({4, 5}) : values({6});
        h.exp_avg_sq = name == "a" ? values({8, 9}) : values({10});
        h.steps = name == "a" ? 3 : 5;
        return h;
      });
  CHECK(map.joined == std::vector<std::string>{"a", "a", "a", "c", "c", "c"});
  CHECK(map.shared.size() == 12); // value, two moments, step count, for each of the three
  REQUIRE(c.model.size() == 3);
  CHECK(c.model[0].first == "a");
  CHECK(c.model[0].second.to_vector() == std::vector<double>{-1, -1, 1, 2});
  CHECK(c.model[1].second.to_vector() == std::vector<double>{7, 7});
  CHECK(c.model[2].second.to_vector() == std::vector<double>{-1, 3});
  // optim::AdamW's layout: every exp_avg, every exp_avg_sq, then the step counts in model order
  REQUIRE(c.optimizer.size() == 7);
  CHECK(c.optimizer[0].first == "exp_avg.a");
  CHECK(c.optimizer[3].first == "exp_avg_sq.a");
  CHECK(c.optimizer[5].second.to_vector() == std::vector<double>{-1, 10});
  CHECK(c.optimizer[6].first == "step");
  CHECK(c.optimizer[6].second.to_vector() == std::vector<double>{3, 7, 5}); // "b": shared 7
}

TEST_CASE("cut_checkpoint gives a rank its pieces in its own order with their moments and step "
          "counts, and refuses a checkpoint with a parameter this model lacks",
          "[checkpoint][reshard]") {
  io::RunConfig config;
  io::Checkpoint whole;
  whole.step = 4;
  whole.config_toml = io::to_toml(config);
  whole.model = {{"a", values({1, 2, 3, 4})}, {"b", values({5, 6})}, {"c", values({7, 8})}};
  whole.optimizer = {{"exp_avg.a", values({1, 1, 2, 2})},
                     {"exp_avg.c", values({3, 4})},
                     {"exp_avg_sq.a", values({5, 5, 6, 6})},
                     {"exp_avg_sq.c", values({7, 8})},
                     {"step", Tensor::from_ids({2, 0, 9}, Shape({3}))}};
  const HalfMap map(1);
  const nn::ParameterList mine = {{"c", values({0})}, {"a", values({0, 0})}}; // its own order
  const io::Checkpoint own = train::cut_checkpoint(map, whole, mine, config, "ckpt");
  CHECK(own.step == 4);
  REQUIRE(own.model.size() == 2);
  CHECK(own.model[0].first == "c");
  CHECK(own.model[0].second.to_vector() == std::vector<double>{8});
  CHECK(own.model[1].second.to_vector() == std::vector<double>{3, 4});
  const std::map<std::string, Tensor> state(own.optimizer.begin(), own.optimizer.end());
  CHECK(state.at("exp_avg.a").to_vector() == std::vector<double>{2, 2});
  CHECK(state.at("exp_avg_sq.c").to_vector() == std::vector<double>{8});
  CHECK(state.at("step").to_vector() == std::vector<double>{9, 2}); // c, then a

  io::Checkpoint bigger = whole;
  bigger.model.emplace_back("d", values({0, 0}));
  REQUIRE_THROWS_WITH(train::cut_checkpoint(map, bigger, mine, config, "ckpt"),
                      Catch::Contains("found 1 more ('d')") && Catch::Contains("another model"));
  const nn::ParameterList wider = {{"c", values({0, 0})}, {"a", values({0, 0})}};
  REQUIRE_THROWS_WITH(train::cut_checkpoint(map, whole, wider, config, "ckpt"),
                      Catch::Contains("parameter 'c'") && Catch::Contains("cuts into [1]"));
  io::RunConfig other = config;
  other.model.n_layer += 1;
  REQUIRE_THROWS_WITH(train::cut_checkpoint(map, whole, mine, other, "ckpt"),
                      Catch::Contains("model.n_layer"));
}
