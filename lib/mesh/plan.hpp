// ParallelPlan: how one training run is laid out over its ranks (chapters 04-10), as one value.
// `tinyscale train` builds it from its flags, the planner (chapter 09) enumerates candidates of
// the same shape, and fourd::check_plan validates it in one place before any rank starts.
// The easy thing to get wrong: dp counts every rank that reads its own rows, the ep ranks among
// them, so the mesh's dp axis is dp / ep and the world is dp x tp x pp x cp.
#pragma once

#include "mesh/layout.hpp"

#include <cstdint>
#include <string>

namespace tinyscale::mesh {

/// The sizes of every axis and the options each parallelism takes. Plain data; fourd::check_plan
/// checks it against a model config.
struct ParallelPlan {
  /// Ranks that each read their own rows of the global batch (ep ranks among them). 0: not
  /// given; the world decides (under mpirun), or one rank without data parallelism.
  int dp = 0;
  int tp = 1; ///< tensor-parallel ranks (chapter 05)
  int pp = 1; ///< pipeline stages, one per rank (chapter 06)
  int ep = 1; ///< expert-parallel ranks, inside dp (chapter 08)
  int cp = 1; ///< context-parallel ranks: each holds part of every sequence
  std::string cp_split = "load-balanced"; ///< with cp: load-balanced or contiguous chunks
  int zero = 0;                   ///< ZeRO stage 0-3 over the data-parallel ranks (chapter 07)
  bool sequence_parallel = false; ///< with tp: LayerNorm and dropout on sequence shards
  std::string schedule = "1f1b";  ///< with pp: gpipe, 1f1b, interleaved or zb-h1
  int chunks = 1;                 ///< with interleaved: model chunks per rank
  std::string pp_blocks;          ///< with pp: "3,2,2,3", "measured" or "" (balanced)
  std::string ep_placement = "contiguous"; ///< with ep: contiguous or round-robin
  std::string ep_capacity = "local";       ///< with ep: local or global
  bool prefetch = true;                    ///< with zero 3: gather the next unit ahead
  std::int64_t bucket_bytes = 256 * 1024;  ///< data parallelism's gradient buckets
  bool overlap = true;                     ///< all-reduce buckets during backward
  std::string order = kDefaultOrder;       ///< rank order of a composed run, innermost first
  std::string topology;                    ///< a topology file: print the placement report
  /// Run on chapter 10's composed path even with one axis or none (`bench plan` measures every
  /// layout the way the composed runs train).
  bool compose = false;

  /// Whether this needs chapter 10's composition: more than one of tp, pp, ep, cp and zero, or
  /// an explicit rank order or topology. The single-axis runs keep their own chapters' trainers.
  bool composed() const;
  /// The data-parallel ranks of a world of `world` ranks: dp when given, else
  /// world / (tp x pp x cp).
  int data_parallel(int world) const;
  /// The ranks to start on the threads backend: dp (or ep, or 1) x tp x pp x cp.
  int threads_world() const;
  /// This plan with dp set from a world of `world` ranks; throws unless
  /// world = dp x tp x pp x cp, naming a world or --dp that fits (with `batch_size` > 0, one
  /// whose data-parallel size also splits the batch into `micro_batches` micro-batches).
  ParallelPlan for_world(int world, std::int64_t batch_size = 0,
                         std::int64_t micro_batches = 1) const;
  /// The mesh of the run: dp / ep x tp x pp x ep x cp in `order`. Every layout builds its
  /// groups from it (tp/, ep/, cp/, pp/ and fourd/ run.cpp), so a rank sits where the plan says.
  MeshLayout mesh_layout() const;
};

} // namespace tinyscale::mesh
