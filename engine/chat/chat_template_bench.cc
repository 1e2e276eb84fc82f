// Render time per chat template: parses each template of ../shared/chat_templates and
// renders the six reference conversations repeatedly. Not a test.
//
//   build/engine/chat/chat_template_bench [--iterations N] [SHARED_DIR]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/chat/chat_template.h"
#include "nlohmann/json.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

double Micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

}  // namespace

int main(int argc, char** argv) {
  using quill::engine::chat::ChatRenderOptions;
  using quill::engine::chat::ChatTemplate;
  int iterations = 200;
  std::string shared = QUILL_DEFAULT_SHARED_DIR;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--iterations") == 0 && i + 1 < argc) {
      iterations = std::max(1, std::atoi(argv[++i]));
    } else {
      shared = argv[i];
    }
  }
  const std::string dir = shared + "/chat_templates/";
  const std::string renders = ReadFile(dir + "renders.json");
  if (renders.empty()) {
    std::fprintf(stderr, "chat_template_bench: %srenders.json not found\n", dir.c_str());
    return 1;
  }
  const Json reference = Json::parse(renders);
  ChatRenderOptions options;
  options.date = absl::CivilDay(2026, 1, 15);

  std::printf("%-52s %8s %10s %10s %8s\n", "template", "bytes", "parse_us", "render_us", "renders");
  std::vector<double> all;
  for (const Json& entry : reference["templates"]) {
    const std::string source = ReadFile(dir + entry["file"].get<std::string>());
    const Clock::time_point p0 = Clock::now();
    absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::Parse(source);
    const double parse_us = Micros(Clock::now() - p0);
    if (!tmpl.ok()) {
      std::printf("%-52s parse failed: %s\n", entry["name"].get<std::string>().c_str(),
                  std::string(tmpl.status().message()).c_str());
      continue;
    }
    // Median over iterations of the mean render time across the six conversations.
    std::vector<double> samples;
    int ok = 0;
    for (int it = 0; it < iterations; ++it) {
      const Clock::time_point t0 = Clock::now();
      int n = 0;
      for (const auto& [name, conv] : reference["conversations"].items()) {
        options.add_generation_prompt = conv["add_generation_prompt"].get<bool>();
        absl::StatusOr<quill::engine::chat::RenderedChat> r =
            tmpl->Render(conv["messages"], options);
        if (it == 0 && r.ok()) ++ok;
        ++n;
      }
      samples.push_back(Micros(Clock::now() - t0) / n);
    }
    std::sort(samples.begin(), samples.end());
    const double median = samples[samples.size() / 2];
    all.push_back(median);
    std::printf("%-52s %8zu %10.1f %10.1f %6d/6\n", entry["name"].get<std::string>().c_str(),
                source.size(), parse_us, median, ok);
  }
  std::sort(all.begin(), all.end());
  if (!all.empty()) {
    std::printf(
        "render time per template (median of %d): min %.1f us, median %.1f us, max %.1f us\n",
        iterations, all.front(), all[all.size() / 2], all.back());
  }
  return 0;
}
