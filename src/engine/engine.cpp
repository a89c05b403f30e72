#include "engine/engine.h"

#include <concurrentqueue/blockingconcurrentqueue.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <random>

#include "base/check.h"
#include "base/parallel.h"
#include "engine/log.h"

namespace dsv4::engine {

namespace {
uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
std::string fixed2(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", v);
  return buf;
}
// The runner's own limit on concurrent sequences (its device state slots) caps
// --max-running-requests, so the scheduler never plans more sequences than fit.
EngineConfig fit_to_runner(EngineConfig c, const ModelRunner* runner) {
  if (runner == nullptr) return c;
  const int64_t slots = runner->cache_layout().max_sequences;
  if (slots > 0 && c.max_running_requests > slots) {
    log::info(str_cat("max_running_requests lowered from ", c.max_running_requests, " to ", slots,
                      " (the ", runner->name(), " runner's sequence slots)"));
    c.max_running_requests = slots;
  }
  return c;
}
}  // namespace

const char* to_string(RequestState s) {
  switch (s) {
    case RequestState::kQueued: return "queued";
    case RequestState::kPrefilling: return "prefilling";
    case RequestState::kDecoding: return "decoding";
    case RequestState::kFinished: return "finished";
    case RequestState::kAborted: return "aborted";
  }
  return "?";
}

const char* to_string(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
  }
  return "";
}

void EngineConfig::validate() const {
  DSV4_CHECK(max_running_requests >= 1, "--max-running-requests must be >= 1, got ", max_running_requests);
  DSV4_CHECK(max_queued_requests >= 0, "--max-queued-requests must be >= 0, got ", max_queued_requests);
  DSV4_CHECK(chunked_prefill_size >= 1, "--chunked-prefill-size must be >= 1, got ", chunked_prefill_size);
  DSV4_CHECK(cpu_cache_bytes > 0, "--cpu-cache-bytes must be positive, got ", cpu_cache_bytes);
  DSV4_CHECK(mem_fraction_static > 0 && mem_fraction_static <= 1, "--mem-fraction-static must be in (0, 1], got ",
             mem_fraction_static);
  DSV4_CHECK(max_context >= 0, "max context must be >= 0");
}

// A new request or an abort; the engine thread is the only consumer.
struct Engine::Command {
  std::unique_ptr<Sequence> seq;
  SequenceId abort_id = -1;
};
struct Engine::Inbox {
  moodycamel::BlockingConcurrentQueue<Command> queue;
};

Engine::Engine(EngineConfig config, std::unique_ptr<ModelRunner> runner)
    : config_(fit_to_runner(std::move(config), runner.get())),
      runner_(std::move(runner)),
      scheduler_(SchedulerConfig{config_.max_running_requests, config_.chunked_prefill_size}),
      inbox_(std::make_unique<Inbox>()),
      seed_state_(std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32)) {
  config_.validate();
  DSV4_CHECK(runner_ != nullptr, "engine needs a model runner");
  runner_name_ = runner_->name();
  vocab_size_ = runner_->vocab_size();
  DSV4_CHECK(vocab_size_ > 0, "runner vocab size must be positive");
  max_context_ = config_.max_context > 0 ? std::min(config_.max_context, runner_->max_context()) : runner_->max_context();
  sample_vocab_ = config_.sample_vocab_size > 0 ? std::min(config_.sample_vocab_size, vocab_size_) : vocab_size_;
  eos_.insert(config_.eos_ids.begin(), config_.eos_ids.end());
  // A runner that planned its own (device) pools brings their budget; else --cpu-cache-bytes.
  CacheLayout layout = runner_->cache_layout();
  const int64_t budget = layout.byte_budget > 0 ? layout.byte_budget : config_.cpu_cache_bytes;
  cache_ = std::make_unique<KvCacheManager>(std::move(layout), budget, config_.max_running_requests, max_context_);
  runner_->bind_cache(*cache_);
  const CacheUsage u = cache_->usage();
  metrics_.cache_total_bytes = u.total_bytes;
  log::info(str_cat("Engine: runner=", runner_name_, ", vocab=", vocab_size_, ", sample vocab=", sample_vocab_,
                    ", max context=", max_context_, ", cache ", u.total_bytes, " bytes (", u.host_bytes,
                    " in host memory) in ", cache_->layout().pools.size(), " pools, max sequences=", u.max_sequences,
                    ", token capacity=", u.token_capacity));
}

