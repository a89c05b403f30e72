// GpuStatePool (state_pool.h) and the memory planner on a real device: slots are reused,
// a reused (even poisoned) slot gives logits bitwise equal to a fresh new_sequence() state,
// the pool exports a CUDA IPC handle another process can open, a slot received over NCCL into
// another GPU's pool decodes identically there, and the planner refuses an
// impossible --mem-fraction-static. Skips without a CUDA device.
#include "gpu/state_pool.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "base/check.h"
#include "gpu/kv_fp8.h"
#include "gpu/tp_group.h"
#include "model/state_plan.h"

namespace dsv4::gpu {
namespace {

namespace fs = std::filesystem;

// tests/data/golden/tiny-c4: compiled path, $DSV4_GOLDEN_DIR, or relative to the cwd.
fs::path tiny_c4() {
  if (const char* env = std::getenv("DSV4_GOLDEN_DIR"); env != nullptr && *env != '\0') return fs::path(env) / "tiny-c4";
  if (fs::exists(fs::path(DSV4_GOLDEN_DIR) / "tiny-c4")) return fs::path(DSV4_GOLDEN_DIR) / "tiny-c4";
  return fs::path("tests") / "data" / "golden" / "tiny-c4";
}

GpuModel& model() {
  static std::unique_ptr<GpuModel> m = GpuModel::load(tiny_c4());
  return *m;
}

std::vector<int32_t> tokens(int n, uint32_t seed, int64_t vocab) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    t[i] = static_cast<int32_t>((seed >> 8) % static_cast<uint32_t>(vocab));
  }
  return t;
}

// Chunked prefill of `prompt` (two chunks), MTP over the first chunk, then decode steps;
// every logits row concatenated (compared bitwise).
std::vector<float> run(GpuSequenceState& st, const std::vector<int32_t>& prompt, int decode_steps) {
  GpuModel& m = model();
  const int64_t n = static_cast<int64_t>(prompt.size()), first = n * 3 / 4;
  std::vector<float> all;
  auto add = [&](const std::vector<float>& v) { all.insert(all.end(), v.begin(), v.end()); };
  const auto a = m.forward(st, std::span<const int32_t>(prompt.data(), first), false, n, true);
  add(a.logits);
  add(m.mtp_forward(st, a.final_streams, std::span<const int32_t>(prompt.data() + 1, first), 0));
  add(m.forward(st, std::span<const int32_t>(prompt.data() + first, n - first), false, n, false).logits);
  const auto steps = tokens(decode_steps, 99, m.config().vocab_size);
  for (int32_t t : steps) add(m.forward(st, std::span<const int32_t>(&t, 1), false, 0, false).logits);
  return all;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

#define REQUIRE_GPU() \
  if (!has_cuda_device()) GTEST_SKIP() << "no CUDA device"

TEST(GpuStatePool, LayoutMatchesNewSequence) {
  REQUIRE_GPU();
  GpuModel& m = model();
  GpuStatePool pool(sequence_state_shape(m), 2);
  const GpuSequenceState fresh = m.new_sequence();
  GpuSequenceState st = pool.acquire();
  ASSERT_EQ(st.layers.size(), fresh.layers.size());
  int64_t bytes = 0;
  for (size_t l = 0; l < st.layers.size(); ++l) {
    const GpuLayerCache &a = st.layers[l], &b = fresh.layers[l];
    EXPECT_EQ(a.window.size(), b.window.size()) << l;
    EXPECT_EQ(a.compressed.size(), b.compressed.size()) << l;
    EXPECT_EQ(a.index_keys.size(), b.index_keys.size()) << l;
    EXPECT_EQ(a.comp_kv.size(), b.comp_kv.size()) << l;
    EXPECT_EQ(a.comp_score.size(), b.comp_score.size()) << l;
    EXPECT_EQ(a.index_kv.size(), b.index_kv.size()) << l;
    EXPECT_EQ(a.index_score.size(), b.index_score.size()) << l;
    EXPECT_TRUE(a.window.is_view());
    EXPECT_FALSE(b.window.is_view());
    EXPECT_EQ(a.comp_kv.get() == nullptr, b.comp_kv.get() == nullptr) << l;
    EXPECT_EQ(a.window.bytes(), static_cast<size_t>(kv_cache_bytes(m.config().sliding_window))) << l;
    if (!a.compressed.empty()) EXPECT_EQ(a.compressed.bytes() % kKvCachePageStride, 0u) << l;
    auto check = [&](const auto& f) {
      bytes += static_cast<int64_t>(f.bytes());
      if (f.empty()) return;
      const auto* p = reinterpret_cast<const std::byte*>(f.get());
      EXPECT_GE(p, pool.slot_ptr(st.slot));
      EXPECT_LE(p + f.bytes(), pool.slot_ptr(st.slot) + pool.slot_bytes());
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % GpuStatePool::kAlign, 0u);
    };
    check(a.window);
    check(a.compressed);
    check(a.index_keys);
    for (const DeviceBuffer<float>* f : {&a.comp_kv, &a.comp_score, &a.index_kv, &a.index_score})
      check(*f);
  }
  const int64_t main_kv = GpuStatePool::main_kv_bytes_for(sequence_state_shape(m));
  std::printf("slot %lld bytes, main KV (FP8) %lld bytes\n", static_cast<long long>(pool.slot_bytes()),
              static_cast<long long>(main_kv));
  EXPECT_GT(main_kv, 0);
  EXPECT_LT(main_kv, pool.slot_bytes());
  EXPECT_GE(pool.slot_bytes(), bytes);
  EXPECT_LT(pool.slot_bytes(), bytes + 7 * GpuStatePool::kAlign * static_cast<int64_t>(st.layers.size()) + 1);
  pool.release(st.slot);
}

