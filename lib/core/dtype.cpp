#include "core/dtype.hpp"

#include "core/error.hpp"

namespace tinyscale {

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
  case DType::Float32: return 4;
  case DType::Float64: return 8;
  case DType::Int64: return 8;
  case DType::BFloat16: return 2;
  }
  throw Error("dtype_size: unknown dtype");
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
  case DType::Float32: return "float32";
  case DType::Float64: return "float64";
  case DType::Int64: return "int64";
  case DType::BFloat16: return "bfloat16";
  }
  return "unknown";
}

bool is_floating(DType dtype) {
  return dtype == DType::Float32 || dtype == DType::Float64 || dtype == DType::BFloat16;
}

std::string Device::str() const {
  if (kind == Kind::CPU) return "cpu";
  return (kind == Kind::CUDA ? "cuda:" : "emu:") + std::to_string(index);
}

} // namespace tinyscale
