// MpiCommunicator: identity and the collectives (chapter 04). Each is either MPI's blocking call
// run by the group's collective thread, or MPI's nonblocking call polled by the caller; either
// way the caller waits with a deadline. How the in-place conventions of communicator.hpp map
// onto MPI:
//   all_reduce      send == recv                   -> MPI_IN_PLACE as the send buffer
//   all_gather      send == recv + rank * count    -> MPI_IN_PLACE (MPI reads block `rank`)
//   reduce_scatter  recv == send + rank * count    -> NOT MPI_IN_PLACE: that would leave the result
//                   in block 0, so we reduce into a scratch block and copy it to block `rank`.
#include "comm/mpi/mpi_communicator.hpp"

#include "comm/mpi/mpi_runtime.hpp"
#include "comm/reduce.hpp"
#include "comm/size_check.hpp"
#include "core/error.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

namespace tinyscale::comm {

namespace {

/// The progress a new group starts with: TINYSCALE_MPI_PROGRESS (thread or poll) when set, else
/// Poll (the collective thread is opt-in: mpi_runtime.hpp says why).
MpiProgress default_progress(bool thread_multiple) {
  const char* env = std::getenv("TINYSCALE_MPI_PROGRESS");
  if (env == nullptr) return MpiProgress::Poll;
  const std::string value = env;
  TS_CHECK(value == "thread" || value == "poll",
           "TINYSCALE_MPI_PROGRESS: expected thread or poll, found '", value,
           "'; unset it for the default, poll");
  TS_CHECK(value == "poll" || thread_multiple,
           "TINYSCALE_MPI_PROGRESS=thread: the collective thread needs MPI_THREAD_MULTIPLE, which "
           "MPI did not grant (the MpiRuntime asks for it only when the variable is already set "
           "as MPI starts, and this MPI library may not provide it); set it before the program "
           "starts, or set TINYSCALE_MPI_PROGRESS=poll or unset it");
  return value == "thread" ? MpiProgress::Thread : MpiProgress::Poll;
}

} // namespace

std::unique_ptr<MpiCommunicator> MpiCommunicator::world(const CommOptions& options) {
  TS_CHECK(MpiRuntime::live() != nullptr,
           "MpiCommunicator::world: expected a live MpiRuntime, found none; create one in main() "
           "or start the ranks with run_world(Backend::Mpi, ...)");
  MPI_Comm dup = MPI_COMM_NULL;
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &dup), "MPI_Comm_dup");
  return std::make_unique<MpiCommunicator>(dup, "world", options);
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name, const CommOptions& options)
    : comm_(comm), name_(std::move(name)), options_(options) {
  const bool thread_multiple = MpiRuntime::live() && MpiRuntime::live()->thread_multiple();
  progress_ = default_progress(thread_multiple); // first: it may refuse the environment
  check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  // World rank of every group rank, for messages and traces.
  MPI_Group group, world_group;
  check_mpi(MPI_Comm_group(comm_, &group), "MPI_Comm_group");
  check_mpi(MPI_Comm_group(MPI_COMM_WORLD, &world_group), "MPI_Comm_group");
  std::vector<int> group_ranks(static_cast<std::size_t>(size_));
  for (int r = 0; r < size_; ++r) group_ranks[static_cast<std::size_t>(r)] = r;
  world_ranks_.resize(group_ranks.size());
  check_mpi(
      MPI_Group_translate_ranks(group, size_, group_ranks.data(), world_group, world_ranks_.data()),
      "MPI_Group_translate_ranks");
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  check_mpi(MPI_Comm_dup(comm_, &algorithm_comm_), "MPI_Comm_dup");
  transport_ = std::make_unique<MpiTransport>(algorithm_comm_, *this);
  if (thread_multiple) {
    MPI_Comm thread_comm = MPI_COMM_NULL;
    check_mpi(MPI_Comm_dup(comm_, &thread_comm), "MPI_Comm_dup");
    collective_thread_ = std::make_unique<MpiCollectiveThread>(thread_comm);
  }
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  collective_thread_.reset(); // stops the thread first (it frees its own communicator)
  if (finalized) return;      // the MpiRuntime died first; nothing left to free
  MPI_Comm_free(&algorithm_comm_);
  MPI_Comm_free(&comm_);
}

