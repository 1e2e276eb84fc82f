#pragma once

#include <string>
#include <vector>

namespace quill::engine {

// Wall-clock seconds spent in each phase of Model::Forward, summed over the steps run
// while profiling was on (Model::SetProfiling). Used by quill-bench --profile to find
// overheads outside the matmuls.
struct ModelProfile {
  struct LayerTimes {
    double norm = 0;       // the norms (and post-norms), biases and residual adds
    double qkv = 0;        // fused Q|K|V matmul
    double rope_kv = 0;    // q/k split, RoPE, K/V cache writes
    double attention = 0;  // PagedAttention
    double o = 0;          // output projection
    double gate_up = 0;    // fused gate|up (or up) matmul
    double activation = 0;  // SwiGLU / GEGLU / GELU
    double down = 0;
  };
  double embed = 0;
  std::vector<LayerTimes> layers;
  double lm_head = 0;  // final norm + LM head
  double total = 0;
  long steps = 0;
  long tokens = 0;

  void Reset(int num_layers);
  // Per-phase totals over all layers, as a small table (ms and % of total).
  std::string Summary() const;
};

}  // namespace quill::engine
