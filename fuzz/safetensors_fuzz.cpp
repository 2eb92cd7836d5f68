// Fuzz target: the safetensors loader (io::parse_safetensors, chapters 02 and 12). Each input must
// load or throw tinyscale::Error. A file that loads must hold what its header promised: tensors
// whose bytes add up to the data region, each found again by name.
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "io/safetensors.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  tinyscale::io::SafetensorsFile file;
  try {
    file = tinyscale::io::parse_safetensors(bytes, "fuzz.safetensors");
  } catch (const tinyscale::Error&) {
    return 0; // refused with a message: the expected outcome for most inputs
  }
  std::uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = (header << 8) | data[i];
  std::uint64_t held = 0;
  for (const auto& [name, tensor] : file.tensors) {
    held += static_cast<std::uint64_t>(tensor.numel()) * tinyscale::dtype_size(tensor.dtype());
    if (&file.at(name) != &tensor) {
      std::fprintf(stderr, "safetensors_fuzz: at('%s') found another tensor\n", name.c_str());
      std::abort();
    }
  }
  if (8 + header + held != size) {
    std::fprintf(stderr,
                 "safetensors_fuzz: loaded %llu data bytes from a %zu-byte file whose "
                 "header is %llu bytes\n",
                 static_cast<unsigned long long>(held), size,
                 static_cast<unsigned long long>(header));
    std::abort();
  }
  return 0;
}
