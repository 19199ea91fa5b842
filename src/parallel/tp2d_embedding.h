// The input layers of 2D tensor parallelism: the token embedding (GPT:
// token + position tables) and the patch embedding (ViT: patch projection,
// class token, position table), each the serial layer (nn/embedding.h)
// built at width C/q on my samples, with every table sharded by the hidden
// dimension over my grid column index j and replicated over the row index
// i (grid and groups as in tp2d_linear.h).
//
// Rank (i, j) receives the samples of row-block i only (the engine hands
// each grid row its block of every micro-batch) and produces their
// activations' column-block j. Its tables' gradients come from its samples
// only, so they are summed over my column (the ranks sharing j, holding
// the other row blocks) by GroupGradSum: the Layout shards them over
// "tp_col" and names no placement on "tp_row" (a replica there), which is
// what norms, checkpoints and verify read.
//
//   B = samples of a micro-batch, T = tokens, C = hidden, V = vocabulary,
//   Tmax = positions, Cin/P = image channels / patch side, Tok = tokens of
//   an image.
//                          token embedding        patch embedding
//   input                  ids int32 [B/q, T]     images [B/q, Cin, H, W]
//   tables (local)         tokens [V, C/q],       patch.weight [C/q, Cin, P,
//                          positions [Tmax, C/q]  P], patch.bias [C/q],
//                                                 cls_token [1, 1, C/q],
//                                                 positions [1, Tok, C/q]
//   sharded dimension      1, 1                   0, 0, 2, 2
//   output                 [B/q, T, C/q]          [B/q, Tok, C/q]
//   forward                no communication
//   backward               one all-reduce over my column of the tables'
//                          gradient contributions; no input gradient
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "base/fault.h"
#include "comm/mesh.h"
#include "nn/embedding.h"
#include "nn/module.h"
#include "nn/seq_split.h"

namespace ndt {

// "<name>.tokens.weight" [V, C], "<name>.positions.weight" [Tmax, C], as
// TokenEmbedding. C divisible by q: ConfigError naming the layer. Under
// sequence parallelism (sp_tokens) the ids are my tokens [B/q, T_local]
// and the layer is SpTokenEmbedding's (sp_embedding.h): global positions.
std::unique_ptr<Module> token_embedding_2d(
    const std::string& name,
    int vocab,
    int max_tokens,
    int C,
    float init_std,
    Mesh& mesh,
    const std::optional<SeqShard>& sp_tokens = std::nullopt);

// Parameters as PatchEmbedding with options.dim the global C (divisible by
// q: ConfigError naming the layer).
std::unique_ptr<Module> patch_embedding_2d(
    const PatchEmbeddingOptions& options, Mesh& mesh);

// The same layers for any layout that splits the activations' features
// over one mesh axis and the samples over a group (3D: "tp_out" and
// {"tp_wt", "tp_in"}); the 2D forms above are these with ("tp_col", my
// row, my column).
struct FeatureSplit {
  const char* axis;        // the mesh axis splitting the features
  ProcessGroup& features;  // its group (rank = my feature block)
  ProcessGroup& samples;   // the ranks holding the other samples
  Fault skip_fault;        // GroupGradSum's injected fault
};
std::unique_ptr<Module> token_embedding_sharded(
    const std::string& name,
    int vocab,
    int max_tokens,
    int C,
    float init_std,
    const FeatureSplit& split,
    const std::optional<SeqShard>& sp_tokens = std::nullopt);
std::unique_ptr<Module> patch_embedding_sharded(
    const PatchEmbeddingOptions& options, const FeatureSplit& split);

}  // namespace ndt