TEST(GpuStatePool, AcquireReleaseReusesSlots) {
  REQUIRE_GPU();
  GpuStatePool pool(sequence_state_shape(model()), 3);
  std::vector<GpuSequenceState> held;
  for (int i = 0; i < 3; ++i) held.push_back(pool.acquire());
  std::set<int32_t> slots;
  for (const auto& s : held) slots.insert(s.slot);
  EXPECT_EQ(slots, (std::set<int32_t>{0, 1, 2}));
  EXPECT_EQ(pool.free_slots(), 0);
  EXPECT_THROW(pool.acquire(), Error);
  pool.release(held[1].slot);
  EXPECT_THROW(pool.release(held[1].slot), Error);  // twice
  for (int i = 0; i < 200; ++i) {  // no allocation per acquire: the same slot comes back
    GpuSequenceState s = pool.acquire();
    EXPECT_EQ(s.slot, held[1].slot);
    EXPECT_EQ(s.length, 0);
    pool.release(s.slot);
  }
  pool.release(held[0].slot);
  pool.release(held[2].slot);
  EXPECT_EQ(pool.free_slots(), 3);
}

TEST(GpuStatePool, ReusedSlotMatchesFreshStateBitwise) {
  REQUIRE_GPU();
  GpuModel& m = model();
  const int64_t vocab = m.config().vocab_size;
  const auto prompt = tokens(200, 7, vocab);  // crosses the 128-token window and ratio 128
  GpuSequenceState fresh = m.new_sequence();
  const std::vector<float> want = run(fresh, prompt, 6);
  GpuSequenceState fresh2 = m.new_sequence();
  ASSERT_TRUE(bitwise_equal(run(fresh2, prompt, 6), want)) << "forward is not deterministic on this device";

  GpuStatePool pool(sequence_state_shape(m), 2);
  GpuSequenceState other = pool.acquire();  // slot 0 stays busy, slot 1 is reused below
  GpuSequenceState st = pool.acquire();
  const int32_t slot = st.slot;
  run(st, tokens(260, 3, vocab), 4);  // dirty every buffer of the slot
  pool.release(slot);
  GpuSequenceState again = pool.acquire();
  ASSERT_EQ(again.slot, slot);
  EXPECT_TRUE(bitwise_equal(run(again, prompt, 6), want)) << "reused slot differs from new_sequence()";
  // reset() in place (recomputation after preemption) as well.
  pool.reset(again);
  EXPECT_EQ(again.length, 0);
  EXPECT_EQ(again.mtp_length, 0);
  EXPECT_TRUE(bitwise_equal(run(again, prompt, 6), want)) << "reset slot differs from new_sequence()";
  pool.release(again.slot);
  pool.release(other.slot);
}

