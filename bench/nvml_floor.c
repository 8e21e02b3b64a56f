/* The floor: the least a GPU monitor can cost. It makes the NVML calls `wattscope record` makes, for the same GPUs at
 * the same interval, and nothing else: no storage, no CPU readings, no threads. bench/overhead.py runs it beside
 * wattscope and divides.
 *
 *   nvml_floor INTERVAL_MS DURATION_S        (library from WATTSCOPE_NVML_LIBRARY, else libnvidia-ml.so.1)
 *
 * Per tick and GPU, as wattscope (check with the fake's WATTSCOPE_FAKE_NVML_CALLS): field values (instantaneous and
 * average power, memory temperature), total energy, utilisation, memory (v2), GPU temperature (TemperatureV where
 * the library has it), SM, graphics, memory and video clocks, PCIe link width, fan, performance state, enforced power limit, clock-event reasons, encoder and
 * decoder utilisation; a call that answers NOT_SUPPORTED once is not made again, as in wattscope. Once at the start:
 * the maximum PCIe link width. Once a second: PCIe TX and RX throughput (wattscope's slow reader). Exits 0 after
 * DURATION_S or at SIGTERM/SIGINT. Written in C on purpose: it is the baseline, so it must carry no runtime of its own. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int ret_t;
typedef void* dev_t_;
struct util { unsigned gpu, mem; };
struct mem2 { unsigned version; unsigned long long total, reserved, free, used; };
union value { double d; unsigned u; unsigned long ul; unsigned long long ull; long long sll; int si; unsigned short us; };
struct field { unsigned id, scope; long long ts, latency; int type; ret_t ret; union value v; };
struct temp_v { unsigned version; int sensor; int temperature; };

enum { NOT_SUPPORTED = 3, CALLS = 16, MAX_DEV = 64 };

static volatile sig_atomic_t stop_flag;
static void on_signal(int sig) { (void)sig; stop_flag = 1; }

static void* sym(void* lib, const char* a, const char* b) {
  void* p = dlsym(lib, a);
  if (!p && b) p = dlsym(lib, b);
  return p;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: nvml_floor INTERVAL_MS DURATION_S\n");
    return 2;
  }
  const long interval_ms = atol(argv[1]);
  const double duration_s = atof(argv[2]);
  if (interval_ms <= 0 || duration_s <= 0) {
    fprintf(stderr, "nvml_floor: INTERVAL_MS and DURATION_S must be positive\n");
    return 2;
  }
  const char* path = getenv("WATTSCOPE_NVML_LIBRARY");
  void* lib = dlopen(path ? path : "libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "nvml_floor: %s\n", dlerror());
    return 1;
  }
  ret_t (*init)(void) = (ret_t(*)(void))sym(lib, "nvmlInit_v2", "nvmlInit");
  ret_t (*shutdown)(void) = (ret_t(*)(void))sym(lib, "nvmlShutdown", NULL);
  ret_t (*count)(unsigned*) = (ret_t(*)(unsigned*))sym(lib, "nvmlDeviceGetCount_v2", "nvmlDeviceGetCount");
  ret_t (*by_index)(unsigned, dev_t_*) =
      (ret_t(*)(unsigned, dev_t_*))sym(lib, "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex");
  ret_t (*fields)(dev_t_, int, struct field*) = (ret_t(*)(dev_t_, int, struct field*))sym(lib, "nvmlDeviceGetFieldValues", NULL);
  ret_t (*energy)(dev_t_, unsigned long long*) =
      (ret_t(*)(dev_t_, unsigned long long*))sym(lib, "nvmlDeviceGetTotalEnergyConsumption", NULL);
  ret_t (*util)(dev_t_, struct util*) = (ret_t(*)(dev_t_, struct util*))sym(lib, "nvmlDeviceGetUtilizationRates", NULL);
  ret_t (*memory)(dev_t_, struct mem2*) = (ret_t(*)(dev_t_, struct mem2*))sym(lib, "nvmlDeviceGetMemoryInfo_v2", NULL);
  ret_t (*temp)(dev_t_, int, unsigned*) = (ret_t(*)(dev_t_, int, unsigned*))sym(lib, "nvmlDeviceGetTemperature", NULL);
  ret_t (*temp_v)(dev_t_, struct temp_v*) = (ret_t(*)(dev_t_, struct temp_v*))sym(lib, "nvmlDeviceGetTemperatureV", NULL);
  ret_t (*clock)(dev_t_, int, unsigned*) = (ret_t(*)(dev_t_, int, unsigned*))sym(lib, "nvmlDeviceGetClockInfo", NULL);
  ret_t (*width)(dev_t_, unsigned*) = (ret_t(*)(dev_t_, unsigned*))sym(lib, "nvmlDeviceGetCurrPcieLinkWidth", NULL);
  ret_t (*width_max)(dev_t_, unsigned*) = (ret_t(*)(dev_t_, unsigned*))sym(lib, "nvmlDeviceGetMaxPcieLinkWidth", NULL);
  ret_t (*fan)(dev_t_, unsigned*) = (ret_t(*)(dev_t_, unsigned*))sym(lib, "nvmlDeviceGetFanSpeed", NULL);
  ret_t (*pstate)(dev_t_, int*) = (ret_t(*)(dev_t_, int*))sym(lib, "nvmlDeviceGetPerformanceState", NULL);
  ret_t (*limit)(dev_t_, unsigned*) = (ret_t(*)(dev_t_, unsigned*))sym(lib, "nvmlDeviceGetEnforcedPowerLimit", NULL);
  ret_t (*events)(dev_t_, unsigned long long*) = (ret_t(*)(dev_t_, unsigned long long*))sym(
      lib, "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons");
  ret_t (*enc)(dev_t_, unsigned*, unsigned*) =
      (ret_t(*)(dev_t_, unsigned*, unsigned*))sym(lib, "nvmlDeviceGetEncoderUtilization", NULL);
  ret_t (*dec)(dev_t_, unsigned*, unsigned*) =
      (ret_t(*)(dev_t_, unsigned*, unsigned*))sym(lib, "nvmlDeviceGetDecoderUtilization", NULL);
  ret_t (*pcie)(dev_t_, int, unsigned*) = (ret_t(*)(dev_t_, int, unsigned*))sym(lib, "nvmlDeviceGetPcieThroughput", NULL);
  if (!init || !count || !by_index || init() != 0) {
    fprintf(stderr, "nvml_floor: NVML did not initialise\n");
    return 1;
  }
  unsigned n = 0;
  count(&n);
  if (n > MAX_DEV) n = MAX_DEV;
  dev_t_ dev[MAX_DEV];
  unsigned char off[MAX_DEV][CALLS];
  memset(off, 0, sizeof off);
  for (unsigned i = 0; i < n; ++i) {
    by_index(i, &dev[i]);
    unsigned w = 0;
    if (width_max) width_max(dev[i], &w);
  }
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);

  struct timespec next, start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  next = start;
  const long long ticks = (long long)(duration_s * 1000 / interval_ms);
  const long long per_second = interval_ms >= 1000 ? 1 : 1000 / interval_ms;
  for (long long tick = 0; tick <= ticks && !stop_flag; ++tick) {
    for (unsigned i = 0; i < n; ++i) {
      unsigned u = 0, period = 0;
      unsigned long long ull = 0;
      int si = 0;
      ret_t r[CALLS];
      for (int c = 0; c < CALLS; ++c) r[c] = 0;
      struct field f[3];
      memset(f, 0, sizeof f);
      f[0].id = 186; /* instantaneous power */
      f[1].id = 185; /* 1 s average power */
      f[2].id = 82;  /* memory temperature */
      struct util ut;
      struct mem2 m;
      memset(&m, 0, sizeof m);
      m.version = (unsigned)sizeof m | (2u << 24);
      if (!off[i][0] && fields) r[0] = fields(dev[i], 3, f);
      if (!off[i][1] && energy) r[1] = energy(dev[i], &ull);
      if (!off[i][2] && util) r[2] = util(dev[i], &ut);
      if (!off[i][3] && memory) r[3] = memory(dev[i], &m);
      if (!off[i][4] && temp_v) {
        struct temp_v t = {(unsigned)sizeof t | (1u << 24), 0, 0};
        r[4] = temp_v(dev[i], &t);
      } else if (!off[i][4] && temp) {
        r[4] = temp(dev[i], 0, &u);
      }
      if (!off[i][5] && clock) r[5] = clock(dev[i], 1, &u);
      if (!off[i][6] && clock) r[6] = clock(dev[i], 0, &u);
      if (!off[i][7] && clock) r[7] = clock(dev[i], 2, &u);
      if (!off[i][8] && width) r[8] = width(dev[i], &u);
      if (!off[i][9] && fan) r[9] = fan(dev[i], &u);
      if (!off[i][10] && pstate) r[10] = pstate(dev[i], &si);
      if (!off[i][11] && limit) r[11] = limit(dev[i], &u);
      if (!off[i][12] && events) r[12] = events(dev[i], &ull);
      if (!off[i][13] && enc) r[13] = enc(dev[i], &u, &period);
      if (!off[i][14] && dec) r[14] = dec(dev[i], &u, &period);
      if (!off[i][15] && clock) r[15] = clock(dev[i], 3, &u);
      for (int c = 0; c < CALLS; ++c)
        if (r[c] == NOT_SUPPORTED) off[i][c] = 1;
      if (pcie && tick % per_second == 0) {
        pcie(dev[i], 0, &u);
        pcie(dev[i], 1, &u);
      }
    }
    if (tick == ticks) break; /* the last tick: no sleep after it */
    next.tv_nsec += (interval_ms % 1000) * 1000000L;
    next.tv_sec += interval_ms / 1000 + next.tv_nsec / 1000000000L;
    next.tv_nsec %= 1000000000L;
    while (!stop_flag && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) != 0) {
    }
  }
  if (shutdown) shutdown();
  return 0;
}
