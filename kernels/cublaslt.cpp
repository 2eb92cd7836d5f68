// cuBLASLt opened on first use: kernels/cublaslt.hpp says why.
#include "kernels/cublaslt.hpp"

#include "core/error.hpp"

#include <dlfcn.h>
#include <string>
#include <vector>

namespace tinyscale::kernels {

namespace {

struct Loaded {
  CublasLt table;
  std::string path;
};

template <typename F> void look_up(void* library, const std::string& path, const char* name, F& f) {
  dlerror();
  void* symbol = dlsym(library, name);
  if (symbol == nullptr) {
    const char* why = dlerror();
    throw Error(detail::concat("cuBLASLt: expected the function ", name, " in ", path,
                               ", found none (", why ? why : "no such symbol",
                               "); fix: point LD_LIBRARY_PATH at the cuBLASLt of CUDA ",
                               CUBLAS_VER_MAJOR, " (the version this build was compiled with)"));
  }
  f = reinterpret_cast<F>(symbol);
}

Loaded open_cublaslt() {
  // The soname of the major version compiled against (found through LD_LIBRARY_PATH, the
  // program's run path and the system's cache), then the file this build found at configure time.
  std::vector<std::string> candidates = {cublaslt_soname()};
#ifdef TINYSCALE_CUBLASLT_LIBRARY
  candidates.emplace_back(TINYSCALE_CUBLASLT_LIBRARY);
#endif
  void* library = nullptr;
  std::string path, tried;
  for (const std::string& candidate : candidates) {
    library = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library != nullptr) {
      path = candidate;
      break;
    }
    const char* why = dlerror();
    tried += detail::concat(tried.empty() ? "" : "; ", candidate, ": ", why ? why : "not found");
  }
  if (library == nullptr)
    throw Error(
        detail::concat("cuBLASLt: a matrix product on the GPU needs the cuBLASLt library of "
                       "CUDA ",
                       CUBLAS_VER_MAJOR, ", which could not be opened (", tried,
                       "); fix: install it with the CUDA toolkit or add its folder to "
                       "LD_LIBRARY_PATH"));
  Loaded loaded;
  loaded.path = path;
  CublasLt& t = loaded.table;
  look_up(library, path, "cublasLtCreate", t.create);
  look_up(library, path, "cublasLtGetStatusName", t.get_status_name);
  look_up(library, path, "cublasLtGetStatusString", t.get_status_string);
  look_up(library, path, "cublasLtMatmulDescCreate", t.matmul_desc_create);
  look_up(library, path, "cublasLtMatmulDescDestroy", t.matmul_desc_destroy);
  look_up(library, path, "cublasLtMatmulDescSetAttribute", t.matmul_desc_set_attribute);
  look_up(library, path, "cublasLtMatrixLayoutCreate", t.matrix_layout_create);
  look_up(library, path, "cublasLtMatrixLayoutDestroy", t.matrix_layout_destroy);
  look_up(library, path, "cublasLtMatrixLayoutSetAttribute", t.matrix_layout_set_attribute);
  look_up(library, path, "cublasLtMatmulPreferenceCreate", t.matmul_preference_create);
  look_up(library, path, "cublasLtMatmulPreferenceDestroy", t.matmul_preference_destroy);
  look_up(library, path, "cublasLtMatmulPreferenceSetAttribute", t.matmul_preference_set_attribute);
  look_up(library, path, "cublasLtMatmulAlgoGetHeuristic", t.matmul_algo_get_heuristic);
  look_up(library, path, "cublasLtMatmul", t.matmul);
  return loaded;
}

const Loaded& loaded() {
  static const Loaded l = open_cublaslt();
  return l;
}

} // namespace

std::string cublaslt_soname() { return "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR); }

const CublasLt& cublaslt() { return loaded().table; }

const char* cublaslt_path() { return loaded().path.c_str(); }

} // namespace tinyscale::kernels