int MpiCommunicator::world_rank(int group_rank) const {
  TS_CHECK(group_rank >= 0 && group_rank < size_, "world_rank: expected a rank in [0, ", size_,
           ") of ", name_, ", found ", group_rank);
  return world_ranks_[static_cast<std::size_t>(group_rank)];
}

Transport& MpiCommunicator::transport() { return *transport_; }

void MpiCommunicator::set_progress(MpiProgress progress) {
  TS_CHECK(progress == MpiProgress::Poll || collective_thread_ != nullptr, "set_progress on ",
           describe(*this),
           ": the collective thread needs MPI_THREAD_MULTIPLE, which MPI did not grant; start "
           "the program with TINYSCALE_MPI_PROGRESS=thread (the MpiRuntime asks for it then), or "
           "use MpiProgress::Poll");
  progress_ = progress;
}

bool MpiCommunicator::on_thread(std::int64_t bytes) const {
  return progress_ == MpiProgress::Thread && bytes >= kThreadMinBytes;
}

WorkHandle MpiCommunicator::thread_work(const char* op, std::function<int(MPI_Comm)> run,
                                        MpiThreadWork::Finish finish) {
  return std::make_unique<MpiThreadWork>(
      *this, op, collective_thread_->submit(std::move(run)), std::move(finish),
      [this, sequence = collectives_++] { return find_missing(sequence); });
}

WorkHandle MpiCommunicator::collective_work(const char* op, MPI_Request request,
                                            MpiWork::Finish finish) {
  auto work = std::make_unique<MpiWork>(*this, op, -1, -1, MpiWork::Kind::Collective, request,
                                        std::move(finish));
  work->set_diagnosis([this, sequence = collectives_++] { return find_missing(sequence); });
  return work;
}

// MPI cannot say which rank a collective waits for, so the ranks that time out ask each other:
// each sends the number of the collective it is stuck in to every other rank (on the algorithm
// communicator, under a tag of its own) and collects the same note from the others for a grace
// period of a quarter of the deadline (50 ms to 2 s). Ranks stuck in the same collective time out
// together and answer; the rank that never reached it (asleep, computing, dead) does not.
std::string MpiCommunicator::find_missing(std::int64_t sequence) {
  constexpr int kNoteTag = 1; // the algorithms use tag 0 on that communicator
  if (size_ <= 1) return {};
  notes_.push_back(sequence); // MPI reads it after the sends are released: it must stay put
  for (int peer = 0; peer < size_; ++peer) {
    MPI_Request request;
    if (peer != rank_ && MPI_Isend(&notes_.back(), 1, MPI_INT64_T, peer, kNoteTag, algorithm_comm_,
                                   &request) == MPI_SUCCESS)
      MPI_Request_free(&request); // completes in the background, or never for a dead rank
  }
  using std::chrono::milliseconds;
  const auto grace = std::clamp(options_.timeout / 4, milliseconds(50), milliseconds(2000));
  const Clock::time_point until = Clock::now() + grace;
  std::vector<bool> answered(static_cast<std::size_t>(size_), false);
  answered[static_cast<std::size_t>(rank_)] = true;
  int silent = size_ - 1;
  while (silent > 0 && Clock::now() < until) {
    int arrived = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kNoteTag, algorithm_comm_, &arrived, &status) != MPI_SUCCESS)
      break;
    if (!arrived) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      continue;
    }
    std::int64_t note = -1;
    MPI_Recv(&note, 1, MPI_INT64_T, status.MPI_SOURCE, kNoteTag, algorithm_comm_,
             MPI_STATUS_IGNORE);
    const auto from = static_cast<std::size_t>(status.MPI_SOURCE);
    if (note == sequence && !answered[from]) { // older notes are of older timeouts
      answered[from] = true;
      --silent;
    }
  }
  if (silent == 0)
    return "; every other rank reported waiting in it too: all reached it, yet it did not "
           "finish (this rank was itself held up, the network is slow, or the deadline is too "
           "short)";
  std::string missing;
  for (int r = 0; r < size_; ++r)
    if (!answered[static_cast<std::size_t>(r)])
      missing += detail::concat(missing.empty() ? "" : ", ", "rank ", r, " (world rank ",
                                world_rank(r), ")");
  return detail::concat("; no word from ", missing, " within ", grace.count(),
                        " ms after the deadline: ", silent == 1 ? "it" : "they",
                        " never reached this collective (stopped, still computing, or gone)");
}

