// `tinyscale placement`: a mesh placed on a topology file, rank r on device r (chapter 09).
// Prints the mesh, which coordinates and device each rank gets, and for every group kind the
// links its groups cross and the alpha-beta time of a ring all-reduce there. Nothing runs: this
// is arithmetic on the layout and the topology, so it answers for clusters you do not have.
#include "mesh/placement.hpp"
#include "commands.hpp"

#include <iostream>
#include <memory>

namespace tinyscale::app {

namespace placement_cmd { // this file's helpers (named: the apps compile as one unity build)
struct PlacementOptions {
  std::string topology;
  mesh::MeshShape shape;
  std::string order = mesh::kDefaultOrder;
  double message_mib = 256;
  std::vector<std::string> extra_groups;
  int rank_rows = 16;
};

void run_placement(const PlacementOptions& opt) {
  const mesh::Topology topology = mesh::load_topology(opt.topology);
  const mesh::MeshLayout layout(opt.shape, opt.order);
  std::vector<mesh::AxisSet> kinds = mesh::standard_group_kinds();
  for (const std::string& text : opt.extra_groups) {
    const mesh::AxisSet axes = mesh::parse_axis_set(text);
    bool known = false;
    for (const mesh::AxisSet& k : kinds) known = known || mesh::same_axes(k, axes);
    if (!known) kinds.push_back(axes);
  }
  const auto report = mesh::place(layout, topology, opt.message_mib * 1024 * 1024, kinds);

  std::cout << "topology: " << topology.name << ": " << topology.description << "\n"
            << "  " << topology.describe() << "\n";
  for (const mesh::LinkLevel& level : topology.levels)
    std::cout << "  " << level.name << ": " << level.bandwidth_gb_s << " GB/s per device per "
              << "direction, " << level.latency_us << " us\n";
  std::cout << "mesh: " << layout.describe() << "\n\n";
  if (opt.rank_rows > 0) {
    std::cout << mesh::format_rank_table(layout, topology, opt.rank_rows);
    if (opt.rank_rows < layout.world_size())
      std::cout << "(pass --rank-rows " << layout.world_size() << " to print every rank)\n";
    std::cout << "\n";
  }
  std::cout << mesh::format_placement(report, topology);
}
} // namespace placement_cmd

void add_placement(CLI::App& app) {
  using namespace placement_cmd;
  auto opt = std::make_shared<PlacementOptions>();
  auto* cmd = app.add_subcommand(
      "placement", "Place a dp x tp x pp x ep x cp mesh on a topology file and report, for every "
                   "group, the links it crosses and its ring all-reduce time");
  cmd->footer("Example:\n  tinyscale placement --topology configs/topologies/dgx-h100-ib.toml "
              "--tp 8 --dp 2 --pp 2\nTopology files and their keys: configs/topologies/README.md; "
              "the groups: lib/mesh/mesh.hpp; chapter 09.");
  cmd->add_option("--topology", opt->topology, "Topology TOML file (configs/topologies/*.toml)")
      ->required();
  cmd->add_option("--dp", opt->shape.dp, "Data-parallel size")->capture_default_str();
  cmd->add_option("--tp", opt->shape.tp, "Tensor-parallel size")->capture_default_str();
  cmd->add_option("--pp", opt->shape.pp, "Pipeline-parallel size (stages)")->capture_default_str();
  cmd->add_option("--ep", opt->shape.ep, "Expert-parallel size")->capture_default_str();
  cmd->add_option("--cp", opt->shape.cp,
                  "Context-parallel size: ranks that each hold a part of every sequence "
                  "(`train --cp`, chapter 14)")
      ->capture_default_str();
  cmd->add_option("--order", opt->order,
                  "Rank order, innermost first: the first axis varies fastest across ranks")
      ->capture_default_str();
  cmd->add_option("--message-mib", opt->message_mib,
                  "Bytes per rank of the all-reduce priced in the report, in MiB")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--group", opt->extra_groups,
                  "Also report this axis combination, e.g. \"tp x cp\" (repeatable)");
  cmd->add_option("--rank-rows", opt->rank_rows,
                  "Rows of the rank -> coordinates table (0 leaves the table out)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->callback([opt] { run_placement(*opt); });
}

} // namespace tinyscale::app
