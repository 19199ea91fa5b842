// TensorParallelMode: a tensor-parallel scheme as a unit (DESIGN.md, "A
// parallel mode is a unit"). A mode supplies its mesh axes, its config
// checks, its layer builder (the models are written once against
// nn/builder.h), and the local shape of the activations that flow between
// blocks (what pipeline stages send). make_tensor_parallel_mode() is the
// one switch over parallel.tp_mode; the engine, the CLI, checkpoints and verify
// work from the mesh and each parameter's Layout and never name a mode.
//
// Modes today: none (parallel.tp = 1: the serial layers, axis "tp" of size
// 1), 1d (Megatron column/row split over axis "tp", optionally with
// sequence-split regions, parallel.tp_seq), 2d (SUMMA on a q x q grid,
// axes "tp_row" x "tp_col", parallel.tp = q^2: grid row i takes row-block
// i of every micro-batch's samples, tp2d_builder.h), 2.5d (Tesseract:
// parallel.tp_depth = d such grids on axis "tp_dep", parallel.tp = q^2 d;
// grid k row i takes row-block k q + i, and gradients are summed over
// "tp_dep") and 3d (a p x p x p cube on axes "tp_out" x "tp_in" x "tp_wt",
// parallel.tp = p^3: rank (out, in, wt) takes block wt p + in of p^2 of
// every micro-batch's samples, tp3d_cube.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/mesh.h"
#include "io/config.h"
#include "nn/builder.h"
#include "parallel/sample_rows.h"
#include "tensor/tensor.h"

namespace ndt {

struct MeshAxis {
  std::string name;
  int size = 1;
};

class TensorParallelMode {
 public:
  virtual ~TensorParallelMode() = default;
  // The mode's mesh axes, outermost first.
  virtual std::vector<MeshAxis> axes() const = 0;
  // The builder of this rank's layers; groups come from `mesh`, which
  // must outlive the builder and hold axes().
  virtual std::unique_ptr<Builder> make_builder(Mesh& mesh) const = 0;
  // This rank's block of an activation between blocks whose global shape
  // (one micro-batch) is `global`: [B, T, C], or [B, C] for the MLP.
  virtual Shape local_activation(const Shape& global) const = 0;
  // This rank's samples of a batch of n (a micro-batch, or an evaluation
  // batch): modes that do not split samples take all n. Throws
  // ConfigError when n does not split as the mode needs.
  virtual SampleRows sample_rows(const Mesh& mesh, int64_t n) const;
  // The parts the mode splits the attention heads (and a head's width
  // share of the hidden features) into: 1 (none), tp (1d), q (2d, 2.5d),
  // p (3d). Sequence parallelism's cores run on heads / head_split().
  virtual int head_split() const;
  // The blocks sample_rows cuts a batch into (1 for modes that do not
  // split samples).
  virtual int sample_blocks() const;
  // The mode's mesh axes whose ranks hold different samples: loss and
  // evaluation statistics are summed over them, and over none of the
  // mode's other axes (whose ranks repeat the same statistics).
  virtual std::vector<std::string> sample_axes() const;
  // The mode's mesh axes whose ranks hold the same parameters but other
  // samples: parameter gradients are summed over them together with the
  // data-parallel replicas' (2.5D's depth).
  virtual std::vector<std::string> replica_axes() const;
};

// The configured mode. Throws ConfigError when the config does not fit it
// (e.g. heads not divisible by parallel.tp for 1d), naming the keys.
std::unique_ptr<TensorParallelMode> make_tensor_parallel_mode(
    const Config& config);

// Every mesh axis of the configured layout in parallel.order, the tensor-
// parallel entry expanded into the mode's axes: dp (MPI ranks per replica
// group; 1 with parallel.dp_mode=threads, whose replicas are threads), pp,
// then the mode's, then sp (innermost, sequence_parallel.h). The product
// is the job's rank count.
std::vector<MeshAxis> mesh_axes(const Config& config);

// The mesh of the configured layout (mesh_axes) over `world`; collective
// over world, as Mesh's constructor.
std::unique_ptr<Mesh> make_layout_mesh(
    ProcessGroup& world, const Config& config);

}  // namespace ndt
