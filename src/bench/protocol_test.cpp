// Request bodies, SSE decoding, URL parsing, config parsing, chart helpers.
#include "bench/protocol.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "base/check.h"
#include "bench/bench.h"
#include "bench/chart.h"

namespace dsv4::bench {
namespace {

using nlohmann::json;

BenchPrompt prompt_with_ids() {
  BenchPrompt p;
  p.text = "the of and";
  p.ids = {5, 6, 7};
  p.prompt_len = 3;
  p.output_len = 8;
  return p;
}

TEST(RequestBody, CompletionsSendsIdsAndIgnoreEos) {
  ClientConfig cfg;
  cfg.model = "m";
  const json b = json::parse(build_request_body(Backend::kOpenAiCompletions, prompt_with_ids(), cfg));
  EXPECT_EQ(b["model"], "m");
  EXPECT_EQ(b["prompt"], json::array({5, 6, 7}));
  EXPECT_EQ(b["max_tokens"], 8);
  EXPECT_EQ(b["min_tokens"], 8);
  EXPECT_EQ(b["ignore_eos"], true);
  EXPECT_EQ(b["stream"], true);
  EXPECT_EQ(b["stream_options"]["include_usage"], true);
}

TEST(RequestBody, ChatSendsTextWithoutIgnoreEos) {
  ClientConfig cfg;
  cfg.ignore_eos = false;
  const json b = json::parse(build_request_body(Backend::kOpenAiChat, prompt_with_ids(), cfg));
  EXPECT_EQ(b["messages"][0]["role"], "user");
  EXPECT_EQ(b["messages"][0]["content"], "the of and");
  EXPECT_FALSE(b.contains("ignore_eos"));
  EXPECT_FALSE(b.contains("min_tokens"));
}

TEST(RequestBody, GenerateSendsInputIds) {
  ClientConfig cfg;
  const json b = json::parse(build_request_body(Backend::kGenerate, prompt_with_ids(), cfg));
  EXPECT_EQ(b["input_ids"], json::array({5, 6, 7}));
  EXPECT_EQ(b["sampling_params"]["max_new_tokens"], 8);
  EXPECT_EQ(b["sampling_params"]["ignore_eos"], true);
  EXPECT_EQ(endpoint_path(Backend::kGenerate), "/generate");
}

TEST(StreamDecoder, ChatEventsSplitAnywhere) {
  const std::string body =
      "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n"
      "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\r\n\r\n"
      ": comment\n"
      "data: {\"choices\":[{\"delta\":{\"content\":\" there\"}}]}\n\n"
      "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":3}}\n\n"
      "data: [DONE]\n\n";
  for (size_t split = 1; split < body.size(); split += 7) {
    StreamDecoder d(Backend::kOpenAiChat);
    const int a = d.feed(std::string_view(body).substr(0, split));
    const int b = d.feed(std::string_view(body).substr(split));
    EXPECT_EQ(a + b, 2);
    EXPECT_EQ(d.content_events(), 2);
    EXPECT_TRUE(d.done());
    EXPECT_EQ(d.usage_prompt_tokens(), 12);
    EXPECT_EQ(d.usage_completion_tokens(), 3);
    EXPECT_FALSE(d.error());
  }
}

TEST(StreamDecoder, CompletionsAndErrors) {
  StreamDecoder d(Backend::kOpenAiCompletions);
  EXPECT_EQ(d.feed("data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"choices\":[{\"text\":\"\"}]}\n\n"),
            1);
  EXPECT_EQ(d.feed("data: {\"error\":{\"message\":\"out of memory\"}}\n\n"), 0);
  ASSERT_TRUE(d.error());
  EXPECT_NE(d.error()->find("out of memory"), std::string::npos);
  EXPECT_FALSE(d.usage_completion_tokens());
}

TEST(StreamDecoder, GenerateCumulative) {
  StreamDecoder d(Backend::kGenerate);
  EXPECT_EQ(d.feed("data: {\"text\":\"a\",\"meta_info\":{\"prompt_tokens\":4,\"completion_tokens\":1}}\n\n"), 1);
  EXPECT_EQ(d.feed("data: {\"text\":\"ab\",\"meta_info\":{\"prompt_tokens\":4,\"completion_tokens\":3}}\n\n"), 1);
  EXPECT_EQ(d.feed("data: [DONE]\n\n"), 0);
  EXPECT_EQ(d.usage_completion_tokens(), 3);
  EXPECT_EQ(d.usage_prompt_tokens(), 4);
}

TEST(BaseUrl, Parts) {
  const BaseUrl a = parse_base_url("http://127.0.0.1:30000");
  EXPECT_EQ(a.host, "127.0.0.1");
  EXPECT_EQ(a.port, "30000");
  EXPECT_EQ(a.prefix, "");
  const BaseUrl b = parse_base_url("http://example.com/api/");
  EXPECT_EQ(b.host, "example.com");
  EXPECT_EQ(b.port, "80");
  EXPECT_EQ(b.prefix, "/api");
  const BaseUrl c = parse_base_url("http://[::1]:8000");
  EXPECT_EQ(c.host, "::1");
  EXPECT_EQ(c.port, "8000");
  EXPECT_THROW(parse_base_url("https://x"), Error);
}

TEST(Config, ConcurrencyListAndValidation) {
  EXPECT_EQ(parse_concurrency_list("1,8,16"), (std::vector<int>{1, 8, 16}));
  EXPECT_EQ(parse_concurrency_list(""), (std::vector<int>{0}));
  EXPECT_THROW(parse_concurrency_list("1,,2"), Error);
  EXPECT_THROW(parse_concurrency_list("4x"), Error);
  EXPECT_THROW(parse_concurrency_list("-1"), Error);
  BenchConfig cfg;
  cfg.max_concurrency = {1};
  EXPECT_NO_THROW(cfg.validate());
  cfg.dataset_name = "sharegpt";
  EXPECT_THROW(cfg.validate(), Error);  // needs --dataset-path
  EXPECT_EQ(parse_backend("openai-chat"), Backend::kOpenAiChat);
  EXPECT_THROW(parse_backend("trt"), Error);
}

TEST(Output, PathsAndChart) {
  EXPECT_EQ(svg_path_for("out/r.json"), "out/r.svg");
  EXPECT_EQ(svg_path_for("r.jsonl"), "r.svg");
  EXPECT_EQ(svg_path_for("r"), "r.svg");
  const std::string f = default_output_file(Backend::kGenerate);
  EXPECT_EQ(f.rfind("dsv4_bench_generate_", 0), 0u);
  EXPECT_EQ(f.substr(f.size() - 5), ".json");
  EXPECT_DOUBLE_EQ(nice_ceiling(0.7), 1);
  EXPECT_DOUBLE_EQ(nice_ceiling(130), 200);
  EXPECT_DOUBLE_EQ(nice_ceiling(4200), 5000);
  EXPECT_DOUBLE_EQ(nice_ceiling(5000), 5000);
  std::vector<SweepPoint> pts(2);
  pts[0].max_concurrency = 1;
  pts[0].metrics.output_throughput = 50;
  pts[1].max_concurrency = 8;
  pts[1].metrics.output_throughput = 300;
  const std::string svg = render_chart_svg(pts, "a < b");
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_NE(svg.find("a &lt; b"), std::string::npos);
  EXPECT_EQ(svg.find("a < b"), std::string::npos);
  EXPECT_EQ(svg.rfind("</svg>\n"), svg.size() - 7);
  EXPECT_NE(svg.find("polyline"), std::string::npos);
}

}  // namespace
}  // namespace dsv4::bench
