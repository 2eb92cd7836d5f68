// The emulated device (chapter 11): its kernels are the CPU's, bit for bit; host code that touches
// its memory fails with the tensor's name and the line that tried; every copy across the wall is
// counted per call site; one rank trains on it what it trains on the CPU, and a step after warm-up
// moves only the documented batch and scalars (host_traffic.hpp), which a host read of a
// parameter breaks (the negative control).
#include "dp_equivalence.hpp"
#include "host_traffic.hpp"
#include "require_ts_error.hpp"

#include "backend/backend.hpp"
#include "backend/host_traffic.hpp"
#include "tinyscale.hpp"
#include "train/trainer.hpp"

#include <catch2/catch.hpp>

using namespace tinyscale;
using namespace tinyscale::test;
using Catch::Matchers::Contains;

namespace {
io::RunConfig small_dense_run(const std::string& device) {
  io::RunConfig c = dp_run_config(1, 2, 2, false);
  c.train.device = device;
  return c;
}
} // namespace

TEST_CASE("Forward ops on the emulated device compute what they compute on the CPU, bit for bit",
          "[emu]") {
  const Tensor a = Tensor::randn({3, 5, 8}, 1), b = Tensor::randn({8, 6}, 2);
  const Tensor g = Tensor::randn({6}, 3), beta = Tensor::randn({6}, 4);
  auto run = [&](Device d) {
    const Tensor y = layer_norm(gelu(matmul(a.to(d), b.to(d))), g.to(d), beta.to(d));
    return softmax(y).to_vector();
  };
  REQUIRE(run(Device::emu()) == run(Device::cpu()));
  REQUIRE(Tensor::zeros({2}, DType::Float32, Device::emu()).device().str() == "emu:0");
}

TEST_CASE("Host code that reads or writes an emu tensor fails, naming the tensor and the line",
          "[emu]") {
  Tensor w = Tensor::randn({4, 4}, 1, 0, DType::Float32, 0.0, 1.0, 0, Device::emu());
  w.set_name("h.0.mlp.c_fc.weight");
  REQUIRE_THROWS_WITH(w.data<float>(), Contains("'h.0.mlp.c_fc.weight'") && Contains("emu:0") &&
                                           Contains("tests/unit/test_emu_device.cpp:"));
  REQUIRE_THROWS_WITH(w.raw_data(), Contains("host read or write"));
  // The sanctioned ways across: a counted copy, or the device's own kernels.
  REQUIRE(w.to(Device::cpu()).data<float>() != nullptr);
  REQUIRE((w * 2.0).device() == Device::emu());
}

TEST_CASE("Every copy between host and device is counted, per call site, and host-only work is not",
          "[emu]") {
  HostTraffic traffic;
  const Tensor x = Tensor::randn({16, 4}, 1, 0, DType::Float32, 0.0, 1.0, 0, Device::emu());
  {
    CountHostTraffic scope(traffic);
    const Tensor host = x.to(Device::cpu()); // 256 bytes down
    const double s = sum(x).item();          // 4 bytes down
    const Tensor up = Tensor::from_vector({1, 2, 3}, {3}, DType::Float64, Device::emu()); // 24 up
    const Tensor on_host = host.clone() * 3.0; // no transfer
    REQUIRE(std::isfinite(s + on_host.to_vector()[0] + up.numel()));
  }
  (void)x.to(Device::cpu()); // outside the scope: not counted
  CHECK(traffic.copies_to_host() == 2);
  CHECK(traffic.bytes_to_host() == 256 + 4);
  CHECK(traffic.copies_to_device() == 1);
  CHECK(traffic.bytes_to_device() == 24);
  for (const HostTransfers& site : traffic.sites())
    CHECK_THAT(site.where, Contains("tests/unit/test_emu_device.cpp:"));
  traffic.reset();
  CHECK(traffic.sites().empty());
}

