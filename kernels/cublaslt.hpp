// cuBLASLt, opened at the first matrix product on a GPU (chapter 11). The library is over 500 MB:
// linked like the CUDA runtime, the dynamic loader would map and relocate it at the start of every
// process that links tinyscale, about 0.4 s of CPU time each, a CPU-only run, a `--help` and every
// test included. Opened with dlopen when kernels/gemm.cpp first needs it, it costs nothing to a
// process that never multiplies on a GPU. The functions gemm.cpp calls are looked up by name
// into one table; their types are those of <cublasLt.h>, so a changed signature fails to compile.
#pragma once

#include <cublasLt.h>
#include <string>

namespace tinyscale::kernels {

/// The cuBLASLt functions the GEMM calls, looked up in the opened library.
struct CublasLt {
  decltype(&cublasLtCreate) create = nullptr;
  decltype(&cublasLtGetStatusName) get_status_name = nullptr;
  decltype(&cublasLtGetStatusString) get_status_string = nullptr;
  decltype(&cublasLtMatmulDescCreate) matmul_desc_create = nullptr;
  decltype(&cublasLtMatmulDescDestroy) matmul_desc_destroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) matmul_desc_set_attribute = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) matrix_layout_create = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) matrix_layout_destroy = nullptr;
  decltype(&cublasLtMatrixLayoutSetAttribute) matrix_layout_set_attribute = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) matmul_preference_create = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) matmul_preference_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) matmul_preference_set_attribute = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) matmul_algo_get_heuristic = nullptr;
  decltype(&cublasLtMatmul) matmul = nullptr;
};

/// The process's table: the library is opened and every function looked up on the first call
/// (thread-safe), never closed. Throws a tinyscale::Error naming the library, the paths tried and
/// what dlopen or dlsym said, when it cannot be opened or lacks a function.
const CublasLt& cublaslt();

/// The name dlopen is given first: libcublasLt.so.<major> of the CUDA compiled against (then the
/// file this build found at configure time).
std::string cublaslt_soname();

/// The name under which the library was opened (opens it like cublaslt()).
const char* cublaslt_path();

} // namespace tinyscale::kernels