TEST(GpuStatePool, PoisonedSlotMatchesFreshStateBitwise) {
  REQUIRE_GPU();
  GpuModel& m = model();
  const auto prompt = tokens(150, 11, m.config().vocab_size);
  GpuSequenceState fresh = m.new_sequence();
  const std::vector<float> want = run(fresh, prompt, 5);
  GpuStatePool pool(sequence_state_shape(m), 1);
  // Every byte NaN: only what acquire() resets may be read before it is written.
  CUDA_CHECK(cudaMemset(pool.base(), 0xff, static_cast<size_t>(pool.total_bytes())));
  GpuSequenceState st = pool.acquire();
  EXPECT_TRUE(bitwise_equal(run(st, prompt, 5), want)) << "forward reads state that acquire() does not reset";
  pool.release(st.slot);
}

// Child side of IpcHandleOpensInAnotherProcess: run with DSV4_IPC_HANDLE set.
TEST(GpuStatePool, IpcChild) {
  const char* hex = std::getenv("DSV4_IPC_HANDLE");
  if (hex == nullptr) GTEST_SKIP() << "runs as the child of IpcHandleOpensInAnotherProcess";
  cudaIpcMemHandle_t h{};
  ASSERT_EQ(std::strlen(hex), 2 * sizeof(h));
  for (size_t i = 0; i < sizeof(h); ++i) h.reserved[i] = static_cast<char>(std::stoi(std::string(hex + 2 * i, 2), nullptr, 16));
  const int64_t offset = std::stoll(std::getenv("DSV4_IPC_OFFSET"));
  void* p = nullptr;
  CUDA_CHECK(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
  std::vector<uint8_t> v(4096);
  CUDA_CHECK(cudaMemcpy(v.data(), static_cast<std::byte*>(p) + offset, v.size(), cudaMemcpyDeviceToHost));
  for (uint8_t b : v) ASSERT_EQ(b, 0x5a);
  CUDA_CHECK(cudaMemset(static_cast<std::byte*>(p) + offset, 0xc3, v.size()));  // the parent checks this
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaIpcCloseMemHandle(p));
}

TEST(GpuStatePool, IpcHandleOpensInAnotherProcess) {
  REQUIRE_GPU();
  if (std::getenv("DSV4_IPC_HANDLE") != nullptr) GTEST_SKIP() << "child";
  GpuStatePool pool(sequence_state_shape(model()), 2);
  const cudaIpcMemHandle_t h = pool.ipc_handle();  // throws on failure
  std::string hex;
  bool nonzero = false;
  for (char c : h.reserved) {
    char buf[3];
    std::snprintf(buf, sizeof(buf), "%02x", static_cast<unsigned char>(c));
    hex += buf;
    nonzero |= c != 0;
  }
  EXPECT_TRUE(nonzero);
  const int64_t offset = pool.slot_bytes();  // slot 1
  CUDA_CHECK(cudaMemset(pool.slot_ptr(1), 0x5a, 4096));
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const std::string cmd = "DSV4_IPC_HANDLE=" + hex + " DSV4_IPC_OFFSET=" + std::to_string(offset) + " '" + self +
                          "' --gtest_filter=GpuStatePool.IpcChild > /dev/null";
  const int rc = std::system(cmd.c_str());
  ASSERT_EQ(rc, 0) << "child process could not open / use the pool's IPC handle: " << cmd;
  std::vector<uint8_t> v(4096);
  CUDA_CHECK(cudaMemcpy(v.data(), pool.slot_ptr(1), v.size(), cudaMemcpyDeviceToHost));
  for (uint8_t b : v) ASSERT_EQ(b, 0xc3) << "the child's write is not visible";
}

TEST(GpuStatePool, PoolOnAnotherDeviceKeepsTheCurrentDevice) {
  REQUIRE_GPU();
  int n = 0;
  CUDA_CHECK(cudaGetDeviceCount(&n));
  if (n < 2) GTEST_SKIP() << "needs two devices (one pool per tensor-parallel rank)";
  const auto shape = sequence_state_shape(model());
  GpuStatePool pool(shape, 2, 1);
  GpuSequenceState st = pool.acquire();
  int current = -1;
  CUDA_CHECK(cudaGetDevice(&current));
  EXPECT_EQ(current, 0);
  cudaPointerAttributes attr{};
  CUDA_CHECK(cudaPointerGetAttributes(&attr, st.layers[0].window.get()));
  EXPECT_EQ(attr.device, 1);
  std::vector<uint8_t> w = st.layers[0].window.download();
  for (uint8_t v : w) ASSERT_EQ(v, 0);
  EXPECT_EQ(pool.device(), 1);
  pool.release(st.slot);
}

