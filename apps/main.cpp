// tinyscale: the command-line entry point. Every subcommand prints its own --help.
#include "commands.hpp"
#include "core/error.hpp"

#include <iostream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  CLI::App app{"tinyscale: distributed LLM training from scratch, in C++"};
  app.set_version_flag("--version", tinyscale::app::version_text(),
                       "Print the version, git commit, build type and what the build compiled in");
  app.require_subcommand(1);
  auto* bench = app.add_subcommand("bench", "Benchmarks that print a table (see README)");
  bench->require_subcommand(1);
  tinyscale::app::add_bench_ops(*bench);
  tinyscale::app::add_bench_comm(*bench);
  tinyscale::app::add_bench_peak(*bench);
  tinyscale::app::add_bench_train(*bench);
  tinyscale::app::add_bench_dp(*bench);
  tinyscale::app::add_bench_tp(*bench);
  tinyscale::app::add_bench_cp(*bench);
  tinyscale::app::add_bench_recompute(*bench);
  tinyscale::app::add_bench_ep(*bench);
  tinyscale::app::add_bench_zero(*bench);
  tinyscale::app::add_bench_pp(*bench);
  tinyscale::app::add_bench_plan(*bench);
  tinyscale::app::add_train(app);
  tinyscale::app::add_eval(app);
  tinyscale::app::add_data(app);
  tinyscale::app::add_sample(app);
  tinyscale::app::add_export_hf(app);
  tinyscale::app::add_reshard(app);
  tinyscale::app::add_placement(app);
  tinyscale::app::add_plan(app);
  tinyscale::app::add_trace(app);
  tinyscale::app::add_schedule(app);
  tinyscale::app::add_check(app);
  tinyscale::app::add_info(app);
  // An unknown command is named, with the ones there are (CLI11 would say only that a
  // subcommand is required): `tinyscale foo`, `tinyscale bench foo`.
  const CLI::App* level = &app;
  std::string path = "tinyscale";
  for (int i = 1; i < argc && argv[i][0] != '-' && !level->get_subcommands({}).empty(); ++i) {
    const std::vector<const CLI::App*> commands = level->get_subcommands({});
    const CLI::App* next = nullptr;
    std::string names;
    for (const CLI::App* c : commands) {
      if (c->get_name() == argv[i]) next = c;
      names += (names.empty() ? "" : ", ") + c->get_name();
    }
    if (next == nullptr) {
      std::cerr << "tinyscale: error: " << path << ": expected a command, found '" << argv[i]
                << "', which is none; the commands are " << names << " (" << path
                << " --help says what each does)\n";
      return 1;
    }
    level = next;
    path += " " + next->get_name();
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const tinyscale::Error& e) {
    std::cerr << "tinyscale: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
