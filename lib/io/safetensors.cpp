// safetensors reading and writing (chapter 02). The loader trusts nothing: every length, offset
// and shape in the header is checked against the file before a byte of data is read.
#include "io/safetensors.hpp"

#include "core/error.hpp"
#include "io/crc32.hpp"
#include "io/file.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <set>

namespace tinyscale::io {

// Tensor bytes are written as they lie in memory; the format is little-endian.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes little-endian");

namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json; // keeps the keys in the order written

// The safetensors reference implementation refuses headers above 100 MB; so do we.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

const char* format_dtype(DType dtype) {
  switch (dtype) {
  case DType::Float32: return "F32";
  case DType::Float64: return "F64";
  case DType::Int64: return "I64";
  case DType::BFloat16: return "BF16";
  }
  return "?";
}

// One header entry, checked for internal consistency but not yet against its neighbours.
struct Entry {
  std::string name;
  DType dtype = DType::Float32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
};

// `origin` names the reader and the file in every message: "load_safetensors('m.safetensors')".
std::string where(const std::string& origin) { return origin + ": "; }

std::uint64_t read_u64(const ojson& value, const std::string& origin, const std::string& what) {
  TS_CHECK(value.is_number_unsigned() ||
               (value.is_number_integer() && value.get<std::int64_t>() >= 0),
           where(origin), what, ": expected a non-negative integer, found ", value.dump(),
           "; the header is malformed, re-create the file");
  return value.get<std::uint64_t>();
}

Entry parse_entry(const std::string& name, const ojson& value, const std::string& origin) {
  const std::string what = "tensor '" + name + "'";
  TS_CHECK(value.is_object() && value.contains("dtype") && value.contains("shape") &&
               value.contains("data_offsets"),
           where(origin), what, ": expected an object with dtype, shape and data_offsets, found ",
           value.dump(), "; the header is malformed, re-create the file");
  Entry e;
  e.name = name;
  const ojson& dtype = value["dtype"];
  const std::string code = dtype.is_string() ? dtype.get<std::string>() : dtype.dump();
  const auto known = {DType::Float32, DType::Float64, DType::Int64, DType::BFloat16};
  const auto it =
      std::find_if(known.begin(), known.end(), [&](DType d) { return code == format_dtype(d); });
  TS_CHECK(it != known.end(), where(origin), what, ": expected dtype F32, F64, BF16 or I64, found ",
           code, "; convert the file to float32 first (tinyscale reads no other element types)");
  e.dtype = *it;
  TS_CHECK(value["shape"].is_array(), where(origin), what,
           ": expected shape to be an array, found ", value["shape"].dump());
  // `span` is the byte size with every 0 counted as 1: it bounds the strides too, so a shape such
  // as [0, 2^62, 2^62] (no bytes, but strides that overflow int64) is refused as well.
  constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  std::uint64_t bytes = dtype_size(e.dtype);
  std::uint64_t span = bytes;
  for (const ojson& dim : value["shape"]) {
    const std::uint64_t d = read_u64(dim, origin, what + " shape");
    TS_CHECK(std::max<std::uint64_t>(d, 1) <= kMax / span, where(origin), what,
             ": expected a shape whose byte size, zero sizes counted as 1, fits in a signed ",
             "64-bit integer, found ", value["shape"].dump());
    span *= std::max<std::uint64_t>(d, 1);
    bytes *= d;
    e.shape.push_back(static_cast<std::int64_t>(d));
  }
  const ojson& offsets = value["data_offsets"];
  TS_CHECK(offsets.is_array() && offsets.size() == 2, where(origin), what,
           ": expected data_offsets = [begin, end], found ", offsets.dump());
  e.begin = read_u64(offsets[0], origin, what + " data_offsets");
  e.end = read_u64(offsets[1], origin, what + " data_offsets");
  TS_CHECK(e.begin <= e.end, where(origin), what, ": expected data_offsets begin <= end, found [",
           e.begin, ", ", e.end, "]; the header is corrupted, re-create the file");
  TS_CHECK(e.end - e.begin == bytes, where(origin), what, ": expected ", bytes, " bytes (shape ",
           value["shape"].dump(), " x ", dtype_size(e.dtype), " bytes of ", code,
           "), found data_offsets spanning ", e.end - e.begin,
           " bytes; the header is corrupted, re-create the file");
  return e;
}

// Tensors must tile the data region exactly: from 0, no overlaps, no holes, up to its end.
void check_layout(const std::vector<Entry>& entries, std::uint64_t header_bytes,
                  std::uint64_t file_bytes, const std::string& origin) {
  const std::uint64_t data_bytes = file_bytes - 8 - header_bytes;
  std::uint64_t cursor = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : entries) {
    TS_CHECK(e.begin >= cursor, where(origin), "tensor '", e.name, "' (bytes [", e.begin, ", ",
             e.end, ")) overlaps tensor '", previous != nullptr ? previous->name : "",
             "' (ending at ", cursor,
             "); expected non-overlapping tensors, the header is corrupted");
    TS_CHECK(e.begin == cursor, where(origin), "expected tensor '", e.name, "' to start at byte ",
             cursor, " of the data region, found ", e.begin,
             " (a hole; the format forbids unused bytes); the header is corrupted");
    cursor = e.end;
    previous = &e;
  }
  TS_CHECK(cursor <= data_bytes, where(origin), "the file is truncated: expected ",
           8 + header_bytes + cursor, " bytes (8 + ", header_bytes, " header + ", cursor,
           " data), found ", file_bytes, "; the write was interrupted, use an older copy");
  TS_CHECK(cursor == data_bytes, where(origin), "expected the data to end at the end of the file (",
           8 + header_bytes + cursor, " bytes), found ", file_bytes,
           " bytes; trailing bytes mean the file was damaged or appended to");
}

} // namespace

