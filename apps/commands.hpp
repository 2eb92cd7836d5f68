// The subcommands of the `tinyscale` program, one file each; main.cpp wires them to CLI11.
#pragma once

#include <CLI/CLI.hpp>

namespace tinyscale::app {

/// Adds `bench ops`: matmul forward+backward through the tensor layer against raw Eigen GEMM.
void add_bench_ops(CLI::App& bench);
/// Adds `bench peak`: measures and caches this CPU's float32 GEMM peak (the MFU denominator).
void add_bench_peak(CLI::App& bench);
/// Adds `info`: what this build contains and which devices it sees.
void add_info(CLI::App& app);

} // namespace tinyscale::app
