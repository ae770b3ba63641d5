/* cluster_serving.h - a job's serving tasks in the state machine: psflow serve run by worker
 * agents for a job with a `serving` section (docs/serving.md, "Managed"). Pure, like
 * cluster.h: the caller serialises the calls and persists what is marked dirty.
 */
#ifndef PSFLOW_COORDINATOR_CLUSTER_SERVING_H
#define PSFLOW_COORDINATOR_CLUSTER_SERVING_H

#include <stdbool.h>

#include "coordinator/cluster.h"

/* Builds j's serving tasks for its spec (all Pending, unassigned). PF_ERR_NOMEM. */
pf_status coord_serving_make(coord_job *j);

/* Gives Pending serving tasks of admitted jobs idle worker agents, at most `spare` of them
 * (the idle worker agents no waiting job holds), in job order. */
void coord_serving_place(coord_cluster *c, int spare, double now);

/* Whether n is assigned a serving task. */
bool coord_serving_node(const coord_node *n);

/* Applies the heartbeat report of n, which runs a serving task: its endpoint and figures,
 * Running once it listens, Failed (and its agent freed) when it ended. */
void coord_serving_report(coord_cluster *c, coord_node *n, const coord_report *r, double now);

/* n's serving task lost its agent (`why`: "lost: ...", for the log): it goes back to Pending
 * and to another agent. Call before clearing n's assignment; nothing when n serves none. */
void coord_serving_node_gone(coord_cluster *c, coord_node *n, const char *why, double now);

/* A replacement for j's training task TYPE INDEX finds no idle worker agent: the agent of
 * j's highest-numbered placed server is taken from it (the server goes back to Pending, for
 * the next spare agent) and returned, to be given the training task; NULL when j has none. */
coord_node *coord_serving_yield(coord_cluster *c, coord_job *j, const char *type, int index,
                                double now);

/* After a store reload: an agent assigned a serving task whose slot does not name it is
 * freed, and a slot naming an agent that does not serve it goes back to Pending. */
void coord_serving_reconcile(coord_cluster *c);

/* j failed or was deleted: its serving tasks are Stopped and their agents freed. */
void coord_serving_stop(coord_cluster *c, coord_job *j, double now);

#endif
