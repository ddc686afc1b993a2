/* How far apart the process's first two CPUs are: the round trip of a cache line between them (one
   thread on each, pinned, passing a counter back and forth), and the time to read 256 KB the other
   CPU has just written against 256 KB this CPU wrote. Printed as one line of three numbers (ns, us,
   us) for benchmarks/core_distance.py, each the fastest of many tries (on a loaded machine most
   tries meet a preempted thread); "unknown" where there are not two CPUs to pin to.

   On this project's 2-vCPU VM the figures have two states that the host chooses and changes from
   minute to minute: near (the other CPU's 256 KB read in 3.5-3.7 us against 3.3 for one's own; a
   mean round trip of 79-122 ns) and far (9.6-10.3 us; 267-275 ns the fastest batch's round trip,
   315-500 the mean): in the far state every activation that passes from one thread to the other
   costs 3x, and two-thread figures mean something else. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#define BATCHES 400 /* of round trips: the fastest batch is the one no preemption interrupted */
#define BATCH 50
#define ROUND_TRIPS (BATCHES * BATCH)
#define READS 50
#define FLOATS 65536 /* 256 KB */

static _Alignas(64) atomic_int ball;
static _Alignas(64) atomic_int phase;
static float buffer[FLOATS];
static int cpus[2];

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static int pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void *other(void *arg)
{
    (void)arg;
    if (pin(cpus[1]) != 0)
        return NULL;
    for (int i = 0; i < ROUND_TRIPS; ++i) {
        while (atomic_load_explicit(&ball, memory_order_acquire) != 2 * i + 1)
            ;
        atomic_store_explicit(&ball, 2 * i + 2, memory_order_release);
    }
    for (int r = 0; r < READS; ++r) {
        while (atomic_load(&phase) != 2 * r + 1)
            ;
        for (int i = 0; i < FLOATS; ++i)
            buffer[i] = (float)(i + r);
        atomic_store(&phase, 2 * r + 2);
    }
    return NULL;
}

/* The fastest read of `buffer`, one load per cache line (us). */
static double read_us(float *sum)
{
    const double start = now_ns();
    float total = 0;
    for (int i = 0; i < FLOATS; i += 16)
        total += buffer[i];
    *sum += total;
    return (now_ns() - start) / 1e3;
}

int main(void)
{
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0 || CPU_COUNT(&allowed) < 2) {
        puts("unknown");
        return 0;
    }
    for (int cpu = 0, found = 0; found < 2; ++cpu)
        if (CPU_ISSET(cpu, &allowed))
            cpus[found++] = cpu;
    pthread_t thread;
    if (pin(cpus[0]) != 0 || pthread_create(&thread, NULL, other, NULL) != 0) {
        puts("unknown");
        return 0;
    }
    double round_trip = 1e30;
    for (int b = 0; b < BATCHES; ++b) {
        const double start = now_ns();
        for (int i = b * BATCH; i < (b + 1) * BATCH; ++i) {
            atomic_store_explicit(&ball, 2 * i + 1, memory_order_release);
            while (atomic_load_explicit(&ball, memory_order_acquire) != 2 * i + 2)
                ;
        }
        const double batch = (now_ns() - start) / BATCH;
        round_trip = batch < round_trip ? batch : round_trip;
    }
    double theirs = 1e30, ours = 1e30;
    float sum = 0;
    for (int r = 0; r < READS; ++r) {
        atomic_store(&phase, 2 * r + 1);
        while (atomic_load(&phase) != 2 * r + 2)
            ;
        const double read_theirs = read_us(&sum);
        theirs = read_theirs < theirs ? read_theirs : theirs;
        for (int i = 0; i < FLOATS; ++i)
            buffer[i] = (float)i;
        const double read_ours = read_us(&sum);
        ours = read_ours < ours ? read_ours : ours;
    }
    pthread_join(thread, NULL);
    printf("%.0f %.1f %.1f %d\n", round_trip, theirs, ours, sum > 0);
    return 0;
}