const Tensor& SafetensorsFile::at(const std::string& name) const {
  std::string names;
  for (const auto& [n, t] : tensors) {
    if (n == name) return t;
    names += names.empty() ? n : ", " + n;
  }
  TS_CHECK(false, "SafetensorsFile::at: expected a tensor named '", name,
           "', found only: ", names.empty() ? "(no tensors)" : names);
  return tensors.front().second; // unreachable
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  NamedTensors host;
  std::set<std::string> seen;
  for (const auto& [name, tensor] : tensors) {
    TS_CHECK(!name.empty() && name != "__metadata__", "save_safetensors('", path,
             "'): expected a tensor name other than '' and '__metadata__', found '", name, "'");
    TS_CHECK(seen.insert(name).second, "save_safetensors('", path,
             "'): expected unique tensor names, found '", name, "' twice");
    TS_CHECK(tensor.defined(), "save_safetensors('", path, "'): tensor '", name,
             "' is undefined; expected a tensor with data");
    host.emplace_back(name, tensor.device() == Device::cpu() ? tensor : tensor.to(Device::cpu()));
  }
  ojson header = ojson::object();
  std::map<std::string, std::string> meta = metadata;
  std::uint32_t crc = 0;
  std::uint64_t offset = 0;
  ojson entries = ojson::object();
  for (const auto& [name, tensor] : host) {
    const std::uint64_t bytes =
        static_cast<std::uint64_t>(tensor.numel()) * dtype_size(tensor.dtype());
    crc = crc32_update(crc, tensor.raw_data(), bytes);
    entries[name] = {{"dtype", format_dtype(tensor.dtype())},
                     {"shape", tensor.shape().dims()},
                     {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  meta[kCrc32Key] = crc32_hex(crc);
  header["__metadata__"] = meta;
  header.update(entries);
  std::string text = header.dump();
  // Pad with spaces so the data region starts 8-byte aligned (the format allows trailing spaces).
  text.append((8 - text.size() % 8) % 8, ' ');
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(text.size() >> (8 * i));

  AtomicFile file(path);
  file.write(length, sizeof length);
  file.write(text.data(), text.size());
  for (const auto& [name, tensor] : host)
    file.write(tensor.raw_data(),
               static_cast<std::size_t>(tensor.numel()) * dtype_size(tensor.dtype()));
  file.commit();
}

namespace {

// Reads exactly `bytes` bytes into `dst` (or throws); `what` names them in the error.
using ReadExactly = std::function<void(void* dst, std::uint64_t bytes, const std::string& what)>;

// The loader proper, over any byte source of known length read front to back (a file is read
// piece by piece, so a large checkpoint is never held twice in memory).
SafetensorsFile parse(std::uint64_t file_bytes, const ReadExactly& read_exactly,
                      const std::string& origin) {
  TS_CHECK(file_bytes >= 8, where(origin), "expected at least 8 bytes (the header length), found ",
           file_bytes, "; the file is truncated or not a safetensors file");
  unsigned char length[8];
  read_exactly(length, 8, "header length");
  std::uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | length[i];
  TS_CHECK(header_bytes >= 2 && header_bytes <= kMaxHeaderBytes && header_bytes <= file_bytes - 8,
           where(origin), "expected a header length between 2 and ",
           std::min(kMaxHeaderBytes, file_bytes - 8), " bytes (the file has ", file_bytes,
           "), found ", header_bytes, "; the file is truncated or not a safetensors file");
  std::string text(header_bytes, '\0');
  read_exactly(text.data(), header_bytes, "header");
  ojson header;
  try {
    header = ojson::parse(text);
  } catch (const ojson::exception& e) { // parse_error, and out_of_range for a number like 1e999
    TS_CHECK(false, where(origin), "expected a JSON header, found text that does not parse (",
             e.what(), "); the file is corrupted or not a safetensors file");
  }
  TS_CHECK(header.is_object(), where(origin), "expected the header to be a JSON object, found ",
           header.type_name(), "; not a safetensors file");

  SafetensorsFile result;
  std::vector<Entry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      TS_CHECK(value.is_object(), where(origin), "expected __metadata__ to be an object, found ",
               value.dump());
      for (const auto& [key, v] : value.items()) {
        TS_CHECK(v.is_string(), where(origin), "metadata '", key,
                 "': expected a string value (the format allows no others), found ", v.dump());
        result.metadata[key] = v.get<std::string>();
      }
    } else {
      entries.push_back(parse_entry(name, value, origin));
    }
  }
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  check_layout(entries, header_bytes, file_bytes, origin);

  std::uint32_t crc = 0;
  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(Shape(e.shape), e.dtype, Device::cpu());
    read_exactly(t.raw_data(), e.end - e.begin, "tensor '" + e.name + "'");
    crc = crc32_update(crc, t.raw_data(), e.end - e.begin);
    result.tensors.emplace_back(e.name, t);
  }
  if (auto it = result.metadata.find(kCrc32Key); it != result.metadata.end())
    TS_CHECK(it->second == crc32_hex(crc), where(origin), "the data is corrupted: expected CRC-32 ",
             it->second, " (recorded in the metadata), found ", crc32_hex(crc),
             "; restore the file from a copy or write it again");
  return result;
}

} // namespace

