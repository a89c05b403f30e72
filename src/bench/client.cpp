#include "bench/client.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "bench/protocol.h"

namespace dsv4::bench {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Shared state of one run. Everything runs on one io_context thread, so no locking.
struct Run {
  asio::any_io_executor ex;
  const ClientConfig& cfg;
  const std::vector<BenchPrompt>& prompts;
  BaseUrl url;
  std::string target;
  int max_concurrency;
  std::optional<tcp::endpoint> literal;  // set when the host is an IP address
  std::string progress_label;
  Clock::time_point start{};
  Clock::time_point last_end{};
  std::vector<RequestResult> results{};
  std::deque<size_t> waiting{};  // arrived, waiting for a concurrency slot
  int in_flight = 0;
  int finished = 0, failed = 0;
};

void draw_progress(const Run& run) {
  if (run.progress_label.empty()) return;
  const int total = static_cast<int>(run.prompts.size());
  constexpr int kWidth = 30;
  const int filled = total ? run.finished * kWidth / total : kWidth;
  std::fprintf(stderr, "\r%s [%.*s%*s] %d/%d (failed %d)", run.progress_label.c_str(), filled,
               "==============================", kWidth - filled, "", run.finished, total,
               run.failed);
  if (run.finished == total) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

// One request, start to end; fills run.results[index]. Never throws.
asio::awaitable<void> send_one(Run& run, size_t index) {
  const BenchPrompt& prompt = run.prompts[index];
  RequestResult& r = run.results[index];
  r.prompt_tokens = prompt.prompt_len;
  const auto t0 = Clock::now();
  r.start_s = seconds(t0 - run.start);
  const auto timeout = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(run.cfg.request_timeout_s));
  StreamDecoder decoder(run.cfg.backend);
  Clock::time_point last_chunk{};
  std::string error_body;
  try {
    auto ex = co_await asio::this_coro::executor;
    beast::tcp_stream stream(ex);
    stream.expires_after(timeout);
    if (run.literal) {  // an IP literal: no resolver, so no getaddrinfo inside the timed span
      co_await stream.async_connect(*run.literal, asio::use_awaitable);
    } else {
      tcp::resolver resolver(ex);
      const auto endpoints = co_await resolver.async_resolve(run.url.host, run.url.port,
                                                             asio::use_awaitable);
      co_await stream.async_connect(endpoints, asio::use_awaitable);
    }

    http::request<http::string_body> req{http::verb::post, run.target, 11};
    req.set(http::field::host, run.url.host);
    req.set(http::field::content_type, "application/json");
    req.set(http::field::accept, "text/event-stream");
    req.body() = build_request_body(run.cfg.backend, prompt, run.cfg);
    req.prepare_payload();
    stream.expires_after(timeout);
    co_await http::async_write(stream, req, asio::use_awaitable);

    beast::flat_buffer buffer;
    http::response_parser<http::buffer_body> parser;
    parser.body_limit(boost::none);
    stream.expires_after(timeout);
    co_await http::async_read_header(stream, buffer, parser, asio::use_awaitable);
    const bool ok_status = parser.get().result() == http::status::ok;
    char chunk[16384];
    while (!parser.is_done()) {
      parser.get().body().data = chunk;
      parser.get().body().size = sizeof(chunk);
      stream.expires_after(timeout);
      auto [ec, n] = co_await http::async_read_some(stream, buffer, parser,
                                                     asio::as_tuple(asio::use_awaitable));
      if (ec == http::error::need_buffer) ec = {};
      if (ec) throw beast::system_error(ec);
      const size_t got = sizeof(chunk) - parser.get().body().size;
      if (got == 0) continue;
      const auto now = Clock::now();
      if (!ok_status) {
        error_body.append(chunk, got);
        continue;
      }
      const int events = decoder.feed(std::string_view(chunk, got));
      for (int e = 0; e < events; ++e) {
        if (last_chunk == Clock::time_point{}) {
          r.ttft_s = seconds(now - t0);
        } else {
          r.itls_s.push_back(seconds(now - last_chunk));
        }
        last_chunk = now;
      }
    }
    const auto end = Clock::now();
    r.e2e_s = seconds(end - t0);
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    if (!ok_status) {
      if (error_body.size() > 300) error_body.resize(300);
      r.error = "HTTP " + std::to_string(parser.get().result_int()) + ": " + error_body;
    } else if (decoder.error()) {
      r.error = "server error: " + *decoder.error();
    } else if (decoder.content_events() == 0) {
      r.error = "response carried no output";
    } else {
      r.success = true;
      r.output_tokens = decoder.usage_completion_tokens().value_or(decoder.content_events());
      if (auto p = decoder.usage_prompt_tokens()) r.prompt_tokens = *p;
    }
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  if (!r.success) r.itls_s.clear();
  run.last_end = Clock::now();
}

void start_or_queue(Run& run, size_t index);

void on_finished(Run& run, size_t index) {
  --run.in_flight;
  ++run.finished;
  if (!run.results[index].success) ++run.failed;
  draw_progress(run);
  if (!run.waiting.empty()) {
    const size_t next = run.waiting.front();
    run.waiting.pop_front();
    start_or_queue(run, next);
  }
}

void start_or_queue(Run& run, size_t index) {
  if (run.max_concurrency > 0 && run.in_flight >= run.max_concurrency) {
    run.waiting.push_back(index);
    return;
  }
  ++run.in_flight;
  // The completion handler runs on the same single io_context thread as everything else.
  asio::co_spawn(run.ex, send_one(run, index),
                 [&run, index](std::exception_ptr) { on_finished(run, index); });
}

// Releases the prompts at their arrival offsets (seconds from run.start, ascending).
asio::awaitable<void> dispatch(Run& run, std::vector<double> arrivals) {
  asio::steady_timer timer(run.ex);
  for (size_t i = 0; i < arrivals.size(); ++i) {
    const auto at = run.start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(arrivals[i]));
    if (at > Clock::now()) {
      timer.expires_at(at);
      co_await timer.async_wait(asio::use_awaitable);
    }
    start_or_queue(run, i);
  }
}

}  // namespace

