// Collectives on GPU memory without NCCL (chapter 11): the reduction kernel against the CPU's
// loops bit for bit, and several threads-backend ranks sharing the one GPU, each on its own
// stream, moving and reducing device buffers device to device, with the host-buffer run's bits.
#include "compare.hpp"
#include "raw_collectives.hpp"

#include "backend/backend.hpp"
#include "comm/launch.hpp"

#include <catch2/catch.hpp>

#include <vector>

using namespace tinyscale;
using namespace tinyscale::cuda_testing;

TEST_CASE("reduce_buffers and divide_buffer on the GPU give the CPU loops' bits for every dtype",
          "[cuda][kernels]") {
  for (const DType dtype : {DType::Float32, DType::Float64, DType::BFloat16, DType::Int64}) {
    INFO(dtype_name(dtype));
    const Shape shape{3001}; // more than one block, not a multiple of one
    const Tensor a = Tensor::randn(shape, 41, 0, DType::Float64, 0.0, 100.0).to(dtype);
    const Tensor b = Tensor::randn(shape, 42, 0, DType::Float64, 0.0, 100.0).to(dtype);
    for (const BufferReduce op : {BufferReduce::Add, BufferReduce::Max}) {
      Tensor want = a.clone(), got = a.to(gpu());
      const Tensor incoming = b.to(gpu());
      cpu_backend().reduce_buffers(want.device_ptr(), b.device_ptr(), a.numel(), dtype, op);
      gpu_backend().reduce_buffers(got.device_ptr(), incoming.device_ptr(), a.numel(), dtype, op);
      if (is_floating(dtype)) {
        cpu_backend().divide_buffer(want.device_ptr(), a.numel(), dtype, 3.0);
        gpu_backend().divide_buffer(got.device_ptr(), a.numel(), dtype, 3.0);
      }
      REQUIRE(got.to_vector() == want.to_vector());
    }
  }
  REQUIRE(memory_of(Tensor::zeros(Shape{4}, DType::Float32, gpu()).device_ptr()) == gpu());
  REQUIRE(memory_of(Tensor::zeros(Shape{4}).device_ptr()) == Device::cpu());
}

TEST_CASE("threads-backend ranks sharing the GPU move and reduce device buffers on their own "
          "streams and give the host's bits for every collective, dtype and group size 1 to 4",
          "[cuda][comm]") {
  for (const DType dtype : {DType::Float32, DType::Float64, DType::BFloat16, DType::Int64}) {
    for (int n = 1; n <= 4; ++n) {
      INFO(dtype_name(dtype) << ", N = " << n);
      std::vector<std::vector<std::vector<double>>> host(n), device(n);
      comm::run_threads(n, [&](comm::Communicator& c) {
        host[c.rank()] = comm::testing::raw_collectives(c, dtype, Device::cpu());
      });
      comm::run_threads(n, [&](comm::Communicator& c) {
        device[c.rank()] = comm::testing::raw_collectives(c, dtype, gpu());
      });
      CHECK(device == host);
    }
  }
}