Engine::~Engine() { stop(); }

void Engine::start() {
  DSV4_CHECK(!thread_.joinable(), "engine already started");
  thread_ = std::thread([this] { run(); });
}

SubmitResult Engine::submit(GenerateInput in) {
  SubmitResult r;
  if (draining_.load() || stop_.load()) {
    metrics_.requests_rejected++;
    return {SubmitStatus::kShuttingDown, -1, "The server is shutting down and does not accept new requests."};
  }
  const int64_t n = static_cast<int64_t>(in.prompt.size());
  if (n < 1 || n >= max_context_) {
    return {SubmitStatus::kInvalid, -1, str_cat("prompt has ", n, " tokens; it must have 1 to ", max_context_ - 1)};
  }
  for (int32_t id : in.prompt) {
    if (id < 0 || id >= vocab_size_) return {SubmitStatus::kInvalid, -1, str_cat("token id ", id, " is out of range")};
  }
  if (!in.sink) return {SubmitStatus::kInvalid, -1, "missing output sink"};
  // inflight_ counts requests submitted and not finished (queued, running or preempted): one
  // counter reserved here, so admission (queued → running) cannot open a window in which a submit
  // sees a free slot twice.
  if (inflight_.fetch_add(1) >= int64_t{config_.max_running_requests} + config_.max_queued_requests) {
    inflight_.fetch_sub(1);
    metrics_.requests_rejected++;
    return {SubmitStatus::kQueueFull, -1,
            str_cat("The request queue is full (max_queued_requests=", config_.max_queued_requests,
                    "); retry later.")};
  }
  std::unique_ptr<Sequence> seq;
  try {  // the reservation above is returned if building the sequence throws
    seq = std::make_unique<Sequence>();
    seq->params = std::move(in.params);
    seq->params.max_tokens = std::min<int64_t>(seq->params.max_tokens, max_context_ - n);
    seq->sink = std::move(in.sink);
    seq->tokens = std::move(in.prompt);
    seq->prompt_len = n;
    seq->arrival = in.arrival;
    const uint64_t seed =
        seq->params.seed ? *seq->params.seed : splitmix64(seed_state_.fetch_add(0x9e3779b97f4a7c15ULL));
    seq->sampler = std::make_unique<Sampler>(seq->params, sample_vocab_, seed, seq->tokens);
    if (config_.detokenizer) seq->detok = config_.detokenizer(seq->params.skip_special_tokens);
    seq->stop = StopMatcher(seq->params.stop);
  } catch (...) {
    inflight_.fetch_sub(1);
    throw;
  }
  // The id is taken only now, so every id issued reaches the inbox (the engine thread counts
  // arrivals to tell an early abort from a late one).
  seq->id = next_id_.fetch_add(1);
  r.id = seq->id;
  if (!inbox_->queue.enqueue(Command{std::move(seq), -1})) {  // only when allocation fails
    inflight_.fetch_sub(1);
    DSV4_FAIL("engine inbox: out of memory for request ", r.id);
  }
  return r;
}

void Engine::abort(SequenceId id) { inbox_->queue.enqueue(Command{nullptr, id}); }

