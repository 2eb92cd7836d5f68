// Chapter 12, the kill-during-save loop: a child process saves a checkpoint of realistic size
// (7.5 MiB) and is killed with SIGKILL in the middle, 50 times. Half the kills come at a random
// moment (a seeded delay over the measured length of a save); the other half stop the child at
// each stage of write_checkpoint in turn (its SaveHook raises SIGSTOP there) and kill it stopped,
// so every stage is reached whatever the timing. After each kill the parent loads `latest` and
// every step directory and checks them bit for bit against what was saved; every fifth save
// replaces an existing step, the case where a naive rename leaves no directory at all. The saves
// keep the newest 3 checkpoints (io::Retention), so kills also land while older ones are deleted:
// pruning never removes the one `latest` names and never leaves a half-deleted step directory.
#include "io/checkpoint.hpp"
#include "scratch_dir.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <utility>

using namespace tinyscale;
using namespace tinyscale::io;
namespace fs = std::filesystem;

namespace {

constexpr int kSaves = 50;
constexpr int kStages = 7;            // SaveStage::Started .. Pruned
constexpr std::int64_t kKeep = 3;     // the retention every save of the loop asks for
constexpr unsigned char kBegin = 100; // the child is about to call write_checkpoint

// The tensors every checkpoint of the loop is made from: a model of 1.9 M parameters (7.5 MiB with
// its two AdamW moments), created once; checkpoint (step, generation) adds an offset to every
// element, so each save differs from every other in every tensor.
NamedTensors base_model() {
  return {{"wte.weight", Tensor::randn(Shape{1024, 512}, 1)},
          {"h.0.mlp.c_fc.weight", Tensor::randn(Shape{512, 256}, 2)},
          {"h.0.ln_1.bias", Tensor::randn(Shape{512}, 3)}};
}

Tensor shifted(const Tensor& base, float offset) {
  Tensor t = Tensor::empty(base.shape(), base.dtype());
  const auto* src = static_cast<const float*>(base.raw_data());
  auto* dst = static_cast<float*>(t.raw_data());
  for (std::int64_t i = 0; i < base.numel(); ++i) dst[i] = src[i] + offset;
  return t;
}

Checkpoint make_checkpoint(const NamedTensors& base, std::int64_t step, int generation) {
  Checkpoint c;
  c.step = step;
  c.config_toml = "[train]\nsteps = 1000\n";
  c.state = {{"generation", generation}};
  const float offset = static_cast<float>(step) + 0.001f * static_cast<float>(generation);
  for (const auto& [name, t] : base) {
    c.model.emplace_back(name, shifted(t, offset));
    c.optimizer.emplace_back(name + ".exp_avg", shifted(t, -offset));
    c.optimizer.emplace_back(name + ".exp_avg_sq", shifted(t, 2 * offset));
  }
  c.optimizer.emplace_back("step", Tensor::from_ids({step}, Shape{1}));
  return c;
}

// The checkpoints the loop expects to find, each made once: a step directory is read back after
// every kill until pruning removes it, and making its tensors again each time was most of the
// loop's time under ThreadSanitizer. Only what is still on disk is kept.
class Expected {
public:
  explicit Expected(const NamedTensors& base) : base_(base) {}
  const Checkpoint& at(std::int64_t step, int generation) {
    auto it = made_.find({step, generation});
    if (it == made_.end())
      it = made_.emplace(std::pair{step, generation}, make_checkpoint(base_, step, generation))
               .first;
    return it->second;
  }
  // Forgets every checkpoint but those of `keep` (step -> generation) and `also`.
  void keep_only(const std::map<std::int64_t, int>& keep, std::pair<std::int64_t, int> also) {
    for (auto it = made_.begin(); it != made_.end();) {
      const auto found = keep.find(it->first.first);
      const bool kept =
          (found != keep.end() && found->second == it->first.second) || it->first == also;
      it = kept ? std::next(it) : made_.erase(it);
    }
  }

private:
  const NamedTensors& base_;
  std::map<std::pair<std::int64_t, int>, Checkpoint> made_;
};

// "" when `got` holds exactly the tensors of `want`, byte for byte; else the first difference.
std::string difference(const Checkpoint& got, const Checkpoint& want) {
  if (got.step != want.step) return "step " + std::to_string(got.step);
  for (const auto* pair : {&got.model, &got.optimizer}) {
    const NamedTensors& w = pair == &got.model ? want.model : want.optimizer;
    if (pair->size() != w.size()) return "tensor count";
    for (std::size_t i = 0; i < w.size(); ++i) {
      const Tensor& a = (*pair)[i].second;
      const Tensor& b = w[i].second;
      if ((*pair)[i].first != w[i].first || a.shape() != b.shape() ||
          std::memcmp(a.raw_data(), b.raw_data(), a.numel() * dtype_size(a.dtype())) != 0)
        return "tensor " + w[i].first;
    }
  }
  return "";
}

// Runs in the child: reports `kBegin` and then each stage as one byte on `fd`; stops itself at
// `stop_at` (>= 0) so the parent can kill it exactly there. Never returns.
[[noreturn]] void child_save(const std::string& root, const Checkpoint& c, int fd, int stop_at) {
  try {
    const unsigned char begin = kBegin;
    if (::write(fd, &begin, 1) != 1) ::_exit(3);
    write_checkpoint(root, c, Retention{kKeep, 0}, [&](SaveStage stage) {
      const auto s = static_cast<unsigned char>(stage);
      if (::write(fd, &s, 1) != 1) ::_exit(3);
      if (static_cast<int>(stage) == stop_at) ::raise(SIGSTOP);
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "child: %s\n", e.what());
    ::_exit(2);
  }
  ::_exit(0);
}

struct Saved {
  std::int64_t step = -1;
  int generation = -1;
};

std::vector<std::string> hidden_entries(const fs::path& root) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(root))
    if (entry.path().filename().string()[0] == '.') names.push_back(entry.path().filename());
  return names;
}

} // namespace

