// The subcommands of the `tinyscale` program, one file each; main.cpp wires them to CLI11.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace tinyscale::app {

/// Adds `bench ops`: matmul forward+backward through the tensor layer against raw Eigen GEMM.
void add_bench_ops(CLI::App& bench);
/// Adds `bench comm`: collective time, algbw and busbw per message size, beside memcpy.
void add_bench_comm(CLI::App& bench);
/// Adds `bench peak`: measures and caches this CPU's float32 GEMM peak (the MFU denominator).
void add_bench_peak(CLI::App& bench);
/// Adds `info`: what this build contains and which devices it sees.
void add_info(CLI::App& app);
/// "tinyscale 0.1.0": the first line of `--version` and of `info`.
std::string version_line();
/// What `tinyscale --version` prints: version, git commit, build type, CUDA, NCCL and MPI.
std::string version_text();

/// Adds `bench train`: training tokens/s and CPU MFU of one config.
void add_bench_train(CLI::App& bench);
/// Adds `bench dp`: data-parallel tokens/s, scaling efficiency and overlap per strategy.
void add_bench_dp(CLI::App& bench);
/// Adds `bench tp`: tensor-parallel step time, block traffic against the formula and measured
/// activation memory, with and without sequence parallelism.
void add_bench_tp(CLI::App& bench);
/// Adds `bench ep`: one expert-parallel MoE layer's dispatch, expert and combine times, its
/// all-to-all bytes against the balanced-routing formula and its expert load, balanced and skewed.
void add_bench_ep(CLI::App& bench);
/// Adds `bench zero`: memory per rank, bytes sent and step time per ZeRO stage and dp size.
void add_bench_zero(CLI::App& bench);
/// Adds `bench pp`: pipeline schedules' bubble per rank measured beside the simulator's and the
/// formula, activation peak and step time.
void add_bench_pp(CLI::App& bench);
/// Adds `bench plan`: the planner's predicted step time of layouts beside the measured one, with
/// the rank agreement of the two (chapter 09).
void add_bench_plan(CLI::App& bench);
/// Adds `train`: the single-rank training run.
void add_train(CLI::App& app);
/// Adds `export-hf`: a checkpoint as a Hugging Face GPT-2 model.
void add_export_hf(CLI::App& app);
/// `tinyscale reshard`: a checkpoint checked against, and cut for, a target layout (chapter 12).
void add_reshard(CLI::App& app);
/// Adds `check` and its `check grad`: every op's gradient against finite differences.
void add_check(CLI::App& app);
/// Adds `placement`: a mesh placed on a topology file, the links every group crosses.
void add_placement(CLI::App& app);
/// Adds `plan`: layouts of a model on a cluster ranked by predicted step time (chapter 09).
void add_plan(CLI::App& app);
/// Adds `schedule`: a pipeline schedule generated, validated and simulated, no model needed.
void add_schedule(CLI::App& app);
/// Adds `trace`: the timeline, step-time breakdown and overlap of a Chrome trace file.
void add_trace(CLI::App& app);

} // namespace tinyscale::app
