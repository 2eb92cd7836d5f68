// Per-file and per-tensor checksums of a checkpoint (chapter 12). A file is read once, front to
// back, and each byte goes to the CRC-32 of the range it lies in: the header or one tensor.
#include "io/checkpoint_manifest.hpp"

#include "core/error.hpp"
#include "io/crc32.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <vector>

namespace tinyscale::io::manifest {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Bytes [begin, end) of a file.
struct Range {
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
};

std::uint64_t tensor_bytes(const Tensor& t) {
  return static_cast<std::uint64_t>(t.numel()) * dtype_size(t.dtype());
}

std::string where(const std::string& path) { return "read_checkpoint: '" + path + "'"; }

// The CRC-32 of each of `ranges` (sorted, disjoint) in one pass over the file, reading it in
// chunks of 1 MiB; a range may start and end anywhere, so one chunk can finish one range, hold
// several and start another.
std::vector<std::uint32_t> crc32_ranges(const std::string& path, const std::vector<Range>& ranges) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"),
                                                       &std::fclose);
  TS_CHECK(file != nullptr, where(path), ": expected a readable file, found an error (",
           std::strerror(errno), "); check its permissions");
  std::vector<std::uint32_t> crcs(ranges.size(), 0);
  std::vector<unsigned char> chunk(1 << 20);
  // EXERCISE 12.1 begin: the CRC-32 of every byte range, reading the file once in chunks
  ::tinyscale::exercise_not_done("12.1", "ex12", __FILE__);
  // EXERCISE 12.1 end
  TS_CHECK(std::ferror(file.get()) == 0, where(path), ": expected to read the whole file, found ",
           "an error (", std::strerror(errno), "); check the disk");
  return crcs;
}

// A safetensors file's 8-byte length and JSON header, or nullopt when the file is too short for
// the length it declares (at most 100 MB, as load_safetensors allows).
std::optional<std::string> read_header(const std::string& path) {
  std::error_code ec;
  const std::uint64_t file_bytes = fs::file_size(path, ec);
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"),
                                                       &std::fclose);
  unsigned char length[8];
  if (ec || file == nullptr || std::fread(length, 1, 8, file.get()) != 8) return std::nullopt;
  std::uint64_t bytes = 0;
  for (int i = 7; i >= 0; --i) bytes = (bytes << 8) | length[i];
  if (bytes > 100'000'000 || bytes > file_bytes - 8) return std::nullopt;
  std::string header(reinterpret_cast<const char*>(length), 8);
  header.resize(8 + bytes);
  if (std::fread(header.data() + 8, 1, bytes, file.get()) != bytes) return std::nullopt;
  return header;
}

// The tensor names in a safetensors file's header, or nullopt when it has no readable header:
// enough to tell a file from another checkpoint or model from a damaged one.
std::optional<std::set<std::string>> header_names(const std::string& path) {
  const std::optional<std::string> header = read_header(path);
  if (!header) return std::nullopt;
  const json parsed = json::parse(header->substr(8), nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_object()) return std::nullopt;
  std::set<std::string> names;
  for (const auto& [name, value] : parsed.items())
    if (name != "__metadata__") names.insert(name);
  return names;
}

// Up to three names of `a` that `b` lacks, quoted: "'x', 'y', 'z' and 4 more" ("" for none).
std::string missing_from(const std::set<std::string>& a, const std::set<std::string>& b) {
  std::string out;
  int listed = 0, more = 0;
  for (const std::string& name : a) {
    if (b.count(name) != 0) continue;
    if (listed < 3) {
      out += listed++ == 0 ? "'" : ", '";
      out += name;
      out += "'";
    } else {
      ++more;
    }
  }
  if (more > 0) out += detail::concat(" and ", more, " more");
  return out;
}

// A record's tensor carries its dtype and shape (written since version 2; optional to read).
bool has_type(const json& t) { return t.contains("dtype") && t.contains("shape"); }

// A record's tensors, checked for the fields verify_file reads.
const json& record_tensors(const json& record, const std::string& path,
                           const std::string& manifest_path) {
  const bool ok =
      record.is_object() && record.value("bytes", json()).is_number_unsigned() &&
      record.value("header", json()).is_object() &&
      record["header"].value("bytes", json()).is_number_unsigned() &&
      record["header"].value("crc32", json()).is_string() &&
      record.value("tensors", json()).is_array() &&
      std::all_of(record["tensors"].begin(), record["tensors"].end(), [](const json& t) {
        return t.is_object() && t.value("name", json()).is_string() &&
               t.value("offset", json()).is_number_unsigned() &&
               t.value("bytes", json()).is_number_unsigned() &&
               t.value("crc32", json()).is_string() &&
               (!has_type(t) || (t["dtype"].is_string() && t["shape"].is_array()));
      });
  TS_CHECK(ok, "read_checkpoint: expected bytes, header {bytes, crc32} and tensors [{name, ",
           "offset, bytes, crc32}] for '", path, "' in '", manifest_path, "', found ",
           record.dump().substr(0, 200), "; the manifest is damaged, use an older checkpoint");
  return record["tensors"];
}

