// `tinyscale --version`: which tinyscale this is (version, git commit, build type) and what the
// build compiled in. The commit comes from cmake/build_info.cmake, rewritten at every build, so a
// binary never names a commit other than the one it was built from (a "-dirty" suffix says the
// tree had uncommitted changes).
#include "build_info.hpp"
#include "comm/launch.hpp"
#include "commands.hpp"
#include "core/device_query.hpp"

#include <string>

namespace tinyscale::app {

std::string version_line() { return std::string("tinyscale ") + TINYSCALE_VERSION; }

std::string version_text() {
  return version_line() + "\n  git commit: " + TINYSCALE_GIT_COMMIT +
         "\n  build type: " + TINYSCALE_BUILD_TYPE +
         "\n  CUDA kernels: " + (cuda_compiled() ? "compiled" : "not compiled") +
         "\n  NCCL: " + (comm::built_with_nccl() ? "compiled" : "not compiled") +
         "\n  Open MPI: " + (comm::built_with_mpi() ? "compiled" : "not compiled");
}

} // namespace tinyscale::app
