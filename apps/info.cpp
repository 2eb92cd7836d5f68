// `tinyscale info`: the build's configuration and the devices this process can see.
#include "comm/launch.hpp"
#include "comm/launcher.hpp"
#include "commands.hpp"
#include "core/device_query.hpp"
#include "core/error.hpp"

#include <Eigen/Core>
#include <iostream>
#include <thread>

namespace tinyscale::app {

namespace info_cmd { // this file's helpers (named: the apps compile as one unity build)
/// What `--backend auto` means in this process, or why it cannot run.
std::string auto_backend() {
  try {
    return comm::backend_name(comm::resolve_backend(comm::Backend::Auto));
  } catch (const Error& e) {
    return std::string("none: ") + e.what();
  }
}

/// Who started this process and what it was told (chapter 13), or why that cannot be read.
std::string launcher() {
  try {
    return comm::read_launch_info().describe();
  } catch (const Error& e) {
    return std::string("unreadable: ") + e.what();
  }
}
} // namespace info_cmd

void add_info(CLI::App& app) {
  using namespace info_cmd;
  auto* info = app.add_subcommand("info", "Print what this build contains and the devices it sees");
  info->callback([] {
    std::cout << version_line() << "\n"
              << "  CPU backend: Eigen " << EIGEN_WORLD_VERSION << "." << EIGEN_MAJOR_VERSION << "."
              << EIGEN_MINOR_VERSION << ", " << std::thread::hardware_concurrency()
              << " cores shared by the ranks (train.threads per rank)\n"
              << "  CUDA kernels compiled: " << (cuda_compiled() ? "yes" : "no") << "\n"
              << "  communication backends: threads"
              << (comm::built_with_mpi() ? ", mpi" : ", mpi not built (no Open MPI found)")
              << (comm::built_with_nccl() ? ", nccl" : ", nccl not built (no NCCL found)") << "\n"
              << "  launcher: " << launcher() << " (backend auto = " << auto_backend() << ")\n";
    auto devices = cuda_devices();
    if (devices.empty())
      std::cout << "  CUDA devices: none: no GPU visible (" << cuda_unavailable_reason() << ")\n";
    for (const auto& d : devices)
      std::cout << "  cuda:" << d.index << " " << d.name << ", "
                << d.memory_bytes / (1024.0 * 1024 * 1024) << " GiB, sm_" << d.compute_major
                << d.compute_minor << "\n";
  });
}

} // namespace tinyscale::app
