/* cpus.h - how many cores a process may use, and how a job's tasks share them.
 *
 * The thread policy (docs/distributed.md, "Threads"): a process counts the cores it may run on (its
 * affinity mask, bounded by a cgroup CPU quota), a ps uses one BLAS thread (it runs no
 * matrix products), and each training task on a host gets an equal share of that host's
 * cores (the job's tasks on a host are counted from TF_CONFIG), unless --threads /
 * PSFLOW_THREADS says how many.
 */
#ifndef PSFLOW_CPUS_H
#define PSFLOW_CPUS_H

/* The cores this process may run on: sched_getaffinity's count, at most the cgroup CPU
 * quota rounded up (cgroup v2 cpu.max or v1 cpu.cfs_quota_us / cpu.cfs_period_us); >= 1. */
int pf_cpus_available(void);

/* A cgroup v2 cpu.max line ("<quota> <period>", or "max <period>" for none) as whole cores,
 * rounded up; 0 when it sets no limit or does not parse. */
int pf_cpus_quota(const char *cpu_max);

/* Each of `tasks` tasks' share of `cores`: cores / tasks, at least 1. */
int pf_cpus_share(int cores, int tasks);

#endif