void MpiCommunicator::check_call(const std::string& op, std::vector<std::int64_t> signature,
                                 const std::function<void()>& validate) {
  check_group_call(
      *this, options_.check_sizes, op, std::move(signature), validate,
      [&](const std::vector<std::int64_t>& mine) {
        const int n = static_cast<int>(mine.size());
        std::vector<std::int64_t> gathered(mine.size() * static_cast<std::size_t>(size_));
        MPI_Request request;
        check_mpi(MPI_Iallgather(mine.data(), n, MPI_INT64_T, gathered.data(), n, MPI_INT64_T,
                                 comm_, &request),
                  "MPI_Iallgather");
        MpiWork(*this, op + " (checking sizes)", -1, -1, MpiWork::Kind::Collective, request).wait();
        return gathered;
      });
}

// ---- all_reduce ------------------------------------------------------------------------------

WorkHandle MpiCommunicator::all_reduce_async(const void* send, void* recv, std::int64_t count,
                                             DType dtype, ReduceOp op) {
  int n = 0;
  check_call("all_reduce", call_signature(size_, CollectiveKind::AllReduce, op, dtype, count), [&] {
    check_reducible(dtype, op, "all_reduce");
    n = mpi_count(count, "all_reduce");
  });
  const int group = size_;
  const void* source = send == recv ? MPI_IN_PLACE : send;
  const MPI_Datatype type = mpi_datatype(dtype);
  const MPI_Op reduction = mpi_op(op);
  if (on_thread(count * static_cast<std::int64_t>(dtype_size(dtype))))
    return thread_work(
        "all_reduce",
        [=](MPI_Comm c) { return MPI_Allreduce(source, recv, n, type, reduction, c); },
        [=] { finish_reduction(recv, count, dtype, op, group); });
  MPI_Request request;
  check_mpi(MPI_Iallreduce(source, recv, n, type, reduction, comm_, &request), "MPI_Iallreduce");
  return collective_work("all_reduce", request, [=](const MPI_Status&) {
    finish_reduction(recv, count, dtype, op, group);
  });
}

// ---- reduce_scatter --------------------------------------------------------------------------

WorkHandle MpiCommunicator::reduce_scatter_async(const void* send, void* recv,
                                                 std::int64_t recv_count, DType dtype,
                                                 ReduceOp op) {
  int n = 0;
  check_call("reduce_scatter",
             call_signature(size_, CollectiveKind::ReduceScatter, op, dtype, recv_count), [&] {
               check_reducible(dtype, op, "reduce_scatter");
               n = mpi_count(recv_count, "reduce_scatter");
               mpi_count(recv_count * size_, "reduce_scatter (the whole send buffer)");
             });
  const bool in_place =
      element_at(send, static_cast<std::int64_t>(rank_) * recv_count, dtype) == recv;
  // In place, reduce into a scratch block that the Work owns, then copy it to block `rank`.
  const std::size_t bytes = static_cast<std::size_t>(recv_count) * dtype_size(dtype);
  auto scratch = std::make_shared<std::vector<char>>(in_place ? bytes : 0);
  void* target = in_place ? static_cast<void*>(scratch->data()) : recv;
  const int group = size_;
  const MPI_Datatype type = mpi_datatype(dtype);
  const MPI_Op reduction = mpi_op(op);
  auto finish = [=] {
    if (in_place && bytes > 0) std::memcpy(recv, scratch->data(), bytes);
    finish_reduction(recv, recv_count, dtype, op, group);
  };
  if (on_thread(static_cast<std::int64_t>(bytes) * size_))
    return thread_work(
        "reduce_scatter",
        [=](MPI_Comm c) { return MPI_Reduce_scatter_block(send, target, n, type, reduction, c); },
        finish);
  MPI_Request request;
  check_mpi(MPI_Ireduce_scatter_block(send, target, n, type, reduction, comm_, &request),
            "MPI_Ireduce_scatter_block");
  return collective_work("reduce_scatter", request, [=](const MPI_Status&) { finish(); });
}

// ---- all_gather ------------------------------------------------------------------------------

