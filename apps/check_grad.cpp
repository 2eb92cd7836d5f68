// `tinyscale check grad`: every differentiable op's backward against central finite differences
// in float64 on random inputs (lib/autograd/gradcheck_cases.hpp), as a table or as JSON for
// notebooks/01_gradcheck.ipynb. Exits non-zero when any op fails. Easy to misread: the relative
// error divides by |numeric| + atol/rtol, so it passes exactly when it is <= rtol.
#include "autograd/gradcheck_cases.hpp"
#include "commands.hpp"
#include "core/error.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>

namespace tinyscale::app {

namespace check_grad_cmd { // this file's helpers (named: the apps compile as one unity build)

struct CheckGradOptions {
  std::string json_path;
  std::uint64_t seed = 1;
  int draws = 3;
};

nlohmann::json report_json(const autograd::OpGradReport& r) {
  const autograd::GradCheckResult& g = r.result;
  return {{"op", r.op},
          {"draws", r.draws},
          {"elements", g.elements},
          {"max_abs_error", g.max_abs_error},
          {"max_rel_error", g.max_rel_error},
          {"worst_ratio", g.worst_ratio},
          {"eps", g.tol.eps},
          {"atol", g.tol.atol},
          {"rtol", g.tol.rtol},
          {"passed", g.passed()},
          {"worst", g.worst}};
}

void run_check_grad(const CheckGradOptions& opt) {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<autograd::OpGradReport> reports =
      autograd::check_op_gradients(opt.seed, opt.draws);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const autograd::GradTolerance tol;
  std::printf("gradient check: backward against central differences (eps %.0e), float64, seed "
              "%llu, %d random draws per op\n",
              tol.eps, static_cast<unsigned long long>(opt.seed), opt.draws);
  std::printf("rel error = |analytic - numeric| / (|numeric| + atol/rtol), atol %.0e: an op "
              "passes when it is <= rtol\n\n",
              tol.atol);
  std::printf("| op | draws | input elements | max abs error | max rel error | rtol | result |\n"
              "|---|---|---|---|---|---|---|\n");
  std::vector<const autograd::OpGradReport*> failed;
  for (const auto& r : reports) {
    const autograd::GradCheckResult& g = r.result;
    std::printf("| %s | %d | %lld | %.2e | %.2e | %.0e | %s |\n", r.op.c_str(), r.draws,
                static_cast<long long>(g.elements), g.max_abs_error, g.max_rel_error, g.tol.rtol,
                g.passed() ? "pass" : "FAIL");
    if (!g.passed()) failed.push_back(&r);
  }
  std::printf("\n%zu ops checked in %.2f s: %s\n", reports.size(), seconds,
              failed.empty() ? "all pass" : "some FAIL (worst elements below)");
  for (const auto* r : failed) std::printf("FAIL %s: %s\n", r->op.c_str(), r->result.worst.c_str());
  std::fflush(stdout);

  if (!opt.json_path.empty()) {
    nlohmann::json ops = nlohmann::json::array();
    for (const auto& r : reports) ops.push_back(report_json(r));
    nlohmann::json doc = {{"ops", ops},
                          {"summary",
                           {{"ops", reports.size()},
                            {"failed", failed.size()},
                            {"passed", failed.empty()},
                            {"seed", opt.seed},
                            {"draws", opt.draws},
                            {"seconds", seconds}}}};
    std::ofstream out(opt.json_path);
    TS_CHECK(out.good(), "check grad: cannot open --json file ", opt.json_path,
             " for writing; check the directory exists and is writable");
    out << doc.dump(2) << "\n";
  }
  TS_CHECK(failed.empty(), "check grad: expected every op's gradient within tolerance, found ",
           failed.size(), " of ", reports.size(), " failing (", failed.front()->op,
           " first); its backward disagrees with finite differences: see the FAIL lines above");
}

} // namespace check_grad_cmd

void add_check(CLI::App& app) {
  using namespace check_grad_cmd;
  auto* check = app.add_subcommand("check", "Correctness checks that print a table");
  check->require_subcommand(1);
  auto opt = std::make_shared<CheckGradOptions>();
  auto* grad = check->add_subcommand(
      "grad", "Every op's gradient against central finite differences (float64, random inputs)");
  grad->add_option("--json", opt->json_path,
                   "Also write the results to FILE: one object per op and a summary");
  grad->add_option("--seed", opt->seed, "Seed of the random shapes and values")
      ->capture_default_str();
  grad->add_option("--draws", opt->draws, "Random draws (shapes and values) per op")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  grad->callback([opt] { run_check_grad(*opt); });
}

} // namespace tinyscale::app