// Prefill/decode disaggregation: a sequence prefilled into a slot of GPU 0's pool is received
// as one byte range into a slot of GPU 1's pool over NCCL (TpGroup::transfer_bytes) and then
// decodes on a model loaded on GPU 1 with logits bitwise equal to decoding on GPU 0.
TEST(GpuStatePool, SlotReceivedOverNcclDecodesIdentically) {
  REQUIRE_GPU();
  int n = 0;
  CUDA_CHECK(cudaGetDeviceCount(&n));
  if (n < 2) GTEST_SKIP() << "needs two devices";
  if (!tp_supported()) GTEST_SKIP() << "built without NCCL";
  GpuModel& m0 = model();  // device 0
  CUDA_CHECK(cudaSetDevice(1));
  std::unique_ptr<GpuModel> m1 = GpuModel::load(tiny_c4());
  CUDA_CHECK(cudaSetDevice(0));
  const auto shape = sequence_state_shape(m0);
  GpuStatePool pool0(shape, 2, 0), pool1(shape, 3, 1);
  GpuSequenceState a = pool0.acquire();
  GpuSequenceState unused = pool1.acquire();  // the receiving slot is slot 1: offsets differ
  GpuSequenceState b = pool1.acquire();
  ASSERT_NE(a.slot, b.slot);
  const auto prompt = tokens(37, 5, m0.config().vocab_size);
  m0.forward(a, prompt, false, 0, false);
  CUDA_CHECK(cudaDeviceSynchronize());

  TpGroup link(2);
  link.run([&](int r) {
    if (r == 0) link.transfer_bytes(0, 0, 1, pool0.slot_ptr(a.slot), pool0.slot_bytes(), nullptr);
    else link.transfer_bytes(1, 0, 1, pool1.slot_ptr(b.slot), pool1.slot_bytes(), nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
  });
  b.length = a.length;
  b.mtp_length = a.mtp_length;
  std::vector<uint8_t> sent(static_cast<size_t>(pool0.slot_bytes())), got(sent.size());
  CUDA_CHECK(cudaMemcpy(sent.data(), pool0.slot_ptr(a.slot), sent.size(), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(got.data(), pool1.slot_ptr(b.slot), got.size(), cudaMemcpyDeviceToHost));
  ASSERT_TRUE(sent == got) << "slot bytes differ after the NCCL transfer";

  for (int32_t t : tokens(6, 17, m0.config().vocab_size)) {
    const auto la = m0.forward(a, std::span<const int32_t>(&t, 1), false, 0, false).logits;
    CUDA_CHECK(cudaSetDevice(1));
    const auto lb = m1->forward(b, std::span<const int32_t>(&t, 1), false, 0, false).logits;
    CUDA_CHECK(cudaSetDevice(0));
    ASSERT_TRUE(bitwise_equal(la, lb)) << "decode on GPU 1 after the transfer differs at position " << a.length;
  }
  pool0.release(a.slot);
  pool1.release(b.slot);
  pool1.release(unused.slot);
}

TEST(GpuStatePool, PlannerSizesPoolOnThisDevice) {
  REQUIRE_GPU();
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  model::StatePlanInput in;
  in.total_bytes = static_cast<int64_t>(total_b);
  in.used_bytes = static_cast<int64_t>(total_b - free_b);
  in.slot_bytes = GpuStatePool::slot_bytes_for(sequence_state_shape(model()));
  in.max_running_requests = 8;
  in.max_context = model().max_seq_len();
  in.mem_fraction_static = 0.88;
  const model::StatePlan p = model::plan_state_slots(in);
  std::printf("%s\n", p.summary().c_str());
  EXPECT_EQ(p.max_sequences, 8);
  GpuStatePool pool(sequence_state_shape(model()), p.slots);
  EXPECT_EQ(pool.total_bytes(), p.pool_bytes);
  // An impossible fraction: the weights alone exceed it.
  in.mem_fraction_static = 1e-4;
  try {
    model::plan_state_slots(in);
    FAIL() << "planner accepted --mem-fraction-static=1e-4";
  } catch (const Error& e) {
    std::printf("refused as expected: %s\n", e.what());
    EXPECT_NE(std::string(e.what()).find("--mem-fraction-static"), std::string::npos);
  }
}

}  // namespace
}  // namespace dsv4::gpu
