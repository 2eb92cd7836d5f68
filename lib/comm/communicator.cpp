#include "comm/communicator.hpp"

#include "core/error.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace tinyscale::comm {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
  case ReduceOp::Sum: return "sum";
  case ReduceOp::Avg: return "avg";
  case ReduceOp::Max: return "max";
  }
  return "unknown";
}

CommOptions default_comm_options() {
  CommOptions options;
  if (const char* env = std::getenv("TINYSCALE_COMM_TIMEOUT_S")) {
    char* end = nullptr;
    const double seconds = std::strtod(env, &end);
    // At most a year: longer deadlines overflow steady_clock's time points and fire at once.
    TS_CHECK(end != env && *end == '\0' && seconds > 0 && seconds <= 365.0 * 86400.0,
             "TINYSCALE_COMM_TIMEOUT_S: expected a number of seconds in (0, 31536000], found '",
             env, "'; unset it to use the default of 60 s");
    options.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000.0));
  }
  if (const char* env = std::getenv("TINYSCALE_COMM_DEVICE_ONLY")) {
    TS_CHECK(std::string(env) == "emu", "TINYSCALE_COMM_DEVICE_ONLY: expected emu (the threads ",
             "backend then reads only emulated-device memory, as nccl reads only a GPU's), found '",
             env, "'; unset it to let the threads backend read every memory");
    options.device_only = Device::emu();
  }
  return options;
}

void Communicator::all_reduce(const void* send, void* recv, std::int64_t count, DType dtype,
                              ReduceOp op) {
  all_reduce_async(send, recv, count, dtype, op)->wait();
}

void Communicator::reduce_scatter(const void* send, void* recv, std::int64_t recv_count,
                                  DType dtype, ReduceOp op) {
  reduce_scatter_async(send, recv, recv_count, dtype, op)->wait();
}

void Communicator::all_gather(const void* send, void* recv, std::int64_t send_count, DType dtype) {
  all_gather_async(send, recv, send_count, dtype)->wait();
}

void Communicator::send(const void* buffer, std::int64_t count, DType dtype, int peer, int tag) {
  isend(buffer, count, dtype, peer, tag)->wait();
}

void Communicator::recv(void* buffer, std::int64_t count, DType dtype, int peer, int tag) {
  irecv(buffer, count, dtype, peer, tag)->wait();
}

void Communicator::send_recv(const void* send, std::int64_t send_count, int dst, void* recv,
                             std::int64_t recv_count, int src, DType dtype, int tag) {
  // Post the send first so that two ranks exchanging with each other never both block in recv.
  WorkHandle sent = isend(send, send_count, dtype, dst, tag);
  this->recv(recv, recv_count, dtype, src, tag);
  sent->wait();
}

std::string describe(const Communicator& comm) {
  return detail::concat("group '", comm.name(), "' (rank ", comm.rank(), " of ", comm.size(),
                        ", world rank ", comm.world_rank(comm.rank()), ", backend ", comm.backend(),
                        ")");
}

void throw_timeout(const Communicator& comm, const std::string& op, int peer, int tag,
                   std::chrono::duration<double> waited, const std::string& diagnosis) {
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.3g s", waited.count());
  std::string who =
      peer < 0 ? std::string("the other ranks")
               : detail::concat("rank ", peer, " (world rank ", comm.world_rank(peer), ")");
  throw Error(detail::concat(op, " timed out on ", describe(comm), ": waited ", seconds, " for ",
                             who, tag >= 0 ? detail::concat(", tag ", tag) : std::string(),
                             diagnosis,
                             ". Expected every rank of the group to reach the same operation; "
                             "a rank that failed, returned early or called another collective "
                             "leaves the others waiting. Raise the deadline with "
                             "TINYSCALE_COMM_TIMEOUT_S if the peer is only slow."));
}

void throw_size_mismatch(const Communicator& comm, const std::string& op, int rank_a,
                         std::int64_t count_a, DType dtype_a, int rank_b, std::int64_t count_b,
                         DType dtype_b) {
  throw Error(detail::concat(op, " on ", describe(comm), ": ranks disagree on the size: rank ",
                             rank_a, " passed ", count_a, " ", dtype_name(dtype_a),
                             " elements, rank ", rank_b, " passed ", count_b, " ",
                             dtype_name(dtype_b),
                             " elements. Every rank must pass the same count and dtype to a "
                             "collective."));
}

} // namespace tinyscale::comm
