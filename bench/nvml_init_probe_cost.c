// Issue 31: what the nvmlInit probe costs on a real driver. Times, N times each: nvmlInit_v2 + nvmlShutdown in this
// process, the same in a forked child answering through a pipe (what sources/init_probe.cpp does), and a bare fork.
// Build: cc -O2 -o /tmp/probe_cost bench/nvml_init_probe_cost.c -ldl ; run: /tmp/probe_cost [N]
#include <dlfcn.h>
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

static int init_shutdown(void) {
  void* h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
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

int main(int argc, char** argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 5;
  for (int i = 0; i < n; ++i) {
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
