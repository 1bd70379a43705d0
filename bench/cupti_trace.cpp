// A minimal CUDA activity tracer (what nsys's timeline shows, for hosts without nsys): loaded into any
// CUDA program by the driver through CUDA_INJECTION64_PATH, it records every kernel, memset and memcpy
// (device start/end) and every CUDA runtime call (host start/end) with CUPTI's activity API, on one
// clock, and writes them as CSV to $MLACONF_TRACE_OUT (default mlaconf_trace.csv) when the program
// exits. bench/trace_summary.py turns the CSV into busy time, gaps and launch counts per decode step.
//
// Built on the GPU host by bench/gpu_trace.sh (the CUPTI headers ship with the CUDA toolkit there; the
// record structs are versioned, so the script passes the newest ones its header defines):
//   g++ -shared -fPIC -O2 -DKERNEL_REC=CUpti_ActivityKernelN -DMEMSET_REC=... -DMEMCPY_REC=... \
//       -I$CUDA/include -I$CUDA/extras/CUPTI/include bench/cupti_trace.cpp -L$CUDA/extras/CUPTI/lib64 -lcupti
//
// CSV columns: kind (kernel|memset|memcpy|api), name, start_ns, end_ns, stream, correlation, extra
// (grid for kernels, bytes for copies and memsets, thread for runtime calls).
#include <cupti.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace {

std::mutex g_mu;
FILE* g_out = nullptr;

void CUPTIAPI buffer_requested(uint8_t** buf, size_t* size, size_t* max_records) {
  *size = size_t(16) << 20;
  *buf = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
  *max_records = 0;
}

// Kernel names hold commas (template arguments): quoted, with quotes doubled.
std::string csv_quote(const char* s) {
  std::string o = "\"";
  for (const char* p = s ? s : ""; *p; ++p) o += (*p == '"') ? std::string("\"\"") : std::string(1, *p);
  return o + "\"";
}

void write_record(CUpti_Activity* r) {
  switch (r->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      auto* k = reinterpret_cast<KERNEL_REC*>(r);
      std::fprintf(g_out, "kernel,%s,%llu,%llu,%u,%u,%dx%dx%d\n", csv_quote(k->name).c_str(), (unsigned long long)k->start,
                   (unsigned long long)k->end, k->streamId, k->correlationId, k->gridX, k->gridY, k->gridZ);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      auto* m = reinterpret_cast<MEMSET_REC*>(r);
      std::fprintf(g_out, "memset,memset,%llu,%llu,%u,%u,%llu\n", (unsigned long long)m->start, (unsigned long long)m->end,
                   m->streamId, m->correlationId, (unsigned long long)m->bytes);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      auto* m = reinterpret_cast<MEMCPY_REC*>(r);
      std::fprintf(g_out, "memcpy,memcpy_kind%d,%llu,%llu,%u,%u,%llu\n", (int)m->copyKind, (unsigned long long)m->start,
                   (unsigned long long)m->end, m->streamId, m->correlationId, (unsigned long long)m->bytes);
      break;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME: {
      auto* a = reinterpret_cast<CUpti_ActivityAPI*>(r);
      const char* name = nullptr;
      if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, a->cbid, &name) != CUPTI_SUCCESS) name = "?";
      std::fprintf(g_out, "api,%s,%llu,%llu,0,%u,%u\n", name, (unsigned long long)a->start, (unsigned long long)a->end,
                   a->correlationId, a->threadId);
      break;
    }
    default:
      break;
  }
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buf, size_t, size_t valid) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    CUpti_Activity* r = nullptr;
    while (g_out && cuptiActivityGetNextRecord(buf, valid, &r) == CUPTI_SUCCESS) write_record(r);
  }
  std::free(buf);
}

void finish() {
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_out) std::fclose(g_out);
  g_out = nullptr;
}

}  // namespace

extern "C" int InitializeInjection(void) {
  const char* path = std::getenv("MLACONF_TRACE_OUT");
  g_out = std::fopen(path ? path : "mlaconf_trace.csv", "w");
  if (!g_out) return 0;
  std::fprintf(g_out, "kind,name,start_ns,end_ns,stream,correlation,extra\n");
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS) return 0;
  for (CUpti_ActivityKind k : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_MEMCPY,
                               CUPTI_ACTIVITY_KIND_RUNTIME})
    cuptiActivityEnable(k);
  std::atexit(finish);
  return 1;
}
