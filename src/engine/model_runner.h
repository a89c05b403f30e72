// ModelRunner: the engine's only view of a model backend (CPU reference now, CUDA later).
//
// Contract: not thread-safe; only the engine thread calls it. The engine owns the
// KvCacheManager; the runner reads/writes per-sequence state through the BlockTable it is
// given (KvCacheManager::entry) or keeps its own state keyed by SequenceId, which it must
// drop in release().
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/cache_manager.h"
#include "engine/sampler.h"
#include "engine/types.h"

namespace dsv4::engine {

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;

  virtual int64_t vocab_size() const = 0;        // length of one logits row
  virtual int64_t max_context() const = 0;       // max positions per sequence
  virtual CacheLayout cache_layout() const = 0;  // pools each sequence needs (spec §5.1)

  struct Item {
    SequenceId seq = 0;
    int64_t start_pos = 0;            // position of tokens[0]
    std::span<const int32_t> tokens;  // n >= 1 tokens to append
    const BlockTable* blocks = nullptr;  // already grown to start_pos + n tokens
    // When this item is (a chunk of) a prefill: the number of tokens the whole prefill
    // covers, so every chunk uses the one-shot candidate layout (bit-identical results for
    // any chunk split). 0 for decode / verification steps.
    int64_t prompt_length = 0;
  };

  // Called once by the engine after it created the cache manager from cache_layout();
  // runners that keep their state in the manager's pools remember it. The manager outlives
  // every forward() call.
  virtual void bind_cache(KvCacheManager& /*cache*/) {}

  // Appends `tokens` at positions [start_pos, start_pos+n) for every item (chunked prefill
  // when n>1 and start_pos>0, plain decode when n==1, several tokens for speculative
  // verification) and writes each item's LAST-position fp32 logits into
  // logits_out[i*vocab_size() ...]. logits_out.size() == items.size()*vocab_size().
  // A fresh sequence starts at start_pos 0 with zeroed state. Items of one call name
  // distinct sequences. The result for one item must not depend on the other items.
  virtual void forward(std::span<const Item> items, std::span<float> logits_out) = 0;

  // Device sampling (optional; runners whose logits live on a GPU). A draw per item that
  // samples (nullptr: the item samples nothing, e.g. a non-final prefill chunk).
  struct DrawRequest {
    DeviceDraw draw;
    int64_t sample_vocab = 0;            // ids >= this are never sampled
    bool logprobs = false;               // the chosen token's logprob (+ top_logprobs alternatives)
    int32_t top_logprobs = 0;
    std::vector<int32_t> banned;         // ids set to −inf first (EOS / stop ids before min_tokens)
  };
  struct DrawResult {
    bool on_device = false;  // false: logits_out row i holds the item's logits; sample on the host
    int32_t token = -1;
    TokenLogprob logprob;    // when the request asked for logprobs
  };
  virtual bool samples_on_device() const { return false; }
  // forward() whose rows the runner samples itself where it can: results[i].on_device rows come
  // back as tokens only (their logits_out rows are left untouched); the other rows as forward()
  // returns them. Same contract as forward() otherwise; the default samples nothing on a device.
  virtual void forward_sampled(std::span<const Item> items, std::span<const DrawRequest* const> draws,
                               std::span<DrawResult> results, std::span<float> logits_out) {
    (void)draws;
    forward(items, logits_out);
    for (DrawResult& r : results) r.on_device = false;
  }

  // Drops any runner-side state of seq (finish, abort, preemption). Idempotent.
  virtual void release(SequenceId seq) = 0;

  virtual std::string name() const = 0;  // "cpu" / "cuda", for logs
};

}  // namespace dsv4::engine
