#include "comm/counting.hpp"

namespace tinyscale::comm {

CountingCommunicator::CountingCommunicator(Communicator& inner) : inner_(&inner) {}

CountingCommunicator::CountingCommunicator(std::unique_ptr<Communicator> inner, CommCounts* sink)
    : owned_(std::move(inner)), inner_(owned_.get()), sink_(sink) {}

void CountingCommunicator::count(const char* op, std::int64_t elements, DType dtype,
                                 double wire_factor) {
  CommCount& c = (*sink_)[{region_, op}];
  const std::int64_t bytes = elements * static_cast<std::int64_t>(dtype_size(dtype));
  c.calls += 1;
  c.payload_bytes += bytes;
  c.wire_bytes += wire_factor * static_cast<double>(bytes);
}

CommCount CountingCommunicator::total(const std::string& region_filter) const {
  CommCount sum;
  for (const auto& [key, c] : *sink_) {
    if (!region_filter.empty() && key.first != region_filter) continue;
    sum.calls += c.calls;
    sum.payload_bytes += c.payload_bytes;
    sum.wire_bytes += c.wire_bytes;
  }
  return sum;
}

namespace {
// The ring's share of a full buffer that each rank sends (docs/theory.md sec. 3).
double ring(int n) { return n > 1 ? static_cast<double>(n - 1) / n : 0.0; }
} // namespace

void CountingCommunicator::all_reduce(const void* send, void* recv, std::int64_t count, DType dtype,
                                      ReduceOp op) {
  this->count("all_reduce", count, dtype, 2 * ring(size()));
  inner_->all_reduce(send, recv, count, dtype, op);
}

void CountingCommunicator::reduce_scatter(const void* send, void* recv, std::int64_t recv_count,
                                          DType dtype, ReduceOp op) {
  count("reduce_scatter", recv_count * size(), dtype, ring(size()));
  inner_->reduce_scatter(send, recv, recv_count, dtype, op);
}

void CountingCommunicator::all_gather(const void* send, void* recv, std::int64_t send_count,
                                      DType dtype) {
  count("all_gather", send_count * size(), dtype, ring(size()));
  inner_->all_gather(send, recv, send_count, dtype);
}

void CountingCommunicator::broadcast(void* buffer, std::int64_t count, DType dtype, int root) {
  this->count("broadcast", count, dtype, size() > 1 ? 1.0 : 0.0);
  inner_->broadcast(buffer, count, dtype, root);
}

void CountingCommunicator::all_to_all(const void* send, void* recv, std::int64_t count_per_rank,
                                      DType dtype) {
  count("all_to_all", count_per_rank * size(), dtype, ring(size()));
  inner_->all_to_all(send, recv, count_per_rank, dtype);
}

void CountingCommunicator::all_to_all_v(const void* send,
                                        const std::vector<std::int64_t>& send_counts, void* recv,
                                        const std::vector<std::int64_t>& recv_counts, DType dtype) {
  std::int64_t all = 0, to_others = 0;
  for (std::size_t j = 0; j < send_counts.size(); ++j) {
    all += send_counts[j];
    if (static_cast<int>(j) != rank()) to_others += send_counts[j];
  }
  // The wire carries exactly what goes to other ranks.
  CommCount& c = (*sink_)[{region_, "all_to_all_v"}];
  const auto size = static_cast<std::int64_t>(dtype_size(dtype));
  c.calls += 1;
  c.payload_bytes += all * size;
  c.wire_bytes += static_cast<double>(to_others * size);
  inner_->all_to_all_v(send, send_counts, recv, recv_counts, dtype);
}

void CountingCommunicator::send(const void* buffer, std::int64_t count, DType dtype, int peer,
                                int tag) {
  this->count("send", count, dtype, 1.0);
  inner_->send(buffer, count, dtype, peer, tag);
}

void CountingCommunicator::recv(void* buffer, std::int64_t count, DType dtype, int peer, int tag) {
  this->count("recv", count, dtype, 0.0);
  inner_->recv(buffer, count, dtype, peer, tag);
}

WorkHandle CountingCommunicator::isend(const void* buffer, std::int64_t count, DType dtype,
                                       int peer, int tag) {
  this->count("send", count, dtype, 1.0);
  return inner_->isend(buffer, count, dtype, peer, tag);
}

WorkHandle CountingCommunicator::irecv(void* buffer, std::int64_t count, DType dtype, int peer,
                                       int tag) {
  this->count("recv", count, dtype, 0.0);
  return inner_->irecv(buffer, count, dtype, peer, tag);
}

WorkHandle CountingCommunicator::all_reduce_async(const void* send, void* recv, std::int64_t count,
                                                  DType dtype, ReduceOp op) {
  this->count("all_reduce", count, dtype, 2 * ring(size()));
  return inner_->all_reduce_async(send, recv, count, dtype, op);
}

WorkHandle CountingCommunicator::reduce_scatter_async(const void* send, void* recv,
                                                      std::int64_t recv_count, DType dtype,
                                                      ReduceOp op) {
  count("reduce_scatter", recv_count * size(), dtype, ring(size()));
  return inner_->reduce_scatter_async(send, recv, recv_count, dtype, op);
}

WorkHandle CountingCommunicator::all_gather_async(const void* send, void* recv,
                                                  std::int64_t send_count, DType dtype) {
  count("all_gather", send_count * size(), dtype, ring(size()));
  return inner_->all_gather_async(send, recv, send_count, dtype);
}

std::unique_ptr<Communicator> CountingCommunicator::split(int color, int key,
                                                          const std::string& name) {
  std::unique_ptr<Communicator> group = inner_->split(color, key, name);
  if (group == nullptr) return group;
  return std::unique_ptr<CountingCommunicator>(new CountingCommunicator(std::move(group), sink_));
}

CountingRegion::CountingRegion(Communicator& comm, std::string region)
    : counting_(dynamic_cast<CountingCommunicator*>(&comm)) {
  if (counting_ == nullptr) return;
  previous_ = counting_->region();
  counting_->set_region(std::move(region));
}

CountingRegion::~CountingRegion() {
  if (counting_ != nullptr) counting_->set_region(previous_);
}

std::string counting_region(const Communicator& comm) {
  const auto* counting = dynamic_cast<const CountingCommunicator*>(&comm);
  return counting != nullptr ? counting->region() : std::string();
}

} // namespace tinyscale::comm
