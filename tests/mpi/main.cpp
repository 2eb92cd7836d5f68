// mpi_tests: the Catch2 tests of the mpi backend, run by every rank under mpiexec (label mpi).
// Every rank runs every test; rank 0 prints the report, the other ranks print theirs only when
// they fail. The easy thing to get wrong: a failure on one rank must fail the run, so the exit
// code combines every rank's failure count (an MPI_Allreduce) before MPI is finalised.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "comm/mpi/mpi_runtime.hpp"

#include <iostream>
#include <mpi.h>
#include <sstream>

int main(int argc, char** argv) {
  tinyscale::comm::MpiRuntime runtime;
  const int rank = runtime.world_rank();
  // Catch's console reporter writes through std::cout's buffer: capture it on ranks other than 0.
  std::ostringstream captured;
  std::streambuf* console = rank == 0 ? nullptr : std::cout.rdbuf(captured.rdbuf());
  const int failures = Catch::Session().run(argc, argv);
  if (console != nullptr) {
    std::cout.rdbuf(console);
    if (failures > 0) std::cerr << "==== rank " << rank << " failed ====\n" << captured.str();
  }
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0 && total > failures)
    std::cerr << "mpi_tests: " << total - failures
              << " test failure(s) on other ranks (their reports are above)\n";
  return total > 0 ? 1 : 0;
}
