// Issue 31: what the nvmlInit probe costs on a real driver. Times, N times each: nvmlInit_v2 + nvmlShutdown in this
// process, the same in a forked child answering through a pipe (the first probe's way), a bare fork, and, given the
// wattscope binary, wattscope's own probe: a fresh wattscope started with posix_spawn that loads, inits and answers
// on fd 3 (sources/init_probe.cpp since the fork's hang under ASan).
// Build: cc -O2 -o /tmp/probe_cost bench/nvml_init_probe_cost.c -ldl
// Run:   /tmp/probe_cost [N [path/to/wattscope]]   (BENCH_NVML_LIB: the library, default libnvidia-ml.so.1)
#include <dlfcn.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef int (*fn_t)(void);

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

extern char** environ;

static const char* lib_path(void) {
  const char* p = getenv("BENCH_NVML_LIB");
  return p && *p ? p : "libnvidia-ml.so.1";
}

static int init_shutdown(void) {
  void* h = dlopen(lib_path(), RTLD_NOW | RTLD_LOCAL);
  if (!h) return -1;
  fn_t init = (fn_t)dlsym(h, "nvmlInit_v2");
  fn_t shut = (fn_t)dlsym(h, "nvmlShutdown");
  int rc = init ? init() : -2;
  if (rc == 0 && shut) shut();
  return rc;
}

static double probe(int* rc_out) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  const double t0 = now_ms();
  pid_t pid = fork();
  if (pid == 0) {
    int rc = init_shutdown();
    if (write(fds[1], &rc, sizeof rc) != sizeof rc) _exit(1);
    _exit(0);
  }
  close(fds[1]);
  int rc = -3;
  if (read(fds[0], &rc, sizeof rc) != sizeof rc) rc = -4;
  close(fds[0]);
  waitpid(pid, NULL, 0);
  *rc_out = rc;
  return now_ms() - t0;
}

// wattscope's probe: the command line sources/init_probe.cpp gives its child, answered on fd 3 as {kind, value}.
static double spawn_probe(const char* wattscope, int* rc_out) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  char ppid[32];
  snprintf(ppid, sizeof ppid, "%d", (int)getpid());
  char* argv[] = {"wattscope (vendor init probe)",
                  "--wattscope-init-probe",
                  ppid,
                  "nvmlShutdown",
                  "1",
                  "nvmlInit_v2",
                  (char*)lib_path(),
                  NULL};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 3);
  const double t0 = now_ms();
  pid_t pid;
  if (posix_spawn(&pid, wattscope, &fa, NULL, argv, environ) != 0) return -1;
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  int answer[2] = {-1, -3};
  if (read(fds[0], answer, sizeof answer) != sizeof answer) answer[1] = -4;
  close(fds[0]);
  waitpid(pid, NULL, 0);
  *rc_out = answer[0] == 0 ? answer[1] : -5;
  return now_ms() - t0;
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 5;
  const char* wattscope = argc > 2 ? argv[2] : NULL;
  for (int i = 0; i < n; ++i) {
    if (wattscope) {
      int src = 0;
      const double sp = spawn_probe(wattscope, &src);
      printf("round %d: wattscope's probe (spawned) %.1f ms (rc %d) | ", i, sp, src);
    }
    int rc = 0;
    const double p = probe(&rc);
    double t0 = now_ms();
    const int in_rc = init_shutdown();
    const double in_ms = now_ms() - t0;
    t0 = now_ms();
    pid_t pid = fork();
    if (pid == 0) _exit(0);
    waitpid(pid, NULL, 0);
    const double fork_ms = now_ms() - t0;
    printf("round %d: probe child %.1f ms (rc %d) | in-process init+shutdown %.1f ms (rc %d) | bare fork %.2f ms\n", i,
           p, rc, in_ms, in_rc, fork_ms);
  }
  return 0;
}