bool Engine::wait_idle(std::chrono::milliseconds timeout) const {
  const auto deadline = Clock::now() + timeout;
  while (inflight_.load() > 0) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

void Engine::stop() {
  stop_.store(true);
  if (thread_.joinable()) {
    inbox_->queue.enqueue(Command{});
    thread_.join();
  }
}

void Engine::run() {
  while (true) {
    drain_inbox(/*block=*/!scheduler_.has_work());
    if (stop_.load()) {
      drain_inbox(false);
      abort_all("the server is shutting down");
      return;
    }
    if (!scheduler_.has_work()) continue;
    try {
      step();
    } catch (const std::exception& e) {
      log::error(str_cat("engine step failed: ", e.what()));
      abort_all(str_cat("internal error: ", e.what()));
    }
  }
}

bool Engine::drain_inbox(bool block) {
  Command cmd;
  bool got = block ? inbox_->queue.wait_dequeue_timed(cmd, std::chrono::milliseconds(50))
                   : inbox_->queue.try_dequeue(cmd);
  bool any = false;
  while (got) {
    any = true;
    if (cmd.seq) {
      Sequence* s = cmd.seq.get();
      note_arrival(s->id);
      seqs_.emplace(s->id, std::move(cmd.seq));
      scheduler_.enqueue(s);
      if (early_aborts_.erase(s->id) > 0) finish(*s, FinishReason::kAbort, {}, "request aborted");
    } else if (cmd.abort_id >= 0) {
      abort_or_defer(cmd.abort_id);
    }
    got = inbox_->queue.try_dequeue(cmd);
  }
  publish_gauges();
  return any;
}

void Engine::note_arrival(SequenceId id) {
  if (id != arrived_below_) {
    arrived_above_.insert(id);
    return;
  }
  ++arrived_below_;
  while (!arrived_above_.empty() && *arrived_above_.begin() == arrived_below_) {
    arrived_above_.erase(arrived_above_.begin());
    ++arrived_below_;
  }
}

void Engine::abort_or_defer(SequenceId id) {
  if (auto it = seqs_.find(id); it != seqs_.end()) {
    finish(*it->second, FinishReason::kAbort, {}, "request aborted");
    return;
  }
  const bool arrived = id < arrived_below_ || arrived_above_.count(id) > 0;
  if (!arrived && id >= 1 && id < next_id_.load()) early_aborts_.insert(id);  // else: ended or never issued
}

void Engine::step() {
  const auto t0 = Clock::now();
  BatchPlan plan = scheduler_.schedule(*cache_);
  for (Sequence* s : plan.preempted) {
    runner_->release(s->id);
    metrics_.preemptions++;
    log::warn(str_cat("preempted request ", s->id, " (cache full); it will be recomputed"));
  }
  if (plan.items.empty()) return;

  std::vector<ModelRunner::Item> items;
  items.reserve(plan.items.size());
  for (const PlanItem& p : plan.items) {
    Sequence& s = *p.seq;
    if (!s.ever_admitted) {
      s.ever_admitted = true;
      s.admitted = t0;
      metrics_.queue_time.observe(seconds(t0 - s.arrival));
    }
    items.push_back({s.id, p.start_pos,
                     std::span<const int32_t>(s.tokens.data() + p.start_pos, static_cast<size_t>(p.num_tokens)),
                     &cache_->table(s.id),
                     plan.kind == BatchPlan::Kind::kPrefill ? static_cast<int64_t>(s.tokens.size()) : 0});
  }
  logits_.resize(items.size() * static_cast<size_t>(vocab_size_));
  const bool device_sampling = runner_->samples_on_device();
  if (device_sampling) {
    draws_.resize(items.size());
    draw_ptrs_.assign(items.size(), nullptr);
    draw_results_.resize(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
      if (!plan.items[i].samples) continue;
      draws_[i] = device_draw(*plan.items[i].seq);
      draw_ptrs_[i] = &draws_[i];
    }
  }
  try {
    if (device_sampling)
      runner_->forward_sampled(items, draw_ptrs_, draw_results_, logits_);
    else
      runner_->forward(items, logits_);
  } catch (const std::exception& e) {
    log::error(str_cat("forward failed: ", e.what()));
    for (const PlanItem& p : plan.items) finish(*p.seq, FinishReason::kError, {}, str_cat("model error: ", e.what()));
    return;
  }
  scheduler_.on_step_done(plan);
  if (plan.kind == BatchPlan::Kind::kPrefill) {
    int64_t prompt = 0;
    for (const PlanItem& p : plan.items) prompt += p.num_tokens;
    metrics_.prompt_tokens += static_cast<uint64_t>(prompt);
  }
  const int64_t running = scheduler_.num_running();  // the batch as it ran, for the log line
  // Sample every row first, rows in parallel (each sequence has its own Sampler and RNG, so a
  // row's token does not depend on the others or on the thread count), then publish the
  // tokens in batch order.
  const size_t rows = plan.items.size();
  tokens_.assign(rows, -1);
  logprobs_.resize(rows);
  parallel_for(static_cast<int64_t>(rows), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      if (!plan.items[i].samples) continue;
      if (device_sampling && draw_results_[i].on_device) {
        tokens_[i] = draw_results_[i].token;
        logprobs_[i] = std::move(draw_results_[i].logprob);
        continue;
      }
      const size_t off = static_cast<size_t>(i) * static_cast<size_t>(vocab_size_);
      tokens_[i] = sample_token(*plan.items[i].seq, std::span<float>(logits_.data() + off, static_cast<size_t>(vocab_size_)),
                                logprobs_[i], device_sampling ? &draws_[i].draw.u : nullptr);
    }
  });
  for (size_t i = 0; i < rows; ++i) {
    if (plan.items[i].samples) handle_token(*plan.items[i].seq, tokens_[i], logprobs_[i]);
  }
  log_batch(plan, seconds(Clock::now() - t0), running);
  publish_gauges();
}