// Refuses a file whose header lists other tensors than the record: a file of another checkpoint
// or model put in this one's place. Does nothing when the names agree or there is no header.
void refuse_foreign(const std::string& path, const json& tensors,
                    const std::string& manifest_path) {
  std::set<std::string> expected;
  for (const json& t : tensors) expected.insert(t["name"].get<std::string>());
  const std::optional<std::set<std::string>> found = header_names(path);
  if (!found || *found == expected) return;
  const std::string lacking = missing_from(expected, *found),
                    extra = missing_from(*found, expected);
  throw Error(detail::concat(
      where(path), " is not the file its manifest describes: expected the ", expected.size(),
      " tensors listed in '", manifest_path, "', found ", found->size(),
      lacking.empty() ? "" : ", without ", lacking, extra.empty() ? "" : ", with ", extra,
      extra.empty() ? "" : " that the manifest does not list",
      "; it belongs to another checkpoint or model: restore this checkpoint's own file or use an "
      "older checkpoint"));
}

std::string tensor_label(const json& t) {
  std::string label = "tensor '";
  label += t["name"].get<std::string>();
  label += "' (";
  if (has_type(t)) label += t["dtype"].get<std::string>() + " " + t["shape"].dump() + ", ";
  label += detail::concat("file bytes [", t["offset"].get<std::uint64_t>(), ", ",
                          t["offset"].get<std::uint64_t>() + t["bytes"].get<std::uint64_t>(), "))");
  return label;
}

// The file is `found` bytes long instead of the record's: name the first tensor cut short.
[[noreturn]] void refuse_wrong_size(const std::string& path, const json& record,
                                    std::uint64_t found, const std::string& manifest_path) {
  const auto expected = record["bytes"].get<std::uint64_t>();
  std::string what = detail::concat(where(path), " has the wrong size: expected ", expected,
                                    " bytes (", manifest_path, "), found ", found);
  if (found > expected)
    throw Error(detail::concat(what, " (", found - expected, " bytes too many: appended to or ",
                               "overwritten by another file); use an older checkpoint"));
  const json& tensors = record["tensors"];
  const auto header = record["header"]["bytes"].get<std::uint64_t>();
  std::size_t cut = 0;
  while (cut < tensors.size() &&
         tensors[cut]["offset"].get<std::uint64_t>() + tensors[cut]["bytes"].get<std::uint64_t>() <=
             found)
    ++cut;
  std::string lost =
      found < header ? std::string("the file ends inside its safetensors header, so every tensor "
                                   "is missing")
      : cut < tensors.size()
          ? detail::concat("the file ends inside ", tensor_label(tensors[cut]), ", so it and the ",
                           tensors.size() - cut - 1, " tensors after it are incomplete")
          : std::string("no tensor is cut short");
  throw Error(detail::concat(what, " (truncated): ", lost,
                             ". The write was interrupted or the copy is incomplete: use an older "
                             "checkpoint"));
}

} // namespace

json describe_file(const std::string& path, const NamedTensors& tensors) {
  const std::uint64_t file_bytes = fs::file_size(path);
  std::uint64_t data_bytes = 0;
  for (const auto& [name, t] : tensors) data_bytes += tensor_bytes(t);
  // save_safetensors writes the 8-byte length, the header, then each tensor in the order given.
  const std::uint64_t header = file_bytes - data_bytes;
  const std::optional<std::string> header_text = read_header(path);
  TS_CHECK(data_bytes <= file_bytes && header_text && header_text->size() == header,
           "write_checkpoint: expected '", path, "' to hold a header and ", data_bytes,
           " bytes of tensors, found ", file_bytes,
           " bytes in all; it changed while being written (two writers?)");
  json list = json::array();
  std::uint64_t offset = header;
  for (const auto& [name, t] : tensors) {
    const Tensor host = t.device() == Device::cpu() ? t : t.to(Device::cpu());
    const std::uint64_t bytes = tensor_bytes(host);
    list.push_back({{"name", name},
                    {"dtype", dtype_name(host.dtype())},
                    {"shape", host.shape().dims()},
                    {"offset", offset},
                    {"bytes", bytes},
                    {"crc32", crc32_hex(crc32(host.raw_data(), bytes))}});
    offset += bytes;
  }
  return {{"bytes", file_bytes},
          {"header", {{"bytes", header}, {"crc32", crc32_hex(crc32(header_text->data(), header))}}},
          {"tensors", list}};
}

