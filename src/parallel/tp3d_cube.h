// The p x p x p cube of 3D tensor parallelism (ALGORITHMS.md 2.3) and the
// two activation layouts its layers alternate between.
//
// Axes (mesh order, outermost first): "tp_out", "tp_in", "tp_wt", so the
// rank in the cube is wt + p in + p^2 out (the reference's i = wt, j = in,
// k = out). Every activation [B, .., C] is held as [B/p^2, .., C/p]: its
// features split over one axis and its samples over the other two, the
// weight axis always outer:
//
//   side A (the model's activations between layers; what every LayerNorm,
//           dropout, embedding and head sees):
//           features block coord("tp_out"), samples block
//           coord("tp_wt") p + coord("tp_in") of p^2
//   side B (between the two linears of a pair: attention's q/k/v and the
//           MLP's hidden layer):
//           features block coord("tp_in"), samples block
//           coord("tp_wt") p + coord("tp_out")
//
// A Linear3d maps one side to the other (the reference's swap of the input
// and output groups after each linear): the first linear of a pair A -> B,
// the second B -> A. A CubeSide names, for the side of a layer's input,
// the axis that splits its features and the sample axis it is gathered
// over (which splits the output's features).
#pragma once

#include <string>

#include "comm/mesh.h"
#include "nn/module.h"

namespace ndt {

inline constexpr const char* kTp3dOut = "tp_out";
inline constexpr const char* kTp3dIn = "tp_in";
inline constexpr const char* kTp3dWt = "tp_wt";

struct CubeSide {
  const char* features;  // axis splitting the input's features
  const char* gather;    // the input's second sample axis
};

inline constexpr CubeSide kSideA = {kTp3dOut, kTp3dIn};
inline constexpr CubeSide kSideB = {kTp3dIn, kTp3dOut};

// The side a linear with this input side produces.
inline CubeSide other_side(CubeSide s) {
  return {s.gather, s.features};
}

// The group of the ranks holding the same features of a side's
// activations and the other samples: {"tp_wt", the side's gather axis}
// (ranked wt outer, as the samples are).
ProcessGroup& cube_sample_group(Mesh& mesh, CubeSide side);

// ConfigError naming the layer unless n divides by parts.
int cube_divided(const std::string& name, const char* what, int n, int parts);

// Layout of a tensor of global shape `global` sharded on dimension `dim`
// over `axis` (size parts, my index) in `blocks` equal blocks, then, if
// sub_axis is not null, that block split again over sub_axis.
Layout cube_layout(
    Shape global,
    int dim,
    const Mesh& mesh,
    const char* axis,
    int blocks = 1,
    const char* sub_axis = nullptr);

}  // namespace ndt
