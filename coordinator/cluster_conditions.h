/* cluster_conditions.h - a job's phase and conditions, shared by the files of the state
 * machine (cluster.c, cluster_admit.c, cluster_schedule.c, cluster_reports.c); the names of
 * phases and task states and coord_job_finished are in cluster.h. Same rules as cluster.h:
 * pure, `now` in Unix seconds, the caller holds the coordinator's lock.
 */
#ifndef PSFLOW_COORDINATOR_CLUSTER_CONDITIONS_H
#define PSFLOW_COORDINATOR_CLUSTER_CONDITIONS_H

#include <stdint.h>

#include "coordinator/cluster.h"

/* The condition of this type, or NULL when the job has none. */
coord_condition *coord_job_find_condition(coord_job *j, const char *type);
/* Sets the condition of this type (added when the job has none; dropped when it has
 * COORD_MAX_CONDS already); its time changes only when its status or reason does. */
void coord_job_set_condition(coord_job *j, const char *type, const char *status, const char *reason,
                             const char *message, double now);
/* Moves the job to `phase`: its condition becomes True, the other phase conditions that
 * exclude it become False; logs the change with its reason. */
void coord_job_set_phase(coord_cluster *c, coord_job *j, coord_phase phase, const char *reason,
                         const char *message, double now);
/* The job's membership changed (a live scale, a replaced or added task, a gang restart, a
 * rollback): its step rate is measured anew from the next step reported (cluster_rate.h),
 * unknown (NAN) until then. */
void coord_job_restart_rate(coord_job *j, double now);
/* Training goes on from checkpoint `to` (`reached`: a later step already reported after it,
 * or -1): the RolledBack condition and event, with `msg`. */
void coord_job_rolled_back_msg(coord_cluster *c, coord_job *j, const char *reason, const char *msg,
                               int64_t to, int64_t reached, double now);
/* coord_job_rolled_back_msg with a message that names both steps, for a reason and its
 * cause. */
void coord_job_rolled_back(coord_cluster *c, coord_job *j, const char *reason, const char *cause,
                           int64_t from, int64_t to, int64_t reached, double now);

#endif