void verify_file(const std::string& path, const json& record, const std::string& manifest_path) {
  const json& tensors = record_tensors(record, path, manifest_path);
  std::error_code ec;
  TS_CHECK(fs::is_regular_file(path, ec), where(path), ": expected the file, found ",
           fs::exists(path, ec) ? "something else" : "no such file",
           "; the checkpoint is incomplete, use an older one");
  const std::uint64_t found_bytes = fs::file_size(path);
  if (found_bytes != record["bytes"].get<std::uint64_t>()) {
    if (found_bytes >= record["header"]["bytes"].get<std::uint64_t>())
      refuse_foreign(path, tensors, manifest_path);
    refuse_wrong_size(path, record, found_bytes, manifest_path);
  }
  // The header first, then every tensor, in file order: the first range that differs is blamed.
  std::vector<Range> ranges = {Range{0, record["header"]["bytes"].get<std::uint64_t>()}};
  for (const json& t : tensors) {
    const auto offset = t["offset"].get<std::uint64_t>();
    TS_CHECK(offset == ranges.back().end, "read_checkpoint: expected the tensors of '", path,
             "' in '", manifest_path, "' to follow each other from byte ", ranges.back().end,
             ", found ", tensor_label(t), "; the manifest is damaged, use an older checkpoint");
    ranges.push_back(Range{offset, offset + t["bytes"].get<std::uint64_t>()});
  }
  TS_CHECK(ranges.back().end == found_bytes, "read_checkpoint: expected the tensors of '", path,
           "' in '", manifest_path, "' to end at the end of the file (byte ", found_bytes,
           "), found them ending at byte ", ranges.back().end,
           "; the manifest is damaged, use an older checkpoint");
  const std::vector<std::uint32_t> found = crc32_ranges(path, ranges);
  const std::string header_crc = record["header"]["crc32"].get<std::string>();
  if (crc32_hex(found[0]) != header_crc) {
    refuse_foreign(path, tensors, manifest_path);
    throw Error(detail::concat(
        where(path), " is corrupted in its safetensors header (file bytes [0, ", ranges[0].end,
        ")): expected CRC-32 ", header_crc, " (", manifest_path, "), found ", crc32_hex(found[0]),
        "; restore the file from a copy or use an older checkpoint"));
  }
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::string expected = tensors[i]["crc32"].get<std::string>();
    TS_CHECK(crc32_hex(found[i + 1]) == expected, where(path), " is corrupted in ",
             tensor_label(tensors[i]), ": expected CRC-32 ", expected, " (", manifest_path,
             "), found ", crc32_hex(found[i + 1]),
             "; restore the file from a copy or use an older checkpoint");
  }
}

void check_loaded(const std::string& path, const NamedTensors& loaded, const json& record,
                  const std::string& manifest_path) {
  const json& tensors = record["tensors"];
  bool same = loaded.size() == tensors.size();
  for (std::size_t i = 0; same && i < loaded.size(); ++i) {
    const json& t = tensors[i];
    same = loaded[i].first == t["name"].get<std::string>() &&
           (!has_type(t) || (t["dtype"] == dtype_name(loaded[i].second.dtype()) &&
                             t["shape"] == json(loaded[i].second.shape().dims())));
  }
  if (same) return;
  refuse_foreign(path, tensors, manifest_path);
  throw Error(detail::concat(where(path), " holds tensors other than its manifest lists: expected ",
                             tensors.size(), " tensors as listed in '", manifest_path, "', found ",
                             loaded.size(),
                             " with other names, dtypes or shapes; use an older checkpoint"));
}

void verify_file_v1(const std::string& path, const json& record, const std::string& manifest_path) {
  TS_CHECK(record.is_object() && record.value("bytes", json()).is_number_unsigned() &&
               record.value("crc32", json()).is_string(),
           "read_checkpoint: expected bytes and crc32 for '", path, "' in '", manifest_path,
           "', found ", record.dump(), "; the manifest is damaged, use an older checkpoint");
  std::error_code ec;
  TS_CHECK(fs::is_regular_file(path, ec), where(path), ": expected the file, found no such ",
           "file; the checkpoint is incomplete, use an older one");
  const auto expected_bytes = record["bytes"].get<std::uint64_t>();
  const std::uint64_t found_bytes = fs::file_size(path);
  TS_CHECK(found_bytes == expected_bytes, where(path), " has the wrong size: expected ",
           expected_bytes, " bytes (", manifest_path, "), found ", found_bytes,
           found_bytes < expected_bytes ? " (truncated)" : "", "; use an older checkpoint");
  const auto expected_crc = record["crc32"].get<std::string>();
  const std::string found_crc = crc32_hex(crc32_file(path));
  TS_CHECK(found_crc == expected_crc, where(path), " is corrupted: expected CRC-32 ", expected_crc,
           " of the whole file (", manifest_path, "), found ", found_crc,
           "; use an older checkpoint (version 1 manifests have no per-tensor checksums)");
}

} // namespace tinyscale::io::manifest