TEST_CASE("One rank on the emulated device trains what it trains on the CPU (fp32, rel 1e-5)",
          "[emu][train]") {
  const RunRecord cpu = reference_run(small_dense_run("cpu"), 1);
  const RunRecord emu = reference_run(small_dense_run("emu"), 1);
  INFO("worst relative error " << worst_error(cpu, emu));
  REQUIRE(compare_runs(cpu, emu, 1e-5) == "");
}

TEST_CASE("After warm-up a one-rank step on emu moves only the batch and the documented scalars, "
          "and a parameter read on the host breaks that",
          "[emu][train]") {
  const io::RunConfig config = small_dense_run("emu");
  train::Trainer trainer(config);
  trainer.train_step(); // warm-up
  const StepTrafficShape shape{config.train.micro_batches,
                               config.train.batch_size / config.train.micro_batches,
                               config.train.seq_len,
                               4,
                               false,
                               0,
                               0};
  HostTraffic traffic;
  {
    CountHostTraffic scope(traffic);
    trainer.train_step();
  }
  REQUIRE(step_traffic_problem(traffic, shape) == "");
  REQUIRE(scalars_and_batches_problem(traffic.sites(), shape.rows * shape.seq_len * 8, 8) == "");

  SECTION("negative control: the same step plus one parameter copied to the host") {
    traffic.reset();
    {
      CountHostTraffic scope(traffic);
      trainer.train_step();
      (void)trainer.model().parameters().front().tensor.to_vector();
    }
    const std::string problem = step_traffic_problem(traffic, shape);
    CHECK_THAT(problem, Contains("tests/unit/test_emu_device.cpp:"));
    // the layout-independent rule of the composed runs' test catches it too
    CHECK_THAT(scalars_and_batches_problem(traffic.sites(), shape.rows * shape.seq_len * 8, 8),
               Contains("tests/unit/test_emu_device.cpp:"));
  }
  SECTION("negative control: a parameter read through data<T>() fails at once") {
    const Tensor& p = trainer.model().parameters().front().tensor;
    REQUIRE_THROWS_WITH(p.data<float>(), Contains(trainer.model().parameters().front().name));
  }
}

TEST_CASE("A mixture-of-experts model on the emulated device trains what it trains on the CPU, and "
          "its step adds only the aux and z losses and the router's own transfers",
          "[emu][train][moe]") {
  io::RunConfig config = dp_run_config(1, 2, 2, true);
  const RunRecord cpu = reference_run(config, 1);
  config.train.device = "emu";
  const RunRecord emu = reference_run(config, 1);
  INFO("worst relative error " << worst_error(cpu, emu));
  REQUIRE(compare_runs(cpu, emu, 1e-5) == "");

  train::Trainer trainer(config);
  trainer.train_step(); // warm-up
  HostTraffic traffic;
  {
    CountHostTraffic scope(traffic);
    trainer.train_step();
  }
  const StepTrafficShape shape{config.train.micro_batches,
                               config.train.batch_size / config.train.micro_batches,
                               config.train.seq_len,
                               4,
                               false,
                               0,
                               0,
                               true};
  REQUIRE(step_traffic_problem(traffic, shape) == "");
}

TEST_CASE("Ids out of range on the emulated device fail on the device, as a GPU kernel's trap "
          "would, and cross-entropy refuses logits and targets on two devices",
          "[emu]") {
  const Device emu = Device::emu();
  const Tensor table = Tensor::randn({5, 4}, 1, 0, DType::Float32, 0.0, 1.0, 0, emu);
  REQUIRE_THROWS_WITH(embedding(Tensor::from_ids({1, 6}, {2}, emu), table),
                      Contains("embedding on emu") && Contains("found 6 at position 1"));
  const Tensor logits = Tensor::randn({2, 5}, 2, 0, DType::Float32, 0.0, 1.0, 0, emu);
  REQUIRE_THROWS_WITH(cross_entropy(logits, Tensor::from_ids({7, 0}, {2}, emu)),
                      Contains("cross_entropy on emu") && Contains("found 7 at position 0"));
  REQUIRE_THROWS_WITH(scatter_add_rows(table, Tensor::from_ids({0, 1, 2, 9, 3}, {5}, emu), 5),
                      Contains("embedding_backward on emu") && Contains("found 9"));
  REQUIRE_THROWS_WITH(cross_entropy(logits, Tensor::from_ids({1, 0}, {2})),
                      Contains("one device") && Contains("emu:0 and cpu"));
  // the ignore index is not out of range
  REQUIRE(std::isfinite(cross_entropy(logits, Tensor::from_ids({-100, 3}, {2}, emu)).item()));
}

