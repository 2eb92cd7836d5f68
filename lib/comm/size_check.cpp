// Checking mode: call signatures and their comparison (chapter 04); see size_check.hpp.
// Layout of one signature: [kind, reduce op, dtype, root, invalid, counts[N], recv counts[N]]; a
// collective with one count stores it in counts[0] and zeros elsewhere; `invalid` is 1 when the
// rank's own argument checks failed.
#include "comm/size_check.hpp"

#include "core/error.hpp"

#include <cstdint>

namespace tinyscale::comm {

namespace {

constexpr std::size_t kInvalid = 4;
constexpr std::size_t kHeader = 5;

const char* kind_name(std::int64_t kind) {
  switch (static_cast<CollectiveKind>(kind)) {
  case CollectiveKind::AllReduce: return "all_reduce";
  case CollectiveKind::ReduceScatter: return "reduce_scatter";
  case CollectiveKind::AllGather: return "all_gather";
  case CollectiveKind::Broadcast: return "broadcast";
  case CollectiveKind::AllToAll: return "all_to_all";
  case CollectiveKind::AllToAllV: return "all_to_all_v";
  case CollectiveKind::Barrier: return "barrier";
  }
  return "an unknown collective";
}

/// "all_reduce (sum, root -1)": what one signature asks for, for messages.
std::string call_name(const std::int64_t* sig) {
  std::string name = kind_name(sig[0]);
  const auto kind = static_cast<CollectiveKind>(sig[0]);
  if (kind == CollectiveKind::AllReduce || kind == CollectiveKind::ReduceScatter)
    name += detail::concat("(", reduce_op_name(static_cast<ReduceOp>(sig[1])), ")");
  if (kind == CollectiveKind::Broadcast) name += detail::concat("(root ", sig[3], ")");
  return name;
}

} // namespace

std::size_t signature_length(int group_size) {
  return kHeader + 2 * static_cast<std::size_t>(group_size);
}

std::vector<std::int64_t> call_signature(int group_size, CollectiveKind kind, ReduceOp op,
                                         DType dtype, std::int64_t count, int root) {
  std::vector<std::int64_t> sig(signature_length(group_size), 0);
  sig[0] = static_cast<std::int64_t>(kind);
  sig[1] = static_cast<std::int64_t>(op);
  sig[2] = static_cast<std::int64_t>(dtype);
  sig[3] = root;
  sig[kHeader] = count;
  return sig;
}

std::vector<std::int64_t> call_signature_v(int group_size, DType dtype,
                                           const std::vector<std::int64_t>& send_counts,
                                           const std::vector<std::int64_t>& recv_counts) {
  std::vector<std::int64_t> sig =
      call_signature(group_size, CollectiveKind::AllToAllV, ReduceOp::Sum, dtype, 0);
  const auto n = static_cast<std::size_t>(group_size);
  for (std::size_t j = 0; j < n && j < send_counts.size(); ++j) sig[kHeader + j] = send_counts[j];
  for (std::size_t j = 0; j < n && j < recv_counts.size(); ++j)
    sig[kHeader + n + j] = recv_counts[j];
  return sig;
}

void check_group_call(const Communicator& comm, bool checking, const std::string& op,
                      std::vector<std::int64_t> signature, const std::function<void()>& validate,
                      const GatherSignatures& gather) {
  if (!checking) {
    if (validate) validate();
    return;
  }
  // This rank's own checks run first but throw only after the all-gather, which every rank must
  // join: otherwise one rank's bad argument would leave the others waiting in it.
  std::exception_ptr invalid;
  try {
    if (validate) validate();
  } catch (...) {
    signature[kInvalid] = 1;
    invalid = std::current_exception();
  }
  const std::vector<std::int64_t> gathered = gather(signature);
  if (invalid) std::rethrow_exception(invalid);
  check_signatures(comm, op, gathered);
}

void check_disjoint(const Communicator& comm, const char* op, const void* send,
                    std::int64_t send_count, const void* recv, std::int64_t recv_count,
                    DType dtype) {
  // Compared as integers: ordering pointers into different arrays is unspecified in C++.
  const auto bytes = static_cast<std::uintptr_t>(dtype_size(dtype));
  const auto send_begin = reinterpret_cast<std::uintptr_t>(send);
  const auto recv_begin = reinterpret_cast<std::uintptr_t>(recv);
  const std::uintptr_t send_end = send_begin + static_cast<std::uintptr_t>(send_count) * bytes;
  const std::uintptr_t recv_end = recv_begin + static_cast<std::uintptr_t>(recv_count) * bytes;
  const bool overlap =
      send_count > 0 && recv_count > 0 && send_begin < recv_end && recv_begin < send_end;
  TS_CHECK(!overlap, op, " on ", describe(comm),
           ": expected disjoint send and recv buffers, found overlapping ranges: send [", send,
           ", +", send_count, " ", dtype_name(dtype), ") and recv [", recv, ", +", recv_count, " ",
           dtype_name(dtype), "); ", op, " cannot run in place: pass a separate receive buffer");
}

void check_signatures(const Communicator& comm, const std::string& op,
                      const std::vector<std::int64_t>& gathered) {
  const int n = comm.size();
  const std::size_t len = signature_length(n);
  TS_CHECK(gathered.size() == len * static_cast<std::size_t>(n), "check_signatures: expected ",
           len * static_cast<std::size_t>(n), " values, found ", gathered.size());
  auto sig = [&](int r) { return gathered.data() + len * static_cast<std::size_t>(r); };
  for (int r = 0; r < n; ++r)
    if (sig(r)[kInvalid] != 0)
      throw Error(detail::concat(
          op, " on ", describe(comm), ": rank ", r, "'s call of ", call_name(sig(r)),
          " failed that rank's own argument checks (its Error says why), so nobody started the "
          "collective. Expected valid arguments on every rank; fix the call on rank ",
          r, "."));
  const std::int64_t* first = sig(0);
  for (int r = 1; r < n; ++r) {
    const std::int64_t* other = sig(r);
    if (other[0] != first[0] || other[1] != first[1] || other[3] != first[3])
      throw Error(detail::concat(op, " on ", describe(comm),
                                 ": ranks disagree on the operation: rank 0 called ",
                                 call_name(first), ", rank ", r, " called ", call_name(other),
                                 ". Every rank must call the same collectives in the same order."));
  }
  if (static_cast<CollectiveKind>(first[0]) != CollectiveKind::AllToAllV) {
    for (int r = 1; r < n; ++r) {
      const std::int64_t* other = sig(r);
      if (other[2] != first[2] || other[kHeader] != first[kHeader])
        throw_size_mismatch(comm, op, 0, first[kHeader], static_cast<DType>(first[2]), r,
                            other[kHeader], static_cast<DType>(other[2]));
    }
    return;
  }
  // all_to_all_v: what rank i sends to rank j must be what rank j expects from rank i.
  const auto un = static_cast<std::size_t>(n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      const std::int64_t sent = sig(i)[kHeader + static_cast<std::size_t>(j)];
      const std::int64_t expected = sig(j)[kHeader + un + static_cast<std::size_t>(i)];
      if (sent != expected || sig(i)[2] != sig(j)[2])
        throw_size_mismatch(comm, detail::concat(op, " (rank ", i, " sending to rank ", j, ")"), i,
                            sent, static_cast<DType>(sig(i)[2]), j, expected,
                            static_cast<DType>(sig(j)[2]));
    }
}

} // namespace tinyscale::comm
