// Gradient buckets (chapter 04): which parameters' gradients travel together in one all-reduce,
// and when a bucket may leave. Buckets are filled in reverse parameter order, because backward
// produces the last layer's gradients first, so the first bucket is ready early and its
// all-reduce overlaps the rest of backward. The easy thing to get wrong: every rank must issue
// its all-reduces in the same order, whatever order its gradients arrive in, or the collectives
// of different ranks do not match; so buckets launch strictly in index order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tinyscale::dp {

/// A group of parameters whose gradients are all-reduced together, as one flat buffer.
struct Bucket {
  /// Indices into the parameter list, in the order they joined (reverse parameter order).
  std::vector<std::size_t> params;
  /// Bytes of gradient the bucket carries (the sum of its parameters' bytes).
  std::int64_t bytes = 0;
};

/// Groups parameters into buckets, walking them from the last to the first. A bucket is closed as
/// soon as its bytes reach `bucket_bytes`, so every bucket except the last holds at least
/// `bucket_bytes`, and a parameter of `bucket_bytes` or more closes the bucket it joins (PyTorch
/// DDP's bucket_cap_mb works the same way). bucket_bytes = 1 gives one bucket per parameter; a
/// huge value gives one bucket for everything. `param_bytes[i]` is parameter i's gradient size.
std::vector<Bucket> assign_buckets(const std::vector<std::int64_t>& param_bytes,
                                   std::int64_t bucket_bytes);

/// Tracks, during one synchronising backward pass, which parameters' gradients are ready and
/// which buckets may therefore be launched. Buckets launch in index order only: a complete bucket
/// waits for every earlier bucket to launch first.
class BucketQueue {
public:
  /// `buckets` must cover each of the `n_params` parameters exactly once.
  BucketQueue(const std::vector<Bucket>& buckets, std::size_t n_params);

  /// Marks parameter `param` ready and returns the buckets that may launch now, in index order:
  /// the run of complete buckets starting at the next bucket not yet launched. Those buckets
  /// count as launched from then on. A parameter marked twice in one pass is an Error.
  std::vector<std::size_t> mark_ready(std::size_t param);
  /// Returns every bucket not launched yet, in index order, and marks them launched. Used at the
  /// end of backward for buckets holding a parameter that got no gradient in this pass.
  std::vector<std::size_t> launch_rest();
  /// True when `param` was marked ready in this pass.
  bool is_ready(std::size_t param) const { return ready_.at(param); }
  /// Number of buckets launched so far in this pass.
  std::size_t launched() const { return next_; }
  /// Starts a new pass: nothing ready, nothing launched.
  void reset();

private:
  std::vector<std::size_t> bucket_of_; // parameter -> its bucket
  std::vector<std::size_t> size_;      // bucket -> number of parameters
  std::vector<std::size_t> missing_;   // bucket -> parameters not ready yet
  std::vector<bool> ready_;            // parameter -> ready in this pass
  std::size_t next_ = 0;               // the first bucket not launched yet
};

} // namespace tinyscale::dp
