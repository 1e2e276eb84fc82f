#include "engine/model/model_profile.h"

#include <utility>

#include "absl/strings/str_format.h"

namespace quill::engine {

void ModelProfile::Reset(int num_layers) { *this = ModelProfile(); layers.assign(num_layers, {}); }

std::string ModelProfile::Summary() const {
  LayerTimes sum;
  for (const LayerTimes& l : layers) {
    sum.norm += l.norm;
    sum.qkv += l.qkv;
    sum.rope_kv += l.rope_kv;
    sum.attention += l.attention;
    sum.o += l.o;
    sum.gate_up += l.gate_up;
    sum.activation += l.activation;
    sum.down += l.down;
  }
  const std::pair<const char*, double> rows[] = {{"embed", embed},
                                                 {"norm+residual", sum.norm},
                                                 {"qkv matmul", sum.qkv},
                                                 {"rope+kv write", sum.rope_kv},
                                                 {"attention", sum.attention},
                                                 {"o matmul", sum.o},
                                                 {"gate_up matmul", sum.gate_up},
                                                 {"activation", sum.activation},
                                                 {"down matmul", sum.down},
                                                 {"lm_head", lm_head}};
  std::string out = absl::StrFormat("forward profile: %ld steps, %ld tokens, %.1f ms total\n",
                                    steps, tokens, total * 1e3);
  double accounted = 0;
  for (const auto& [name, secs] : rows) {
    accounted += secs;
    absl::StrAppendFormat(&out, "  %-16s %10.2f ms %6.1f%%\n", name, secs * 1e3,
                          total > 0 ? 100.0 * secs / total : 0.0);
  }
  absl::StrAppendFormat(&out, "  %-16s %10.2f ms %6.1f%%\n", "other", (total - accounted) * 1e3,
                        total > 0 ? 100.0 * (total - accounted) / total : 0.0);
  return out;
}

}  // namespace quill::engine