ModelRunner::DrawRequest Engine::device_draw(Sequence& seq) const {
  const SamplingParams& p = seq.params;
  ModelRunner::DrawRequest d;
  d.draw = seq.sampler->prepare_device_draw();
  d.sample_vocab = sample_vocab_;
  d.logprobs = p.logprobs || p.top_logprobs > 0;
  d.top_logprobs = p.top_logprobs;
  if (seq.num_output < p.min_tokens) {  // as sample_token's masking
    for (int32_t id : eos_) if (id >= 0 && id < vocab_size_) d.banned.push_back(id);
    for (int32_t id : p.stop_token_ids) if (id >= 0 && id < vocab_size_) d.banned.push_back(id);
  }
  return d;
}

int32_t Engine::sample_token(Sequence& seq, std::span<float> row, TokenLogprob& lp, const double* u) const {
  const SamplingParams& p = seq.params;
  if (seq.num_output < p.min_tokens) {
    for (int32_t id : eos_) if (id >= 0 && id < vocab_size_) row[id] = -std::numeric_limits<float>::infinity();
    for (int32_t id : p.stop_token_ids) if (id >= 0 && id < vocab_size_) row[id] = -std::numeric_limits<float>::infinity();
  }
  const bool want_lp = p.logprobs || p.top_logprobs > 0;
  return seq.sampler->sample(row, want_lp ? &lp : nullptr, u);
}

void Engine::handle_token(Sequence& seq, int32_t tok, const TokenLogprob& lp) {
  const SamplingParams& p = seq.params;
  const bool want_lp = p.logprobs || p.top_logprobs > 0;
  const auto now = Clock::now();
  if (seq.num_output == 0) {
    seq.first_token = now;
    metrics_.ttft.observe(seconds(now - seq.arrival));
  }
  seq.last_token = now;
  seq.tokens.push_back(tok);
  seq.num_output += 1;
  seq.sampler->observe(tok);
  metrics_.generation_tokens++;
  gen_tokens_since_log_ += 1;

  OutputEvent ev;
  const bool stop_id = (!p.ignore_eos && eos_.count(tok) != 0) ||
                       std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), tok) != p.stop_token_ids.end();
  FinishReason reason = FinishReason::kNone;
  auto take_text = [&](const std::string& text) {
    StopMatcher::Result r = seq.stop.push(text);
    ev.text += r.emit;
    if (r.stopped) {
      reason = FinishReason::kStop;
      ev.matched_stop = r.matched;
    }
  };
  if (stop_id) {
    reason = FinishReason::kStop;
  } else {
    ev.token_ids.push_back(tok);
    if (want_lp) ev.logprobs.push_back(lp);
    if (seq.detok) take_text(seq.detok->push(tok));
    if (reason == FinishReason::kNone &&
        (seq.num_output >= p.max_tokens || static_cast<int64_t>(seq.tokens.size()) >= max_context_)) {
      reason = FinishReason::kLength;
    }
  }
  if (reason != FinishReason::kNone && ev.matched_stop.empty() && seq.detok) {
    take_text(seq.detok->flush());  // the tail may still complete a stop string
    if (ev.matched_stop.empty()) ev.text += seq.stop.flush();
  }
  if (reason != FinishReason::kNone) {
    finish(seq, reason, std::move(ev));
    return;
  }
  ev.prompt_tokens = seq.prompt_len;
  ev.completion_tokens = seq.num_output;
  seq.sink(std::move(ev));
}