TEST_CASE("a writer SIGKILLed at any point of 50 saves leaves the last good checkpoint loadable, "
          "bit for bit",
          "[unit]") {
  const char* env = std::getenv("TINYSCALE_KILL_SEED");
  const unsigned seed = env != nullptr ? static_cast<unsigned>(std::strtoul(env, nullptr, 10)) : 12;
  std::mt19937 rng(seed);
  testing::ScratchDir scratch;
  const NamedTensors base = base_model();
  Expected expected(base);

  // How long one save takes here: the random kills are spread over 1.2 times that.
  const auto t0 = std::chrono::steady_clock::now();
  write_checkpoint(scratch / "calibration", make_checkpoint(base, 0, 0));
  const double save_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  const std::string root = scratch / "run";
  std::map<std::int64_t, int> complete; // step directory -> generation it holds
  write_checkpoint(root, make_checkpoint(base, 0, 0));
  complete[0] = 0;
  Saved latest{0, 0};
  int stages_hit[kStages + 1] = {}; // last stage reported before the kill (kStages: none)
  int finished_before_kill = 0, latest_moved = 0;
  std::printf("kill loop: seed %u (TINYSCALE_KILL_SEED), one save of 7.5 MiB takes %.1f ms\n", seed,
              save_ms);

  for (int i = 1; i <= kSaves; ++i) {
    // Every fifth save replaces the newest step; the others add the next one.
    const std::int64_t step = i % 5 == 0 ? complete.rbegin()->first : complete.rbegin()->first + 1;
    const Checkpoint& pending = expected.at(step, i);
    const bool stop_at_stage = i % 2 == 0;
    const int stop_at = stop_at_stage ? (i / 2) % kStages : -1;
    std::uniform_real_distribution<double> delay_ms(0.0, 1.2 * save_ms);
    const double delay = delay_ms(rng);
    std::string how = "save ";
    how += std::to_string(i) + " of step " + std::to_string(step);
    how += stop_at_stage ? std::string(", killed stopped at ") +
                               save_stage_name(static_cast<SaveStage>(stop_at))
                         : ", killed after " + std::to_string(delay) + " ms";
    INFO(how << " (seed " << seed << ")");

    int pipe_fd[2];
    REQUIRE(::pipe(pipe_fd) == 0);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      ::close(pipe_fd[0]);
      child_save(root, pending, pipe_fd[1], stop_at);
    }
    ::close(pipe_fd[1]);
    // No REQUIRE until the child is reaped: a failed one must not leave a stopped process behind.
    unsigned char byte = 0;
    const bool began = ::read(pipe_fd[0], &byte, 1) == 1 && byte == kBegin;
    int status = 0;
    bool stopped = false, reaped = false;
    if (began && stop_at_stage) {
      const bool changed = ::waitpid(child, &status, WUNTRACED) == child;
      stopped = changed && WIFSTOPPED(status);
      reaped = changed && !stopped; // it ended before reaching its stage
    } else if (began) {
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(delay));
    }
    ::kill(child, SIGKILL); // stopped at its stage, or wherever the delay caught it
    if (!reaped) reaped = ::waitpid(child, &status, 0) == child;
    REQUIRE(began);
    REQUIRE(reaped);
    if (stop_at_stage) REQUIRE(stopped);
    const bool finished = WIFEXITED(status);
    if (finished)
      REQUIRE(WEXITSTATUS(status) == 0);
    else
      REQUIRE((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL));
    int reached = kStages; // none
    while (::read(pipe_fd[0], &byte, 1) == 1) reached = byte;
    ::close(pipe_fd[0]);
    if (stop_at_stage) REQUIRE(reached == stop_at);
    finished_before_kill += finished ? 1 : 0;
    ++stages_hit[reached];

    // `latest` is the previous checkpoint or, once the new one is complete, the new one.
    const Checkpoint now = read_checkpoint(root);
    const Saved found{now.step, now.state.value("generation", -1)};
    const bool moved = found.step == step && found.generation == i;
    if (finished || reached == static_cast<int>(SaveStage::LatestUpdated)) REQUIRE(moved);
    if (reached < static_cast<int>(SaveStage::ManifestWritten) || reached == kStages)
      REQUIRE_FALSE(moved);
    if (!moved) REQUIRE((found.step == latest.step && found.generation == latest.generation));
    CHECK(difference(now, expected.at(found.step, found.generation)).empty());
    if (moved) latest = found, ++latest_moved;

    // Every step directory is complete: the old one, or the new one once it was renamed.
    // Pruning removed some of the older ones (all it should, unless the kill came first).
    std::set<std::int64_t> present;
    for (const auto& entry : fs::directory_iterator(root)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("step_", 0) != 0) continue;
      const Checkpoint c = read_checkpoint(entry.path().string());
      const int generation = c.state.value("generation", -1);
      const bool is_new = c.step == step && generation == i;
      REQUIRE((is_new || (complete.count(c.step) == 1 && complete[c.step] == generation)));
      CHECK(difference(c, expected.at(c.step, generation)).empty());
      complete[c.step] = generation;
      present.insert(c.step);
    }
    for (auto it = complete.begin(); it != complete.end();)
      it = present.count(it->first) == 1 ? std::next(it) : complete.erase(it);
    expected.keep_only(complete, {latest.step, latest.generation});
    REQUIRE(present.count(latest.step) == 1);
    if (finished || reached == static_cast<int>(SaveStage::Pruned))
      REQUIRE(present.size() <= static_cast<std::size_t>(kKeep));
    // Leftovers of killed writers never pile up: each save sweeps those before it.
    CHECK(hidden_entries(root).size() <= 2);
  }
  // The writer's own clean save removes whatever the last kill left.
  write_checkpoint(root, make_checkpoint(base, complete.rbegin()->first + 1, kSaves + 1),
                   Retention{kKeep, 0});
  CHECK(hidden_entries(root).empty());
  CHECK(checkpoint_steps(root).size() == static_cast<std::size_t>(kKeep));

  std::printf("kill loop: %d saves, each SIGKILLed; the last stage each had reported:", kSaves);
  for (int s = 0; s < kStages; ++s)
    std::printf(" %s %d,", save_stage_name(static_cast<SaveStage>(s)), stages_hit[s]);
  std::printf(" none yet %d | %d had finished before the kill | latest moved %d times; every "
              "load was bit for bit the last good checkpoint\n",
              stages_hit[kStages], finished_before_kill, latest_moved);
}
