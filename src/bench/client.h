// Asynchronous HTTP client of `dsv4 bench` (Boost.Beast over Asio, C++20 coroutines).
//
// Each request opens its own connection, POSTs a streaming body (protocol.h) and reads the
// response with http::async_read_some into a buffer_body, so every SSE chunk gets its own
// timestamp (TTFT / ITL are real, not batched by the HTTP layer). This is the only translation
// unit of the bench library that includes Beast.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "bench/bench_config.h"
#include "bench/dataset.h"
#include "bench/metrics.h"

namespace dsv4::bench {

struct RunOutput {
  std::vector<RequestResult> results;  // one per prompt, in prompt order
  double duration_s = 0;               // run start to last completion
};

// Sends every prompt and blocks until all have finished or failed. Requests arrive all at t = 0
// (request_rate = inf) or with exponential inter-arrival gaps of mean 1/request_rate drawn from
// seed; at most max_concurrency are in flight (0 = unlimited), later arrivals wait in FIFO order.
// Runs its own io_context on the calling thread; never throws for request-level failures
// (they become RequestResult::error). progress_label != "" draws a progress bar on stderr.
RunOutput run_requests(const ClientConfig& cfg, const std::vector<BenchPrompt>& prompts,
                       int max_concurrency, double request_rate, uint64_t seed,
                       const std::string& progress_label);

// GET <base>/v1/models and return data[0].id, or nullopt when the server does not answer it.
std::optional<std::string> query_model_name(const ClientConfig& cfg);

}  // namespace dsv4::bench
