#include "gpu/cupti_trace.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <utility>

#include "base/check.h"
#include "gpu/cuda_check.h"
#include "gpu/profiler.h"

#if __has_include(<cupti_activity.h>) && __has_include(<cupti_version.h>)
#include <cupti_activity.h>
#include <cupti_version.h>
#define DSV4_CUPTI_HEADERS 1
#else
#define DSV4_CUPTI_HEADERS 0
#endif

namespace dsv4::gpu::cupti {

#if DSV4_CUPTI_HEADERS
namespace {

// The kernel record layout of the CUDA 13 headers (start, end, deviceId, correlationId, name,
// graphNodeId, graphId are all we read).
using KernelActivity = CUpti_ActivityKernel10;

struct Api {
  void* lib = nullptr;
  std::string path;
  uint32_t version = 0;
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;
  decltype(&cuptiActivityPushExternalCorrelationId) push_external = nullptr;
  decltype(&cuptiActivityPopExternalCorrelationId) pop_external = nullptr;
  decltype(&cuptiGetVersion) get_version = nullptr;                      // optional
  decltype(&cuptiActivityGetNumDroppedRecords) dropped_count = nullptr;  // optional
  bool callbacks_registered = false;
  std::string error;  // why loading failed (sticky)
  bool tried = false;
};

Api& api() {
  static Api a;
  return a;
}

std::string result_text(CUptiResult r) {
  const char* s = nullptr;
  if (api().result_string != nullptr) api().result_string(r, &s);
  return s != nullptr ? std::string(s) : "CUPTI error " + std::to_string(static_cast<int>(r));
}

void check(CUptiResult r, const char* what) {
  DSV4_CHECK(r == CUPTI_SUCCESS, what, " failed: ", result_text(r));
}

// Records delivered by CUPTI's completion callback (which may run on a CUPTI thread).
struct Collector {
  std::mutex mu;
  std::vector<prof::KernelRecord> kernels;
  std::map<uint32_t, uint64_t> external;  // CUDA correlation id -> our launch id
  int64_t dropped = 0;                    // records CUPTI had no buffer space for
};

Collector& collector() {
  static Collector c;
  return c;
}

constexpr size_t kBufferBytes = size_t{8} << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::vector<prof::KernelRecord> got;
  std::vector<std::pair<uint32_t, uint64_t>> ext;
  CUpti_Activity* rec = nullptr;
  while (buffer != nullptr && api().next_record(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ||
        rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      const auto* k = reinterpret_cast<const KernelActivity*>(rec);
      prof::KernelRecord r;
      r.name = k->name != nullptr ? k->name : "?";
      r.start_ns = k->start;
      r.end_ns = k->end;
      r.device = k->deviceId;
      r.correlation = k->correlationId;
      r.graph_id = k->graphId;
      r.graph_node = k->graphNodeId;
      got.push_back(std::move(r));
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) {
      const auto* e = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(rec);
      if (e->externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0)
        ext.emplace_back(e->correlationId, e->externalId);
    }
  }
  {
    Collector& c = collector();
    std::lock_guard<std::mutex> lock(c.mu);
    for (auto& r : got) c.kernels.push_back(std::move(r));
    for (const auto& [corr, id] : ext) c.external[corr] = id;
    size_t dropped = 0;
    if (api().dropped_count != nullptr &&
        api().dropped_count(nullptr, 0, &dropped) == CUPTI_SUCCESS) {
      c.dropped += static_cast<int64_t>(dropped);
    }
  }
  std::free(buffer);
}

template <class Fn>
bool resolve(void* lib, const char* name, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(lib, name));
  return fn != nullptr;
}

bool open_library(Api& a) {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("DSV4_CUPTI_LIB"); env != nullptr && *env != '\0')
    candidates.emplace_back(env);
  for (const char* c : {"libcupti.so.13",
                        "libcupti.so",
                        "/usr/local/cuda/lib64/libcupti.so.13",
                        "/usr/local/cuda/lib64/libcupti.so",
                        "/usr/local/cuda/lib/libcupti.so.13",
                        "/usr/local/cuda/lib/libcupti.so",
                        "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13",
                        "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so"}) {
    candidates.emplace_back(c);
  }
  std::string last;
  for (const std::string& c : candidates) {
    a.lib = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (a.lib != nullptr) {
      a.path = c;
      return true;
    }
    const char* e = dlerror();
    last = e != nullptr ? e : c;
  }
  a.error =
      "libcupti not found (tried libcupti.so.13, libcupti.so and "
      "/usr/local/cuda/{lib64,lib,extras/CUPTI/lib64}; "
      "set DSV4_CUPTI_LIB): " +
      last;
  return false;
}

}  // namespace

bool load(std::string* why) {
  Api& a = api();
  if (!a.tried) {
    a.tried = true;
    if (open_library(a)) {
      std::string missing;
      auto need = [&](const char* name, auto& fn) {
        if (missing.empty() && !resolve(a.lib, name, fn)) missing = name;
      };
      need("cuptiActivityEnable", a.enable);
      need("cuptiActivityDisable", a.disable);
      need("cuptiActivityRegisterCallbacks", a.register_callbacks);
      need("cuptiActivityFlushAll", a.flush_all);
      need("cuptiActivityGetNextRecord", a.next_record);
      need("cuptiGetResultString", a.result_string);
      need("cuptiActivityPushExternalCorrelationId", a.push_external);
      need("cuptiActivityPopExternalCorrelationId", a.pop_external);
      if (!missing.empty()) {
        a.error = a.path + " lacks " + missing;
        dlclose(a.lib);
        a.lib = nullptr;
      } else {
        if (resolve(a.lib, "cuptiGetVersion", a.get_version)) a.get_version(&a.version);
        resolve(a.lib, "cuptiActivityGetNumDroppedRecords", a.dropped_count);
      }
    }
  }
  if (a.lib == nullptr && why != nullptr) *why = a.error;
  return a.lib != nullptr;
}