TEST_CASE("memory_of names emu for every byte of a live emu buffer and the host for any other "
          "address, a freed buffer's included",
          "[emu]") {
  const void* freed = nullptr;
  {
    const Tensor t = Tensor::zeros({16}, DType::Float32, Device::emu());
    const auto* first = static_cast<const std::byte*>(t.device_ptr());
    REQUIRE(memory_of(first) == Device::emu());
    REQUIRE(memory_of(first + 63) == Device::emu()); // the last byte
    REQUIRE(memory_of(first + 64) == Device::cpu()); // one past the end
    freed = first;
  }
  REQUIRE(memory_of(freed) == Device::cpu());
  const std::vector<float> host(4);
  REQUIRE(memory_of(host.data()) == Device::cpu());
  REQUIRE(memory_of(Tensor::zeros({4}).device_ptr()) == Device::cpu());
}

TEST_CASE("emu refuses a host buffer where device memory is expected (copies and the reduction "
          "step of a collective), as a GPU would fault on it",
          "[emu]") {
  Backend& emu = backend_for(Device::emu());
  Tensor device = Tensor::zeros({4}, DType::Float32, Device::emu());
  std::vector<float> host(4, 1.0f);
  REQUIRE_NOTHROW(emu.copy_from_host(device.device_ptr(), host.data(), 16));
  REQUIRE_TS_ERROR(emu.copy(device.device_ptr(), host.data(), 16), Contains("copy on emu") &&
                                                                       Contains("the source") &&
                                                                       Contains("illegal address"));
  REQUIRE_TS_ERROR(emu.copy_to_host(host.data(), host.data(), 16), Contains("copy_to_host"));
  REQUIRE_TS_ERROR(
      emu.reduce_buffers(device.device_ptr(), host.data(), 4, DType::Float32, BufferReduce::Add),
      Contains("reduce_buffers on emu") && Contains("the incoming values"));
  // Past the end of a device buffer is not device memory either.
  REQUIRE_TS_ERROR(emu.divide_buffer(device.device_ptr(), 5, DType::Float32, 2.0),
                   Contains("past the end"));
}

TEST_CASE("reduce_buffers and divide_buffer on emu give the host loops' bits for every dtype",
          "[emu]") {
  for (const DType dtype : {DType::Float32, DType::Float64, DType::BFloat16, DType::Int64}) {
    INFO(dtype_name(dtype));
    const Tensor a = Tensor::randn({37}, 5).to(dtype), b = Tensor::randn({37}, 6).to(dtype);
    for (const BufferReduce op : {BufferReduce::Add, BufferReduce::Max}) {
      Tensor host = a.clone();
      Tensor device = a.to(Device::emu());
      const Tensor incoming = b.to(Device::emu());
      backend_for(Device::cpu()).reduce_buffers(host.device_ptr(), b.device_ptr(), 37, dtype, op);
      backend_for(Device::emu())
          .reduce_buffers(device.device_ptr(), incoming.device_ptr(), 37, dtype, op);
      if (is_floating(dtype)) {
        backend_for(Device::cpu()).divide_buffer(host.device_ptr(), 37, dtype, 3.0);
        backend_for(Device::emu()).divide_buffer(device.device_ptr(), 37, dtype, 3.0);
      }
      REQUIRE(device.to_vector() == host.to_vector());
      REQUIRE(host.to_vector() != a.to_vector()); // the step changed something
    }
  }
}
