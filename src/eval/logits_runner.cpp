#include "eval/logits_runner.h"

#include <cstring>

#include "base/check.h"
#include "checkpoint/safetensors_writer.h"
#include "numerics/formats.h"

namespace dsv4::eval {

OutputTensors run_golden_cases(GoldenBackend& backend, const GoldenManifest& manifest,
                               bool with_mtp, bool with_streams,
                               const std::function<void(int, int)>& progress) {
  const auto& cfg = backend.config();
  const int64_t vocab = cfg.vocab_size;
  const int64_t stream_size = static_cast<int64_t>(cfg.num_layers()) * cfg.hc_mult * cfg.hidden_size;
  OutputTensors out;
  int done = 0;
  for (const GoldenCase& c : manifest.cases) {
    DSV4_CHECK(!c.prompt_ids.empty(), "case ", c.index, " has an empty prompt");
    const int rows = c.decode_steps + 1;
    const std::string prefix = "case" + std::to_string(c.index) + ".";
    OutputTensor logits{.shape = {rows, vocab}, .values = {}};
    OutputTensor mtp_logits{.shape = {rows, vocab}, .values = {}};
    const int stream_rows = c.x_layers_all ? rows : 1;
    OutputTensor x_layers{.shape = {stream_rows, cfg.num_layers(), cfg.hc_mult, cfg.hidden_size},
                          .values = {}, .bf16 = true};
    backend.reset();
    for (int j = 0; j < rows; ++j) {
      std::vector<int32_t> call_tokens;
      std::vector<int32_t> next_ids;
      if (j == 0) {
        call_tokens = c.prompt_ids;
        next_ids.assign(c.prompt_ids.begin() + 1, c.prompt_ids.end());
        next_ids.push_back(c.generated_ids[0]);
      } else {
        call_tokens = {c.generated_ids[j - 1]};
        next_ids = {c.generated_ids[j]};
      }
      std::vector<float> streams;
      const bool want_streams = with_streams && j < stream_rows;
      const auto row = backend.forward(call_tokens, want_streams ? &streams : nullptr);
      DSV4_CHECK(static_cast<int64_t>(row.size()) == vocab, "backend returned ", row.size(),
                 " logits, expected ", vocab);
      logits.values.insert(logits.values.end(), row.begin(), row.end());
      if (want_streams) {
        DSV4_CHECK(static_cast<int64_t>(streams.size()) == stream_size, "bad stream dump size");
        x_layers.values.insert(x_layers.values.end(), streams.begin(), streams.end());
      }
      if (with_mtp) {
        const auto mrow = backend.mtp(next_ids);
        mtp_logits.values.insert(mtp_logits.values.end(), mrow.begin(), mrow.end());
      }
    }
    out[prefix + "logits"] = std::move(logits);
    if (with_mtp) out[prefix + "mtp_logits"] = std::move(mtp_logits);
    if (with_streams) out[prefix + "x_layers"] = std::move(x_layers);
    if (progress) progress(++done, static_cast<int>(manifest.cases.size()));
  }
  return out;
}

void write_output_tensors(const OutputTensors& tensors, const std::string& path) {
  checkpoint::SafetensorsWriter writer;
  for (const auto& [name, t] : tensors) {
    std::vector<std::byte> bytes;
    if (t.bf16) {
      bytes.resize(t.values.size() * 2);
      for (size_t i = 0; i < t.values.size(); ++i) {
        const uint16_t b = numerics::float_to_bf16_bits(t.values[i]);
        std::memcpy(bytes.data() + 2 * i, &b, 2);
      }
      writer.add(name, checkpoint::DType::kBF16, t.shape, std::move(bytes));
    } else {
      bytes.resize(t.values.size() * 4);
      std::memcpy(bytes.data(), t.values.data(), bytes.size());
      writer.add(name, checkpoint::DType::kF32, t.shape, std::move(bytes));
    }
  }
  writer.write(path);
}

}  // namespace dsv4::eval
