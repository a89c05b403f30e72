// Engine: the one thread that owns scheduling, the cache manager and the model runner.
//
// HTTP threads call submit()/abort() (thread-safe, lock-free inbox); results flow back
// through each request's OutputSink, called on the engine thread. No JSON in here: the
// server's protocol module converts wire formats to GenerateInput and back.
//
// Step loop: drain inbox (new requests, aborts) -> Scheduler::schedule() -> runner forward
// -> sample -> detokenize/stop-match -> emit events -> free finished sequences -> log line.
// Aborted or disconnected requests are freed at the start of the next step.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/cache_manager.h"
#include "engine/metrics.h"
#include "engine/model_runner.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/text_stream.h"

namespace dsv4::engine {

struct EngineConfig {
  int64_t max_running_requests = 64;
  int64_t max_queued_requests = 1024;    // beyond: submit() answers kQueueFull (HTTP 503)
  int64_t chunked_prefill_size = 2048;   // prompt tokens per prefill step
  int64_t cpu_cache_bytes = int64_t{2} << 30;  // CPU backend cache budget
  double mem_fraction_static = 0.88;     // GPU backend: passed to the runner factory
  int64_t max_context = 0;               // 0 = the runner's max_context()
  int64_t sample_vocab_size = 0;         // tokenizer's id range; 0 = runner vocab
  std::vector<int32_t> eos_ids;          // finish with "stop" unless ignore_eos
  DetokenizerFactory detokenizer;        // null: events carry tokens only, no stop strings
  int64_t decode_log_interval = 40;      // decode steps between "Decode batch" lines (0 = off)
  bool log_prefill = true;
  bool cuda_graph = false;               // reported in the decode log line
  void validate() const;                 // throws dsv4::Error naming the bad field
};

struct GenerateInput {
  std::vector<int32_t> prompt;  // 1 <= size < max_context
  SamplingParams params;
  OutputSink sink;              // required
  Clock::time_point arrival = Clock::now();
};

enum class SubmitStatus { kOk, kQueueFull, kShuttingDown, kInvalid };

struct SubmitResult {
  SubmitStatus status = SubmitStatus::kOk;
  SequenceId id = -1;
  std::string message;  // for non-kOk
};

class Engine {
 public:
  Engine(EngineConfig config, std::unique_ptr<ModelRunner> runner);
  ~Engine();  // stop()
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  void start();  // launches the engine thread

  // Thread-safe. On kOk the sink will receive events ending with one finished event.
  SubmitResult submit(GenerateInput input);
  // Thread-safe; unknown or finished ids are ignored. The request finishes with kAbort, also
  // when this call's abort reaches the engine thread before the submit that issued the id.
  void abort(SequenceId id);

  // Thread-safe. After begin_drain() submit() answers kShuttingDown.
  void begin_drain() { draining_.store(true); }
  bool draining() const { return draining_.load(); }
  // Waits until no request is in flight; false on timeout.
  bool wait_idle(std::chrono::milliseconds timeout) const;
  // Aborts what is left and joins the engine thread. Idempotent.
  void stop();

  int64_t num_inflight() const { return inflight_.load(); }
  int64_t max_context() const { return max_context_; }
  int64_t vocab_size() const { return vocab_size_; }
  const std::string& runner_name() const { return runner_name_; }
  const EngineConfig& config() const { return config_; }
  EngineMetrics& metrics() { return metrics_; }

 private:
  struct Command;
  void run();
  bool drain_inbox(bool block);
  void step();
  // A step's rows: sample_token (row logits masked and sampled; thread-safe across different
  // sequences) runs for all rows in parallel, then handle_token publishes each in batch order.
  int32_t sample_token(Sequence& seq, std::span<float> logits, TokenLogprob& lp, const double* u = nullptr) const;
  // The device draw of a row that samples (runner_->samples_on_device()): takes the draw's
  // uniform from the sequence's RNG; EOS / stop ids before min_tokens become banned ids.
  ModelRunner::DrawRequest device_draw(Sequence& seq) const;
  void handle_token(Sequence& seq, int32_t tok, const TokenLogprob& lp);
  void finish(Sequence& seq, FinishReason reason, OutputEvent event, std::string error = {});
  void abort_all(const std::string& why);
  // Inbox bookkeeping (engine thread): records that the submit of `id` arrived; aborts `id` now,
  // later (its submit has not arrived yet) or not at all (it already ended, or was never issued).
  void note_arrival(SequenceId id);
  void abort_or_defer(SequenceId id);
  void log_batch(const BatchPlan& plan, double step_seconds, int64_t running);
  void publish_gauges();

  EngineConfig config_;
  std::unique_ptr<ModelRunner> runner_;
  std::string runner_name_;
  int64_t vocab_size_ = 0;
  int64_t sample_vocab_ = 0;
  int64_t max_context_ = 0;
  std::unordered_set<int32_t> eos_;

  // Engine-thread state.
  std::unique_ptr<KvCacheManager> cache_;
  Scheduler scheduler_;
  std::unordered_map<SequenceId, std::unique_ptr<Sequence>> seqs_;
  // The inbox is FIFO per producer only: a submit can arrive after ids issued later, and an abort
  // sent from another thread before the submit it follows. Arrived ids: all below arrived_below_,
  // plus arrived_above_ (out of order, small). early_aborts_: aborts whose submit is still on its way.
  SequenceId arrived_below_ = 1;
  std::set<SequenceId> arrived_above_;
  std::unordered_set<SequenceId> early_aborts_;
  std::vector<float> logits_;
  std::vector<int32_t> tokens_;        // this step's sampled token per row
  std::vector<TokenLogprob> logprobs_;  // and its logprobs (when requested)
  std::vector<ModelRunner::DrawRequest> draws_;            // device sampling: per row
  std::vector<const ModelRunner::DrawRequest*> draw_ptrs_;  // nullptr: the row samples nothing
  std::vector<ModelRunner::DrawResult> draw_results_;
  int64_t decode_steps_since_log_ = 0;
  int64_t gen_tokens_since_log_ = 0;
  Clock::time_point last_decode_log_ = Clock::now();
  Clock::time_point last_prefill_log_ = Clock::now();

  // Shared state.
  struct Inbox;
  std::unique_ptr<Inbox> inbox_;
  std::atomic<int64_t> next_id_{1};
  // Requests submitted and not finished (queued, running or preempted); submit() checks it against
  // max_running_requests + max_queued_requests.
  std::atomic<int64_t> inflight_{0};
  std::atomic<bool> draining_{false};
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> seed_state_;
  EngineMetrics metrics_;
  std::thread thread_;
};

}  // namespace dsv4::engine
