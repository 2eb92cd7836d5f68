// cuBLASLt is opened at the first matrix product on a GPU, not when a program starts
// (kernels/cublaslt.hpp): here, where the CUDA backend is compiled, every function the GEMM calls
// is found in the library by name. Needs the library, not a GPU. (ctest's app.startup_libraries
// checks that no program of the build loads the library at start.)
#include <catch2/catch.hpp>

#if TINYSCALE_HAVE_CUDA
#include "kernels/cublaslt.hpp"

#include <string>

TEST_CASE("cuBLASLt is opened by name on first use and has every function the GEMM calls",
          "[unit][cuda_host]") {
  using tinyscale::kernels::cublaslt;
  const tinyscale::kernels::CublasLt& t = cublaslt();
  CHECK(std::string(tinyscale::kernels::cublaslt_path()).find("libcublasLt.so") !=
        std::string::npos);
  CHECK(tinyscale::kernels::cublaslt_soname() ==
        "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR));
  CHECK(t.create != nullptr);
  CHECK(t.matmul_desc_create != nullptr);
  CHECK(t.matmul_desc_destroy != nullptr);
  CHECK(t.matmul_desc_set_attribute != nullptr);
  CHECK(t.matrix_layout_create != nullptr);
  CHECK(t.matrix_layout_destroy != nullptr);
  CHECK(t.matrix_layout_set_attribute != nullptr);
  CHECK(t.matmul_preference_create != nullptr);
  CHECK(t.matmul_preference_destroy != nullptr);
  CHECK(t.matmul_preference_set_attribute != nullptr);
  CHECK(t.matmul_algo_get_heuristic != nullptr);
  CHECK(t.matmul != nullptr);
  // Two calls that need no GPU: the functions found are cuBLASLt's.
  REQUIRE(t.get_status_name != nullptr);
  REQUIRE(t.get_status_string != nullptr);
  CHECK(std::string(t.get_status_name(CUBLAS_STATUS_NOT_INITIALIZED)) ==
        "CUBLAS_STATUS_NOT_INITIALIZED");
  CHECK(&cublaslt() == &t); // opened once
}
#endif
