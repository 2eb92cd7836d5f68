// `tinyscale reshard` (chapter 12): a checkpoint against a target layout, offline. tinyscale
// writes every checkpoint in the single-rank layout, so a run resumes in any layout by cutting
// at load; this command does that cutting without ranks: it checks that every parameter cuts
// evenly for the target (tp, pp, ep), prints what each rank would load, and with --out writes
// each rank's pieces (parameters and AdamW moments) as rank_NNNNN.safetensors, to inspect or to
// hand to another tool. The easy thing to get wrong: a rank loads its stages' blocks only, and of
// those only its tp piece and its experts; wte goes to the first and the last stage.
#include "commands.hpp"
#include "core/error.hpp"
#include "ep/placement.hpp"
#include "fourd/run.hpp"
#include "io/checkpoint.hpp"
#include "io/config.hpp"
#include "mesh/layout.hpp"
#include "nn/gpt.hpp"
#include "pp/partition.hpp"
#include "tp/model.hpp"
#include "tp/sharding.hpp"

#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <tuple>

namespace tinyscale::app {

namespace reshard_cmd { // this file's helpers (named: the apps compile as one unity build)
struct ReshardOptions {
  std::string checkpoint = "checkpoints";
  mesh::MeshShape shape; // dp here counts the ranks running their own rows (ep inside)
  int chunks = 1;
  std::string pp_blocks;
  std::string order = "tp-cp-ep-dp-pp";
  std::string out;
  int rank_rows = 16;
};

// Whether pipeline rank `pp_rank` trains `name` (its virtual stages are c p + pp_rank); `tied`:
// the last stage's head is wte.
bool trains(const std::string& name, int pp_rank, int p, int chunks, const pp::Partition& cut,
            bool tied) {
  const int last = p * chunks - 1;
  const auto rank_of = [&](int v) { return v % p; };
  if (name.rfind("wte.", 0) == 0)
    return pp_rank == rank_of(0) || (tied && pp_rank == rank_of(last));
  if (name.rfind("wpe.", 0) == 0) return pp_rank == rank_of(0);
  if (name.rfind("h.", 0) == 0) {
    const int block = std::stoi(name.substr(2));
    for (int v = 0; v <= last; ++v)
      if (block >= cut.begin(v) && block < cut.end(v)) return pp_rank == rank_of(v);
  }
  return pp_rank == rank_of(last); // ln_f
}

void run_reshard(const ReshardOptions& opt) {
  const io::Checkpoint c = io::read_checkpoint(opt.checkpoint); // verifies sizes and checksums
  const io::RunConfig config =
      io::parse_config(c.config_toml, opt.checkpoint + " (manifest config)");
  const mesh::MeshShape& s = opt.shape;
  // The target must be a layout `train` runs with this checkpoint's config: the same rules.
  mesh::ParallelPlan target;
  target.dp = s.dp, target.tp = s.tp, target.pp = s.pp, target.ep = s.ep;
  target.chunks = opt.chunks;
  target.schedule = opt.chunks > 1 ? "interleaved" : "1f1b";
  target.pp_blocks = opt.pp_blocks;
  target.order = opt.order;
  target.compose = true;
  fourd::check_plan(target, config);
  const pp::Partition cut = opt.pp_blocks.empty()
                                ? pp::balanced_partition(config.model.n_layer, s.pp * opt.chunks)
                                : pp::manual_partition(config.model.n_layer, s.pp * opt.chunks,
                                                       pp::parse_blocks_per_stage(opt.pp_blocks));
  const mesh::MeshLayout layout = target.mesh_layout();
  const ep::ExpertPlacement placement(std::max(1, config.model.moe.n_experts), s.ep);
  std::map<std::string, Tensor> model(c.model.begin(), c.model.end());
  std::map<std::string, Tensor> state(c.optimizer.begin(), c.optimizer.end());
  // the single-rank names, in order (nothing allocated)
  const std::vector<nn::ParameterSpec> names = nn::gpt_parameter_specs(config.model);
  std::printf("checkpoint: %s, step %lld, %zu parameters (every one whole: the single-rank "
              "layout)\ntarget: %s; stages %s\n",
              opt.checkpoint.c_str(), static_cast<long long>(c.step), c.model.size(),
              layout.describe().c_str(), cut.describe().c_str());
  if (!opt.out.empty()) std::filesystem::create_directories(opt.out);
  std::printf("| rank | dp | ep | tp | pp | parameters | elements | AdamW moments KiB |\n"
              "|---|---|---|---|---|---|---|---|\n");
  for (int r = 0; r < layout.world_size(); ++r) {
    const mesh::MeshCoord at = layout.coord(r);
    io::NamedTensors mine;
    std::int64_t elements = 0, moment_bytes = 0;
    int count = 0;
    for (const nn::ParameterSpec& p : names) {
      const int e = ep::expert_index(p.name);
      if (!trains(p.name, at.pp, s.pp, opt.chunks, cut, config.model.tie_embeddings)) continue;
      if (e >= 0 && s.ep > 1 && placement.owner(e) != at.ep) continue;
      const tp::ShardSpec spec = tp::shard_spec(p.name);
      const Tensor piece = tp::cut_shard(model.at(p.name), spec, at.tp, s.tp);
      ++count;
      elements += piece.numel();
      mine.emplace_back(p.name, piece);
      for (const char* kind : {"exp_avg.", "exp_avg_sq."}) {
        const auto it = state.find(kind + p.name);
        if (it == state.end()) continue;
        const Tensor m = tp::cut_shard(it->second, spec, at.tp, s.tp);
        moment_bytes += m.numel() * static_cast<std::int64_t>(dtype_size(m.dtype()));
        mine.emplace_back(kind + p.name, m);
      }
    }
    if (r < opt.rank_rows)
      std::printf("| %d | %d | %d | %d | %d | %d | %lld | %.1f |\n", r, at.dp, at.ep, at.tp, at.pp,
                  count, static_cast<long long>(elements),
                  static_cast<double>(moment_bytes) / 1024.0);
    if (!opt.out.empty()) {
      char file[32];
      std::snprintf(file, sizeof file, "rank_%05d.safetensors", r);
      io::save_safetensors((std::filesystem::path(opt.out) / file).string(), mine,
                           {{"layout", layout.describe()}, {"rank", std::to_string(r)}});
    }
  }
  if (layout.world_size() > opt.rank_rows)
    std::printf("... %d more ranks (pass --rank-rows %d to print every rank)\n",
                layout.world_size() - opt.rank_rows, layout.world_size());
  std::printf("every parameter cuts evenly for this layout; `tinyscale train --resume %s` with "
              "these flags loads it%s\n",
              opt.checkpoint.c_str(),
              opt.out.empty() ? ""
                              : detail::concat("; each rank's pieces are in ", opt.out).c_str());
}
} // namespace reshard_cmd

void add_reshard(CLI::App& app) {
  using namespace reshard_cmd;
  auto opt = std::make_shared<ReshardOptions>();
  auto* cmd = app.add_subcommand(
      "reshard", "Check a checkpoint against a target layout offline: what each rank of "
                 "--dp x --tp x --pp (--ep inside dp) would load; --out writes each rank's pieces");
  cmd->footer("Checkpoints are written in the single-rank layout, so any layout resumes from any "
              "other (chapter 12).\nExample:\n  tinyscale reshard --checkpoint checkpoints "
              "--dp 2 --tp 2 --pp 2");
  cmd->add_option("--checkpoint", opt->checkpoint,
                  "A checkpoint root (its `latest`) or step directory")
      ->capture_default_str();
  for (auto [flag, size, help] :
       {std::tuple{"--dp", &opt->shape.dp, "Data-parallel ranks (each its own rows; ep inside)"},
        std::tuple{"--tp", &opt->shape.tp, "Tensor-parallel ranks"},
        std::tuple{"--pp", &opt->shape.pp, "Pipeline stages"},
        std::tuple{"--ep", &opt->shape.ep, "Expert-parallel ranks (dividing --dp)"}})
    cmd->add_option(flag, *size, help)->capture_default_str()->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--chunks", opt->chunks, "Model chunks per pipeline rank (interleaved)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option("--pp-blocks", opt->pp_blocks,
                  "Blocks per virtual stage, e.g. 3,2 (default: even)");
  cmd->add_option("--order", opt->order, "Rank order, innermost first")->capture_default_str();
  cmd->add_option("--out", opt->out,
                  "Write rank_NNNNN.safetensors (each rank's parameters and AdamW moments) here");
  cmd->add_option("--rank-rows", opt->rank_rows, "Ranks to print")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->callback([opt] { run_reshard(*opt); });
}

} // namespace tinyscale::app
