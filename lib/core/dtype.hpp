// Element types and devices (chapter 01; bfloat16 in chapter 11).
// float32 is the training type; float64 exists so gradient checks can use central differences
// with a tiny step; int64 holds token ids and targets; bfloat16 is the GPU's mixed-precision
// compute type (the CPU only converts to and from it). A Device names where storage lives; the
// backend for that device does the arithmetic, so nothing above the backend depends on it. The
// emulated device (emu, chapter 11) is the CPU's arithmetic behind a wall: its memory is not the
// host's, so code that would read GPU memory from the host fails on a laptop, by name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/bfloat16.hpp"

namespace tinyscale {

/// Element type of a tensor.
enum class DType { Float32, Float64, Int64, BFloat16 };

/// Bytes per element of `dtype`.
std::size_t dtype_size(DType dtype);
/// Human-readable name: "float32", "float64", "int64", "bfloat16".
const char* dtype_name(DType dtype);
/// True for float32, float64 and bfloat16.
bool is_floating(DType dtype);
/// The address `elements` elements of `dtype` past `base` (the communication backends' buffers
/// are untyped).
inline const char* element_at(const void* base, std::int64_t elements, DType dtype) {
  return static_cast<const char*>(base) + elements * static_cast<std::int64_t>(dtype_size(dtype));
}

/// Maps a C++ element type to its DType (float, double, int64_t, bfloat16).
template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::Float32; }
template <> constexpr DType dtype_of<double>() { return DType::Float64; }
template <> constexpr DType dtype_of<std::int64_t>() { return DType::Int64; }
template <> constexpr DType dtype_of<bfloat16>() { return DType::BFloat16; }

/// Where a tensor's storage lives.
struct Device {
  enum class Kind { CPU, CUDA, Emu };
  Kind kind = Kind::CPU;
  int index = 0;

  /// The host CPU.
  static Device cpu() { return {Kind::CPU, 0}; }
  /// CUDA device number `index`.
  static Device cuda(int index = 0) { return {Kind::CUDA, index}; }
  /// The emulated accelerator: CPU kernels, a memory of its own that host code may not touch
  /// except through Tensor::to (counted). The stand-in for a GPU in tests.
  static Device emu() { return {Kind::Emu, 0}; }
  /// True for the host.
  bool is_host() const { return kind == Kind::CPU; }
  /// "cpu", "cuda:N" or "emu:0".
  std::string str() const;
  friend bool operator==(const Device& a, const Device& b) = default;
};

} // namespace tinyscale