RunOutput run_requests(const ClientConfig& cfg, const std::vector<BenchPrompt>& prompts,
                       int max_concurrency, double request_rate, uint64_t seed,
                       const std::string& progress_label) {
  asio::io_context io;
  Run run{io.get_executor(), cfg,           prompts, parse_base_url(cfg.base_url), "",
          max_concurrency,   std::nullopt, cfg.progress ? progress_label : std::string()};
  beast::error_code ec;
  const auto address = asio::ip::make_address(run.url.host, ec);
  if (!ec) {
    run.literal = tcp::endpoint(address, static_cast<unsigned short>(std::stoi(run.url.port)));
  }
  run.target = run.url.prefix + endpoint_path(cfg.backend);
  run.results.resize(prompts.size());
  std::vector<double> arrivals(prompts.size(), 0.0);
  if (std::isfinite(request_rate)) {
    std::mt19937_64 rng(seed);
    std::exponential_distribution<double> gap(request_rate);
    double t = 0;
    for (auto& a : arrivals) {
      a = t;
      t += gap(rng);
    }
  }
  run.start = Clock::now();
  run.last_end = run.start;
  draw_progress(run);
  asio::co_spawn(io, dispatch(run, std::move(arrivals)), asio::detached);
  io.run();
  RunOutput out;
  out.duration_s = seconds(run.last_end - run.start);
  out.results = std::move(run.results);
  return out;
}

std::optional<std::string> query_model_name(const ClientConfig& cfg) {
  try {
    const BaseUrl url = parse_base_url(cfg.base_url);
    asio::io_context io;
    beast::tcp_stream stream(io);
    stream.expires_after(std::chrono::seconds(10));
    tcp::resolver resolver(io);
    stream.connect(resolver.resolve(url.host, url.port));
    http::request<http::empty_body> req{http::verb::get, url.prefix + "/v1/models", 11};
    req.set(http::field::host, url.host);
    http::write(stream, req);
    beast::flat_buffer buffer;
    http::response<http::string_body> res;
    http::read(stream, buffer, res);
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    if (res.result() != http::status::ok) return std::nullopt;
    const auto doc = nlohmann::json::parse(res.body(), nullptr, /*allow_exceptions=*/false);
    if (doc.is_object() && doc.contains("data") && doc["data"].is_array() && !doc["data"].empty() &&
        doc["data"][0].contains("id") && doc["data"][0]["id"].is_string()) {
      return doc["data"][0]["id"].get<std::string>();
    }
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

}  // namespace dsv4::bench