std::string describe() {
  const Api& a = api();
  if (a.lib == nullptr) return {};
  return a.path + " (CUPTI API " + std::to_string(a.version) + ")";
}

struct KernelTrace::Observer final : prof::LaunchObserver {
  std::vector<prof::LaunchEntry> log;
  void on_begin(const char* kernel, double bytes) override {
    log.push_back({kernel, bytes});
    api().push_external(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, log.size());  // 1 + index
  }
  void on_end() override {
    uint64_t last = 0;
    api().pop_external(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last);
  }
};

KernelTrace::KernelTrace() : observer_(std::make_unique<Observer>()) {}

KernelTrace::~KernelTrace() {
  if (!running_) return;
  try {
    stop();
  } catch (...) {  // a destructor does not throw; the trace is abandoned
  }
}

void KernelTrace::start() {
  DSV4_CHECK(load(), "CUPTI is not loaded");
  DSV4_CHECK(!running_, "KernelTrace already running");
  Api& a = api();
  if (!a.callbacks_registered) {
    check(a.register_callbacks(buffer_requested, buffer_completed),
          "cuptiActivityRegisterCallbacks");
    a.callbacks_registered = true;
  }
  {
    Collector& c = collector();
    std::lock_guard<std::mutex> lock(c.mu);
    c.kernels.clear();
    c.external.clear();
    c.dropped = 0;
  }
  check(a.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityEnable(CONCURRENT_KERNEL)");
  running_ = true;
}

void KernelTrace::set_correlation(bool on) {
  DSV4_CHECK(running_, "KernelTrace::set_correlation before start()");
  if (on == correlating_) return;
  Api& a = api();
  if (on) {
    observer_->log.clear();
    // External correlation records are emitted for API records: the runtime API kind is
    // needed, the driver one covers kernels launched through the driver API.
    check(a.enable(CUPTI_ACTIVITY_KIND_RUNTIME), "cuptiActivityEnable(RUNTIME)");
    (void)a.enable(CUPTI_ACTIVITY_KIND_DRIVER);
    check(a.enable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION),
          "cuptiActivityEnable(EXTERNAL_CORRELATION)");
    prof::set_launch_observer(observer_.get());
  } else {
    prof::set_launch_observer(nullptr);
    (void)a.disable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION);
    (void)a.disable(CUPTI_ACTIVITY_KIND_DRIVER);
    (void)a.disable(CUPTI_ACTIVITY_KIND_RUNTIME);
  }
  correlating_ = on;
}

std::vector<prof::KernelRecord> KernelTrace::take(int device) {
  DSV4_CHECK(running_, "KernelTrace::take before start()");
  CUDA_CHECK(cudaDeviceSynchronize());
  check(api().flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
  std::vector<prof::KernelRecord> all, out;
  std::map<uint32_t, uint64_t> external;
  {
    Collector& c = collector();
    std::lock_guard<std::mutex> lock(c.mu);
    all.swap(c.kernels);
    external = c.external;  // kept: a kernel's record may come in a later buffer than its API's
  }
  for (auto& r : all) {
    if (device >= 0 && r.device != static_cast<uint32_t>(device)) continue;
    if (const auto it = external.find(r.correlation); it != external.end()) r.launch = it->second;
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<prof::KernelRecord> KernelTrace::stop(int device) {
  set_correlation(false);
  std::vector<prof::KernelRecord> out = take(device);
  check(api().disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL),
        "cuptiActivityDisable(CONCURRENT_KERNEL)");
  running_ = false;
  return out;
}

const std::vector<prof::LaunchEntry>& KernelTrace::launches() const {
  return observer_->log;
}

int64_t KernelTrace::dropped_records() const {
  Collector& c = collector();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.dropped;
}

#else  // no CUPTI headers at build time

struct KernelTrace::Observer {
  std::vector<prof::LaunchEntry> log;
};

bool load(std::string* why) {
  if (why != nullptr) *why = "built without cupti_activity.h";
  return false;
}
std::string describe() {
  return {};
}
KernelTrace::KernelTrace() : observer_(std::make_unique<Observer>()) {}
KernelTrace::~KernelTrace() = default;
void KernelTrace::start() {
  DSV4_CHECK(false, "built without CUPTI headers");
}
void KernelTrace::set_correlation(bool) {}
std::vector<prof::KernelRecord> KernelTrace::take(int) {
  return {};
}
std::vector<prof::KernelRecord> KernelTrace::stop(int) {
  return {};
}
const std::vector<prof::LaunchEntry>& KernelTrace::launches() const {
  return observer_->log;
}
int64_t KernelTrace::dropped_records() const {
  return 0;
}

#endif

}  // namespace dsv4::gpu::cupti
