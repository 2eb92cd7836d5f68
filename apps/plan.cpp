// `tinyscale plan`: which layout should this model use on this cluster (chapter 09)? Enumerates
// dp x tp x pp x ep, ZeRO stage, micro-batching, pipeline schedule and recompute, predicts each
// with lib/plan's cost model, drops what does not fit in memory and prints the fastest few with
// the split of their step and why the best wins. Nothing runs: it answers for clusters you do not
// have, and its answers are only as good as the rates it is given (chapter 09 checks them).
#include "commands.hpp"
#include "core/error.hpp"
#include "io/config.hpp"
#include "metrics/peak.hpp"
#include "plan/report.hpp"

#include <cstdio>
#include <iostream>
#include <memory>

namespace tinyscale::app {

namespace plan_cmd { // this file's helpers (named: the apps compile as one unity build)
struct PlanOptions {
  std::string model, cluster, device = "h100", order = mesh::kDefaultOrder;
  int gpus = 0, top = 5, max_chunks = 4;
  std::int64_t batch = 0, seq = 0;
  double memory_gib = 0, kernel_tflops = 0, peak_tflops = 0;
  std::vector<int> tp, pp, ep, cp, zero, micro_batch;
  std::vector<std::string> schedules, recompute;
  bool json = false;
};

// A size on the command line: an integer >= 1 (CLI11's PositiveNumber prints a double range).
std::string positive_size(std::string& text) {
  try {
    std::size_t used = 0;
    if (std::stol(text, &used) >= 1 && used == text.size()) return "";
  } catch (const std::exception&) {
  }
  return "expected an integer >= 1, found '" + text + "'";
}

plan::Device pick_device(const PlanOptions& opt) {
  if (opt.device != "cpu") return plan::device_named(opt.device);
  // The CPU: fp32, and the rate is this machine's measured GEMM peak (bench peak), or the one
  // passed; CPU "peak" and sustained rate are the same measured figure.
  double rate = opt.kernel_tflops * 1e12;
  std::string source = "--kernel-tflops";
  if (rate == 0) {
    const auto cached = metrics::cached_cpu_peak();
    TS_CHECK(cached.has_value(), "plan: expected a measured CPU GEMM peak for --device cpu, found ",
             "none cached; run `tinyscale bench peak` first or pass --kernel-tflops");
    rate = cached->flops;
    source = "measured by `" + cached->command + "` on " + cached->cpu_model;
  }
  return plan::cpu_device(rate, source);
}

void run_plan(const PlanOptions& opt) {
  // The model: a run config's [model] (and its batch and sequence length) or a preset.
  plan::ModelShape model;
  std::int64_t batch = opt.batch;
  if (opt.model.ends_with(".toml")) {
    const io::RunConfig config = io::load_config(opt.model);
    model = plan::shape_of(config.model, opt.seq > 0 ? opt.seq : config.train.seq_len, opt.model);
    if (batch == 0) batch = config.train.batch_size;
  } else {
    model = plan::model_preset(opt.model);
    if (opt.seq > 0) model.seq = opt.seq;
  }
  model.validate();
  TS_CHECK(batch > 0, "plan: expected --batch (the global batch in sequences) for preset '",
           opt.model, "', found none");

  plan::Cluster cluster;
  cluster.topology = mesh::load_topology(opt.cluster);
  cluster.device = pick_device(opt);
  if (opt.device != "cpu" && opt.kernel_tflops > 0) {
    cluster.device.kernel_flops = opt.kernel_tflops * 1e12;
    cluster.device.source += "; sustained rate replaced by --kernel-tflops";
  }
  if (opt.peak_tflops > 0) cluster.device.peak_flops = opt.peak_tflops * 1e12;
  cluster.memory_bytes =
      opt.memory_gib > 0 ? opt.memory_gib * (1 << 30) : cluster.device.memory_bytes;

  plan::SearchSpace space;
  space.devices = opt.gpus > 0 ? opt.gpus : cluster.topology.device_count();
  TS_CHECK(space.devices <= cluster.topology.device_count(),
           "plan: expected --gpus <= ", cluster.topology.device_count(), " (the devices of '",
           cluster.topology.name, "'), found ", space.devices, "; use a bigger topology file");
  space.batch = batch;
  space.tp = opt.tp;
  space.pp = opt.pp;
  space.ep = opt.ep;
  space.cp = opt.cp;
  space.zero = opt.zero;
  if (!opt.micro_batch.empty()) space.micro_batch_sizes = opt.micro_batch;
  for (const std::string& s : opt.schedules) space.schedules.push_back(pp::parse_schedule(s));
  if (!opt.recompute.empty()) {
    space.recompute.clear();
    for (const std::string& r : opt.recompute) // the trainers' train.recompute modes
      space.recompute.push_back(nn::parse_recompute(r));
  }
  space.max_chunks = opt.max_chunks;
  space.order = opt.order;
  mesh::MeshLayout({}, opt.order); // reject a bad order before the search

  const plan::Plan result = plan::search(model, cluster, space);
  if (opt.json) {
    std::cout << plan::plan_json(result, model, cluster, opt.top);
    return;
  }
  const double params = plan::total_parameters(model);
  std::cout << "model: " << model.name << ": l " << model.layers << ", h " << model.hidden << ", a "
            << model.heads << ", V " << model.vocab << ", s " << model.seq;
  if (model.experts > 0)
    std::cout << ", " << model.experts << " experts (top-" << model.top_k << ")";
  std::printf(", %.4g B parameters\n", params / 1e9);
  if (!model.note.empty()) std::cout << "  " << model.note << "\n";
  std::cout << "cluster: " << cluster.topology.name << ", " << space.devices << " of "
            << cluster.topology.device_count() << " devices; device " << cluster.device.name;
  std::printf(": peak %.4g TF/s, sustained %.4g TF/s, %.1f GiB\n", cluster.device.peak_flops / 1e12,
              cluster.device.kernel_flops / 1e12, cluster.memory_bytes / (1 << 30));
  std::cout << "  " << cluster.device.source << "\n";
  std::cout << "batch: " << batch << " sequences of " << model.seq << " tokens; order " << opt.order
            << "\n\n";
  std::cout << plan::format_plan(result, cluster, opt.top) << "\n"
            << plan::explain_plan(result, cluster);
}
} // namespace plan_cmd

void add_plan(CLI::App& app) {
  using namespace plan_cmd;
  auto opt = std::make_shared<PlanOptions>();
  auto* cmd = app.add_subcommand(
      "plan", "Rank the layouts (dp, tp, pp, ep, ZeRO, micro-batches, schedule, recompute) of a "
              "model on a cluster by predicted step time, after a memory filter");
  cmd->footer(
      "Examples:\n"
      "  tinyscale plan --model llama2-70b --cluster configs/topologies/nvl72.toml --gpus 288 "
      "--batch 1152\n"
      "  tinyscale plan --model configs/tiny.toml --cluster configs/topologies/laptop.toml "
      "--gpus 2 --device cpu\n"
      "Models: a run config (.toml, its [model] and [train] batch_size, seq_len) or a preset: "
      "megatron-1.7b ... megatron-1t (Narayanan et al. 2021 Table 1), gpt3-175b, llama2-70b "
      "(GPT-style layers), llama3-8b, llama3-70b, llama3-405b (exact).\n"
      "The cost model and its sources: lib/plan/predict.hpp and chapter 09. A pipeline of more "
      "than 256 micro-batches per step is not replayed whole: its step is timed at two shorter "
      "lengths and extended linearly (lib/plan/pipeline.hpp; a unit test checks it against the "
      "full replay), so a large --batch stays fast.");
  cmd->add_option("--model", opt->model, "Run config (.toml) or preset name")->required();
  cmd->add_option("--cluster", opt->cluster, "Topology TOML file (configs/topologies/*.toml)")
      ->required();
  cmd->add_option("--gpus", opt->gpus, "Devices to use (default: every device of the topology)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--batch", opt->batch,
                  "Global batch in sequences (default: a run config's train.batch_size)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seq", opt->seq, "Sequence length (default: the model's)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--device", opt->device, "a100, h100 or cpu (measured GEMM peak, fp32)")
      ->capture_default_str();
  cmd->add_option("--memory", opt->memory_gib,
                  "Memory budget per device in GiB (default: the device's)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--kernel-tflops", opt->kernel_tflops,
                  "Sustained matmul rate per device, TF/s (replaces the device table's)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--peak-tflops", opt->peak_tflops, "Peak per device for MFU, TF/s")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--top", opt->top, "Layouts to print (0 = all, as in the JSON)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  const CLI::Validator positive(positive_size, "INT>=1");
  cmd->add_option("--tp", opt->tp, "Only these tp sizes (repeatable)")->check(positive);
  cmd->add_option("--pp", opt->pp, "Only these pp sizes (repeatable)")->check(positive);
  cmd->add_option("--ep", opt->ep, "Only these ep sizes (repeatable)")->check(positive);
  cmd->add_option("--cp", opt->cp,
                  "Only these cp sizes (repeatable; context parallelism, chapter 14). Default: "
                  "every size on sequences of 8192 or more, else 1")
      ->check(positive);
  cmd->add_option("--zero", opt->zero, "Only these ZeRO stages, 0 to 3 (repeatable)")
      ->check(CLI::Range(0, 3));
  cmd->add_option("--micro-batch", opt->micro_batch, "Micro-batch sizes to try (default 1 2 4 8)")
      ->check(positive);
  cmd->add_option("--schedule", opt->schedules,
                  "Only these schedules: gpipe, 1f1b, interleaved, zb-h1 (repeatable)");
  cmd->add_option("--recompute", opt->recompute,
                  "Only these of none, selective and full (repeatable; train.recompute's modes)");
  cmd->add_option("--max-chunks", opt->max_chunks, "Interleaved: largest v to try")
      ->capture_default_str()
      ->check(CLI::Range(2, 64));
  cmd->add_option("--order", opt->order, "Rank order, innermost first")->capture_default_str();
  cmd->add_flag("--json", opt->json, "Print the plan as JSON (for the notebooks)");
  cmd->callback([opt] { run_plan(*opt); });
}

} // namespace tinyscale::app