SafetensorsFile load_safetensors(const std::string& path) {
  const std::string origin = "load_safetensors('" + path + "')";
  std::error_code ec;
  TS_CHECK(fs::is_regular_file(path, ec), where(origin), "expected a safetensors file, found ",
           fs::exists(path, ec) ? "something that is not a regular file" : "no file at that path",
           "; check the path");
  const std::uint64_t file_bytes = fs::file_size(path);
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"),
                                                       &std::fclose);
  TS_CHECK(file != nullptr, where(origin), "expected to open the file, found an error (",
           std::strerror(errno), "); check its permissions");
  return parse(
      file_bytes,
      [&](void* dst, std::uint64_t bytes, const std::string& what) {
        TS_CHECK(std::fread(dst, 1, bytes, file.get()) == bytes, where(origin), "expected to read ",
                 bytes, " bytes of ", what, ", found fewer (the file changed while being read?)");
      },
      origin);
}

SafetensorsFile parse_safetensors(std::string_view bytes, const std::string& source) {
  const std::string origin = "parse_safetensors('" + source + "')";
  std::uint64_t cursor = 0;
  return parse(
      bytes.size(),
      [&](void* dst, std::uint64_t n, const std::string& what) {
        TS_CHECK(n <= bytes.size() - cursor, where(origin), "expected ", n, " bytes of ", what,
                 ", found ", bytes.size() - cursor);
        if (n > 0) std::memcpy(dst, bytes.data() + cursor, n);
        cursor += n;
      },
      origin);
}

} // namespace tinyscale::io
