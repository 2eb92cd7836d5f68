// Bucket assignment and the in-order launch queue (chapter 04, exercises 4.1 and 4.2).
#include "dp/bucket.hpp"

#include "core/error.hpp"

namespace tinyscale::dp {

// Hint: walk i = n-1 down to 0; add parameter i to the open bucket; close the bucket (push it to
// the result and start an empty one) as soon as its bytes reach bucket_bytes. A bucket left open
// at the end is the last one, unless it is empty.
std::vector<Bucket> assign_buckets(const std::vector<std::int64_t>& param_bytes,
                                   std::int64_t bucket_bytes) {
  TS_CHECK(bucket_bytes > 0, "assign_buckets: expected bucket_bytes > 0, found ", bucket_bytes,
           "; use 1 for one bucket per parameter");
  for (std::size_t i = 0; i < param_bytes.size(); ++i)
    TS_CHECK(param_bytes[i] >= 0, "assign_buckets: expected parameter sizes >= 0, found ",
             param_bytes[i], " bytes for parameter ", i);
  std::vector<Bucket> buckets;
  // EXERCISE 4.1 begin: assign parameters to buckets in reverse order
  ::tinyscale::exercise_not_done("4.1", "ex04", __FILE__);
  // EXERCISE 4.1 end
  return buckets;
}

BucketQueue::BucketQueue(const std::vector<Bucket>& buckets, std::size_t n_params)
    : bucket_of_(n_params, buckets.size()), size_(buckets.size()), ready_(n_params, false) {
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    size_[b] = buckets[b].params.size();
    for (std::size_t p : buckets[b].params) {
      TS_CHECK(p < n_params, "BucketQueue: bucket ", b, " lists parameter ", p, ", expected an ",
               "index below ", n_params);
      TS_CHECK(bucket_of_[p] == buckets.size(), "BucketQueue: parameter ", p, " is in buckets ",
               bucket_of_[p], " and ", b, ", expected exactly one bucket");
      bucket_of_[p] = b;
    }
  }
  for (std::size_t p = 0; p < n_params; ++p)
    TS_CHECK(bucket_of_[p] < buckets.size(), "BucketQueue: parameter ", p,
             " is in no bucket; expected the buckets to cover every parameter");
  reset();
}

void BucketQueue::reset() {
  missing_ = size_;
  ready_.assign(ready_.size(), false);
  next_ = 0;
}

// Hint: note the parameter as ready and count it off its bucket; then, while the next bucket not
// yet launched has nothing missing, it may go: add it to the result and move next_ on. A bucket
// that completes out of order is picked up later, when the buckets before it are done.
std::vector<std::size_t> BucketQueue::mark_ready(std::size_t param) {
  TS_CHECK(param < ready_.size(), "BucketQueue::mark_ready: expected a parameter index below ",
           ready_.size(), ", found ", param);
  TS_CHECK(!ready_[param], "BucketQueue::mark_ready: parameter ", param,
           " is ready twice in one pass; expected one synchronising backward per step (run the "
           "other micro-batches inside no_sync(), and finish the sync before the next backward)");
  std::vector<std::size_t> launch;
  // EXERCISE 4.2 begin: mark a gradient ready and launch complete buckets in order
  ::tinyscale::exercise_not_done("4.2", "ex04", __FILE__);
  // EXERCISE 4.2 end
  return launch;
}

std::vector<std::size_t> BucketQueue::launch_rest() {
  std::vector<std::size_t> launch;
  while (next_ < missing_.size()) launch.push_back(next_++);
  return launch;
}

} // namespace tinyscale::dp
