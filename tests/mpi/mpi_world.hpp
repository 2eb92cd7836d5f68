// Helpers of the mpi tests: a world communicator with a short deadline, and the integer-valued
// inputs whose sums, averages over 4 ranks and maxima are exact in every dtype, so the tests can
// compare with == against a reference computed on one rank.
#pragma once

#include "comm/mpi/mpi_communicator.hpp"
#include "core/error.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tinyscale::test {

/// How close a run over MPI must come to the same run on one rank (the equivalence tests of
/// tests/mpi compare with it).
constexpr double kTolerance = 1e-5;

/// Runs `operation` once and returns the message of the tinyscale::Error it throws. (Unlike
/// REQUIRE_TS_ERROR, which runs its expression twice, this suits operations that consume a
/// message or join a collective.)
template <typename F> std::string error_message(F&& operation) {
  try {
    operation();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no tinyscale::Error was thrown)";
}

/// The MPI world with a deadline well below ctest's TIMEOUT, so a hang fails as an Error.
inline std::unique_ptr<comm::MpiCommunicator>
mpi_world(std::chrono::milliseconds timeout = std::chrono::seconds(20), bool check_sizes = false) {
  comm::CommOptions options;
  options.timeout = timeout;
  options.check_sizes = check_sizes;
  return comm::MpiCommunicator::world(options);
}

/// Element i of rank r's input: small integers, different on every rank, some negative.
template <typename T> T input_value(int rank, std::int64_t i) {
  return static_cast<T>((i * 7 + rank * 5) % 11 - 4 + 3 * rank);
}

/// rank r's whole input of `count` elements.
template <typename T> std::vector<T> input(int rank, std::int64_t count) {
  std::vector<T> x(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) x[static_cast<std::size_t>(i)] = input_value<T>(rank, i);
  return x;
}

/// The reduction of element i over `ranks` ranks, computed sequentially on one rank.
template <typename T> T reduced_value(comm::ReduceOp op, int ranks, std::int64_t i) {
  T result = input_value<T>(0, i);
  for (int r = 1; r < ranks; ++r) {
    const T x = input_value<T>(r, i);
    result = op == comm::ReduceOp::Max ? (x > result ? x : result) : result + x;
  }
  return op == comm::ReduceOp::Avg ? result / static_cast<T>(ranks) : result;
}

/// The reduce ops that `T` supports (Avg needs floating point).
template <typename T> std::vector<comm::ReduceOp> reduce_ops() {
  if (is_floating(dtype_of<T>()))
    return {comm::ReduceOp::Sum, comm::ReduceOp::Avg, comm::ReduceOp::Max};
  return {comm::ReduceOp::Sum, comm::ReduceOp::Max};
}

} // namespace tinyscale::test