void Engine::finish(Sequence& seq, FinishReason reason, OutputEvent ev, std::string error) {
  const SequenceId id = seq.id;
  const bool was_admitted = seq.ever_admitted;
  scheduler_.remove(&seq, *cache_);
  if (was_admitted) runner_->release(id);
  if (reason == FinishReason::kStop || reason == FinishReason::kLength) {
    seq.finish();
    metrics_.requests_finished++;
    const auto now = Clock::now();
    metrics_.e2e.observe(seconds(now - seq.arrival));
    if (seq.num_output > 1) metrics_.tpot.observe(seconds(seq.last_token - seq.first_token) / double(seq.num_output - 1));
  } else {
    seq.abort();
    metrics_.requests_aborted++;
  }
  ev.finished = true;
  ev.finish_reason = reason;
  ev.error = std::move(error);
  ev.prompt_tokens = seq.prompt_len;
  ev.completion_tokens = seq.num_output;
  seq.sink(std::move(ev));
  seqs_.erase(id);  // destroys seq
  inflight_.fetch_sub(1);
}

void Engine::abort_all(const std::string& why) {
  std::vector<Sequence*> all;
  for (auto& [id, s] : seqs_) all.push_back(s.get());
  for (Sequence* s : all) finish(*s, stop_.load() ? FinishReason::kAbort : FinishReason::kError, {}, why);
}

void Engine::publish_gauges() {
  const CacheUsage u = cache_->usage();
  metrics_.num_running = scheduler_.num_running();
  metrics_.num_queued = scheduler_.num_queued();
  metrics_.num_used_tokens = u.used_tokens;
  metrics_.token_usage = u.token_usage();
  metrics_.cache_used_bytes = u.used_bytes;
  metrics_.set_pool_usage(u.pool_usage);
}

void Engine::log_batch(const BatchPlan& plan, double step_seconds, int64_t running) {
  const CacheUsage u = cache_->usage();
  const auto now = Clock::now();
  if (plan.kind == BatchPlan::Kind::kPrefill) {
    if (!config_.log_prefill) return;
    const double dt = std::max(step_seconds, 1e-9);
    log::info(str_cat("Prefill batch, #new-seq: ", plan.new_seqs, ", #new-token: ", plan.new_tokens,
                      ", #cached-token: 0, token usage: ", fixed2(u.token_usage()),
                      ", #running-req: ", running, ", #queue-req: ", scheduler_.num_queued(),
                      ", input throughput (token/s): ", fixed2(static_cast<double>(plan.new_tokens) / dt)));
    last_prefill_log_ = now;
    return;
  }
  if (config_.decode_log_interval <= 0) return;
  if (++decode_steps_since_log_ < config_.decode_log_interval) return;
  const double dt = std::max(seconds(now - last_decode_log_), 1e-9);
  const double tput = static_cast<double>(gen_tokens_since_log_) / dt;
  metrics_.gen_throughput = tput;
  log::info(str_cat("Decode batch, #running-req: ", running, ", #token: ", u.used_tokens,
                    ", token usage: ", fixed2(u.token_usage()), ", cuda graph: ", config_.cuda_graph ? "True" : "False",
                    ", gen throughput (token/s): ", fixed2(tput), ", #queue-req: ", scheduler_.num_queued()));
  decode_steps_since_log_ = 0;
  gen_tokens_since_log_ = 0;
  last_decode_log_ = now;
}

}  // namespace dsv4::engine
