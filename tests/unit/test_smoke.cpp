#include "tinyscale.hpp"
#include <catch2/catch.hpp>
using namespace tinyscale;
TEST_CASE("smoke", "[unit]") {
  Tensor a = Tensor::from_vector({1, 2, 3, 4}, {2, 2}).set_requires_grad();
  Tensor l = sum(matmul(a, a));
  backward(l);
  REQUIRE(a.grad().numel() == 4);
}
