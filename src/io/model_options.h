// The options of each model (nn/model.h) from the config's model section:
// one translation, used to build the model (train/factory.h) and to
// plan it (plan/model_shape.h).
#pragma once

#include "io/config.h"
#include "nn/model.h"

namespace ndt {

MlpOptions mlp_options(const ModelConfig& c);
VitOptions vit_options(const ModelConfig& c);
GptOptions gpt_options(const ModelConfig& c);

}  // namespace ndt
