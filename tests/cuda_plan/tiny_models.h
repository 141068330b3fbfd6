// The plan tests' models: the tiny synth preset of an architecture in a
// file type (seed 3), written once per test process into its own folder.
#pragma once
#include <fstream>
#include <memory>
#include <string>

#include "model/model.h"
#include "model/synth.h"
#include "test_env.h"

namespace weir::cuda::test_models {

inline std::unique_ptr<Model> tiny(const std::string& arch, FileType ft) {
  const std::string path = test::own_dir() + "/" + arch + "-" + file_type_name(ft) + ".gguf";
  if (!std::ifstream(path)) {
    SynthOptions o;
    o.file_type = ft;
    o.seed = 3;
    o.sync = false;
    write_synth_model(find_synth_preset(arch, "tiny"), o, path);
  }
  return Model::load(path);
}

}  // namespace weir::cuda::test_models
