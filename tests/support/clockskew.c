/*
 * clockskew: a preload library that runs one process's clocks fast or jumps
 * its wall clock, for the clock-fault scenarios of tests/chaos.
 *
 * Why not libfaketime: Debian's libfaketime 0.9.10 deadlocks at start inside
 * Debian's redis-server, whose jemalloc reads the clock while it holds its
 * lock; libfaketime's lazy set-up then allocates (a failed dlvsym, then
 * sem_open) and waits on that lock forever. This file does only what the
 * scenarios need, without allocating:
 *
 *   CLOCKSKEW_RATE_PPM   parts per million the clocks run fast (20000: 2%)
 *   CLOCKSKEW_OFFSET_FILE  a file holding a wall-clock offset in ms (an
 *                        integer, may be negative), re-read every 10 ms
 *
 * Faked: clock_gettime (REALTIME, MONOTONIC, BOOTTIME and their variants),
 * gettimeofday and time. Each clock runs `rate` fast from the moment the
 * process first reads it; the offset moves the wall clock only (a step,
 * as NTP makes), never the monotonic ones.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);

static clock_gettime_fn real_clock_gettime;
static int64_t rate_ppm;
/* A copy: redis-server rewrites its environment for its process title, so
   the pointer getenv returns does not stay valid. */
static char offset_file[4096];
static int64_t base_ns[16]; /* per clock id: the first reading, 0 = none */
static volatile int64_t offset_ns;
static volatile int64_t offset_checked_ns;

static int64_t parse_int(const char *s) {
    int64_t sign = 1, n = 0;
    if (!s) return 0;
    while (*s == ' ' || *s == '\n') s++;
    if (*s == '-') { sign = -1; s++; } else if (*s == '+') s++;
    while (*s >= '0' && *s <= '9') n = n * 10 + (*s++ - '0');
    return sign * n;
}

static void init(void) {
    if (real_clock_gettime) return;
    rate_ppm = parse_int(getenv("CLOCKSKEW_RATE_PPM"));
    const char *file = getenv("CLOCKSKEW_OFFSET_FILE");
    for (size_t i = 0; file && file[i] && i + 1 < sizeof offset_file; i++)
        offset_file[i] = file[i];
    real_clock_gettime = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
}

static int64_t to_ns(const struct timespec *ts) {
    return (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
}

static void from_ns(int64_t ns, struct timespec *ts) {
    ts->tv_sec = ns / 1000000000;
    ts->tv_nsec = ns % 1000000000;
}

/* The wall-clock offset, re-read from its file at most every 10 ms. */
static int64_t wall_offset(int64_t mono_now) {
    if (!offset_file[0]) return 0;
    if (mono_now - offset_checked_ns > 10000000) {
        char buf[32] = {0};
        int fd = open(offset_file, O_RDONLY);
        if (fd >= 0) {
            ssize_t n = read(fd, buf, sizeof buf - 1);
            close(fd);
            if (n > 0) offset_ns = parse_int(buf) * 1000000;
        }
        offset_checked_ns = mono_now;
    }
    return offset_ns;
}

static int is_wall(clockid_t id) {
    return id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    init();
    int rc = real_clock_gettime(id, ts);
    if (rc != 0 || id < 0 || id >= 16) return rc;
    int64_t now = to_ns(ts);
    if (base_ns[id] == 0) base_ns[id] = now;
    int64_t faked = now + (now - base_ns[id]) / 1000 * rate_ppm / 1000;
    if (is_wall(id)) {
        struct timespec mono;
        real_clock_gettime(CLOCK_MONOTONIC, &mono);
        faked += wall_offset(to_ns(&mono));
    }
    from_ns(faked, ts);
    return 0;
}

int gettimeofday(struct timeval *tv, void *tz) {
    (void)tz;
    struct timespec ts;
    int rc = clock_gettime(CLOCK_REALTIME, &ts);
    if (rc == 0) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return rc;
}

time_t time(time_t *t) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (t) *t = ts.tv_sec;
    return ts.tv_sec;
}
