#include "ep/placement.hpp"

#include "core/error.hpp"

namespace tinyscale::ep {

const char* placement_name(PlacementKind kind) {
  return kind == PlacementKind::Contiguous ? "contiguous" : "round-robin";
}

PlacementKind parse_placement(const std::string& name) {
  if (name == "contiguous") return PlacementKind::Contiguous;
  TS_CHECK(name == "round-robin", "expert placement: expected \"contiguous\" or \"round-robin\", ",
           "found \"", name, "\"");
  return PlacementKind::RoundRobin;
}

ExpertPlacement::ExpertPlacement(int n_experts, int ep, PlacementKind kind)
    : n_experts_(n_experts), ep_(ep), kind_(kind) {
  TS_CHECK(ep >= 1, "expert parallelism: expected ep >= 1, found ", ep);
  TS_CHECK(n_experts >= 1 && n_experts % ep == 0, "expert parallelism: expected ",
           "model.moe.n_experts (", n_experts, ") to divide by ep (", ep,
           ") so every rank holds the same number of experts; choose an ep that divides ",
           n_experts, " or change model.moe.n_experts");
}

int ExpertPlacement::owner(int expert) const {
  TS_CHECK(expert >= 0 && expert < n_experts_, "ExpertPlacement: expected an expert in [0, ",
           n_experts_, "), found ", expert);
  return kind_ == PlacementKind::Contiguous ? expert / local_count() : expert % ep_;
}

int ExpertPlacement::expert(int rank, int local) const {
  TS_CHECK(rank >= 0 && rank < ep_ && local >= 0 && local < local_count(),
           "ExpertPlacement: expected rank in [0, ", ep_, ") and local expert in [0, ",
           local_count(), "), found rank ", rank, ", local ", local);
  return kind_ == PlacementKind::Contiguous ? rank * local_count() + local : local * ep_ + rank;
}

int ExpertPlacement::local_index(int expert) const {
  owner(expert); // range check
  return kind_ == PlacementKind::Contiguous ? expert % local_count() : expert / ep_;
}

std::vector<int> ExpertPlacement::experts_of(int rank) const {
  std::vector<int> out;
  for (int l = 0; l < local_count(); ++l) out.push_back(expert(rank, l));
  return out;
}

std::string ExpertPlacement::describe() const {
  std::string s = "ep ";
  s += std::to_string(ep_);
  s += ", ";
  s += placement_name(kind_);
  s += ":";
  for (int r = 0; r < ep_; ++r) {
    s += r == 0 ? " rank " : ", rank ";
    s += std::to_string(r);
    s += " holds expert";
    s += local_count() > 1 ? "s " : " ";
    const std::vector<int> mine = experts_of(r);
    for (std::size_t i = 0; i < mine.size(); ++i) {
      if (i > 0) s += ",";
      s += std::to_string(mine[i]);
    }
  }
  return s;
}

bool is_expert_parameter(const std::string& name) {
  return name.find(".mlp.experts.") != std::string::npos;
}

int expert_index(const std::string& name) {
  const std::string key = ".mlp.experts.";
  const std::size_t at = name.find(key);
  if (at == std::string::npos) return -1;
  return std::stoi(name.substr(at + key.size()));
}

} // namespace tinyscale::ep
