// MpiCommunicator: point-to-point messages, split, and the Transport of the textbook algorithms
// (chapter 04). A recv completes only for a message of exactly the expected size: a shorter one
// is caught with MPI_Get_count, a longer one by MPI's truncation error; both become Errors.
// The easy thing to get wrong: a recv that times out must be cancelled before we throw, or MPI
// would later write into a buffer the caller has freed.
#include "comm/mpi/mpi_communicator.hpp"

#include "core/error.hpp"

namespace tinyscale::comm {

namespace {

/// The Finish step of a recv: the message held exactly `count` elements.
MpiWork::Finish check_received(const Communicator& comm, std::string op, std::int64_t count,
                               DType dtype, int peer, int tag) {
  return [&comm, op = std::move(op), count, dtype, peer, tag](const MPI_Status& status) {
    int received = 0;
    check_mpi(MPI_Get_count(&status, mpi_datatype(dtype), &received), "MPI_Get_count");
    if (received != count)
      throw Error(detail::concat(op, " on ", describe(comm), ": expected ", count, " ",
                                 dtype_name(dtype), " elements from rank ", peer,
                                 tag >= 0 ? detail::concat(" (tag ", tag, ")") : std::string(),
                                 ", received ", received,
                                 "; the sender must send exactly what the receiver expects"));
  };
}

/// The tag reserved for the textbook algorithms on their own communicator. Messages between two
/// ranks on one communicator arrive in order, so one tag is enough for calls made one at a time.
constexpr int kAlgorithmTag = 0;

} // namespace

void MpiCommunicator::check_peer(const char* op, int peer, int tag) const {
  TS_CHECK(peer >= 0 && peer < size_, op, " on ", describe(*this), ": expected a peer in [0, ",
           size_, "), found ", peer);
  int* tag_ub = nullptr;
  int found = 0;
  check_mpi(MPI_Comm_get_attr(comm_, MPI_TAG_UB, &tag_ub, &found), "MPI_Comm_get_attr");
  const int max_tag = found && tag_ub ? *tag_ub : 32767;
  TS_CHECK(tag >= 0 && tag <= max_tag, op, " on ", describe(*this), ": expected a tag in [0, ",
           max_tag, "], found ", tag);
}

WorkHandle MpiCommunicator::isend(const void* buffer, std::int64_t count, DType dtype, int peer,
                                  int tag) {
  check_peer("send", peer, tag);
  MPI_Request request;
  check_mpi(
      MPI_Isend(buffer, mpi_count(count, "send"), mpi_datatype(dtype), peer, tag, comm_, &request),
      "MPI_Isend");
  return std::make_unique<MpiWork>(*this, "send", peer, tag, MpiWork::Kind::Send, request);
}

WorkHandle MpiCommunicator::irecv(void* buffer, std::int64_t count, DType dtype, int peer,
                                  int tag) {
  check_peer("recv", peer, tag);
  MPI_Request request;
  check_mpi(
      MPI_Irecv(buffer, mpi_count(count, "recv"), mpi_datatype(dtype), peer, tag, comm_, &request),
      "MPI_Irecv");
  return std::make_unique<MpiWork>(*this, "recv", peer, tag, MpiWork::Kind::Recv, request,
                                   check_received(*this, "recv", count, dtype, peer, tag));
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key, const std::string& name) {
  // MPI_Comm_split blocks with no deadline; a barrier first makes a missing rank a timeout Error
  // instead of a hang.
  barrier();
  MPI_Comm comm = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &comm), "MPI_Comm_split");
  if (comm == MPI_COMM_NULL) return nullptr;
  return std::make_unique<MpiCommunicator>(comm, name, options_);
}

// ---- the textbook algorithms' Transport ------------------------------------------------------

MpiTransport::MpiTransport(MPI_Comm comm, const Communicator& owner) : comm_(comm), owner_(owner) {}

std::string MpiTransport::op_name(const char* op) const { return phase_ + " " + op; }

void MpiTransport::send(const void* buffer, std::int64_t count, DType dtype, int peer) {
  MPI_Request request;
  check_mpi(MPI_Isend(buffer, mpi_count(count, "transport send"), mpi_datatype(dtype), peer,
                      kAlgorithmTag, comm_, &request),
            "MPI_Isend");
  MpiWork(owner_, op_name("send"), peer, -1, MpiWork::Kind::Send, request).wait();
}

void MpiTransport::recv(void* buffer, std::int64_t count, DType dtype, int peer) {
  MPI_Request request;
  check_mpi(MPI_Irecv(buffer, mpi_count(count, "transport recv"), mpi_datatype(dtype), peer,
                      kAlgorithmTag, comm_, &request),
            "MPI_Irecv");
  MpiWork(owner_, op_name("recv"), peer, -1, MpiWork::Kind::Recv, request,
          check_received(owner_, op_name("recv"), count, dtype, peer, -1))
      .wait();
}

void MpiTransport::send_recv(const void* send, std::int64_t send_count, int dst, void* recv,
                             std::int64_t recv_count, int src, DType dtype) {
  // Post the receive first, then the send: neither side can block the other.
  MPI_Request recv_request, send_request;
  check_mpi(MPI_Irecv(recv, mpi_count(recv_count, "transport recv"), mpi_datatype(dtype), src,
                      kAlgorithmTag, comm_, &recv_request),
            "MPI_Irecv");
  MpiWork received(owner_, op_name("recv"), src, -1, MpiWork::Kind::Recv, recv_request,
                   check_received(owner_, op_name("recv"), recv_count, dtype, src, -1));
  check_mpi(MPI_Isend(send, mpi_count(send_count, "transport send"), mpi_datatype(dtype), dst,
                      kAlgorithmTag, comm_, &send_request),
            "MPI_Isend");
  MpiWork sent(owner_, op_name("send"), dst, -1, MpiWork::Kind::Send, send_request);
  received.wait();
  sent.wait();
}

} // namespace tinyscale::comm