WorkHandle MpiCommunicator::all_gather_async(const void* send, void* recv, std::int64_t send_count,
                                             DType dtype) {
  int n = 0;
  check_call("all_gather",
             call_signature(size_, CollectiveKind::AllGather, ReduceOp::Sum, dtype, send_count),
             [&] {
               n = mpi_count(send_count, "all_gather");
               mpi_count(send_count * size_, "all_gather (the whole receive buffer)");
             });
  const bool in_place =
      element_at(recv, static_cast<std::int64_t>(rank_) * send_count, dtype) == send;
  const void* source = in_place ? MPI_IN_PLACE : send;
  const MPI_Datatype type = mpi_datatype(dtype);
  if (on_thread(send_count * size_ * static_cast<std::int64_t>(dtype_size(dtype))))
    return thread_work(
        "all_gather", [=](MPI_Comm c) { return MPI_Allgather(source, n, type, recv, n, type, c); });
  MPI_Request request;
  check_mpi(MPI_Iallgather(source, n, type, recv, n, type, comm_, &request), "MPI_Iallgather");
  return collective_work("all_gather", request);
}

// ---- broadcast, all_to_all(v), barrier -------------------------------------------------------

void MpiCommunicator::broadcast(void* buffer, std::int64_t count, DType dtype, int root) {
  int n = 0;
  check_call("broadcast",
             call_signature(size_, CollectiveKind::Broadcast, ReduceOp::Sum, dtype, count, root),
             [&] {
               TS_CHECK(root >= 0 && root < size_, "broadcast on ", describe(*this),
                        ": expected a root in [0, ", size_, "), found ", root);
               n = mpi_count(count, "broadcast");
             });
  MPI_Request request;
  check_mpi(MPI_Ibcast(buffer, n, mpi_datatype(dtype), root, comm_, &request), "MPI_Ibcast");
  collective_work("broadcast", request)->wait();
}

void MpiCommunicator::all_to_all(const void* send, void* recv, std::int64_t count_per_rank,
                                 DType dtype) {
  int n = 0;
  check_call("all_to_all",
             call_signature(size_, CollectiveKind::AllToAll, ReduceOp::Sum, dtype, count_per_rank),
             [&] {
               n = mpi_count(count_per_rank, "all_to_all");
               const int total = mpi_count(count_per_rank * size_, "all_to_all (the whole buffer)");
               check_disjoint(*this, "all_to_all", send, total, recv, total, dtype);
             });
  MPI_Request request;
  check_mpi(
      MPI_Ialltoall(send, n, mpi_datatype(dtype), recv, n, mpi_datatype(dtype), comm_, &request),
      "MPI_Ialltoall");
  collective_work("all_to_all", request)->wait();
}

void MpiCommunicator::all_to_all_v(const void* send, const std::vector<std::int64_t>& send_counts,
                                   void* recv, const std::vector<std::int64_t>& recv_counts,
                                   DType dtype) {
  const auto n = static_cast<std::size_t>(size_);
  // MPI's counts and displacements are int: convert them, refusing anything past INT_MAX.
  std::vector<int> sc(n), sd(n), rc(n), rd(n);
  check_call("all_to_all_v", call_signature_v(size_, dtype, send_counts, recv_counts), [&] {
    TS_CHECK(send_counts.size() == n && recv_counts.size() == n, "all_to_all_v on ",
             describe(*this), ": expected ", n, " send and recv counts (one per rank), found ",
             send_counts.size(), " and ", recv_counts.size());
    std::int64_t send_offset = 0, recv_offset = 0;
    for (std::size_t j = 0; j < n; ++j) {
      sc[j] = mpi_count(send_counts[j], "all_to_all_v (a send count)");
      rc[j] = mpi_count(recv_counts[j], "all_to_all_v (a recv count)");
      sd[j] = mpi_count(send_offset, "all_to_all_v (a send displacement)");
      rd[j] = mpi_count(recv_offset, "all_to_all_v (a recv displacement)");
      send_offset += send_counts[j];
      recv_offset += recv_counts[j];
    }
    check_disjoint(*this, "all_to_all_v", send, send_offset, recv, recv_offset, dtype);
  });
  MPI_Request request;
  check_mpi(MPI_Ialltoallv(send, sc.data(), sd.data(), mpi_datatype(dtype), recv, rc.data(),
                           rd.data(), mpi_datatype(dtype), comm_, &request),
            "MPI_Ialltoallv");
  collective_work("all_to_all_v", request)->wait();
}

void MpiCommunicator::barrier() {
  check_call("barrier",
             call_signature(size_, CollectiveKind::Barrier, ReduceOp::Sum, DType::Float32, 0));
  MPI_Request request;
  check_mpi(MPI_Ibarrier(comm_, &request), "MPI_Ibarrier");
  collective_work("barrier", request)->wait();
}

} // namespace tinyscale::comm
