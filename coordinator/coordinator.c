/* coordinator.c - the coordinator's lifecycle and its ticker (the commit step is commit.c).
 *
 * DESIGN: one lock around the cluster and the store. A handler applies a change to the
 * in-memory cluster, then coord_commit() writes what changed and the change's events in one
 * SQLite transaction; only then are the events published (the in-memory ring, the stream
 * threads woken) and the reply sent. A ticker runs the time-driven part of the state
 * machine (lease expiry, deadlines, admission) four times a second.
 */
#include <errno.h>
#include <microhttpd.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "psflow/clock.h"
#include "psflow/mem.h"
#include "coordinator/coordinator_internal.h"

static void *tick_main(void *arg) {
    coord_server *s = arg;
    while (!s->stopping) {
        pf_clock_sleep(0.25); /* the ticker's period, not synchronisation */
        pthread_mutex_lock(&s->lock);
        double now = coord_now();
        coord_cluster_tick(&s->cluster, now);
        coord_commit(s, now, NULL, NULL);
        pthread_mutex_unlock(&s->lock);
    }
    return NULL;
}

pf_status coord_server_start(const coord_options *o, coord_server **out, pf_error *err) {
    *out = NULL;
    coord_server *s = pf_calloc(1, sizeof *s);
    if (!s)
        return PF_ERR_NOMEM;
    s->o = *o;
    s->wake[0] = s->wake[1] = -1;
    if (s->o.lease_seconds <= 0)
        s->o.lease_seconds = 10;
    s->token = o->token && *o->token ? pf_strdup(o->token) : NULL;
    s->agent_token = o->agent_token && *o->agent_token ? pf_strdup(o->agent_token) : NULL;
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->stats_lock, NULL);
    pthread_cond_init(&s->changed, NULL);
    coord_cluster_init(&s->cluster, s->o.lease_seconds);
    s->cluster.preempt_grace = s->o.preempt_grace_seconds;
    s->start_time = coord_now();
    pf_status st = coord_limits_resolve(&s->o.limits, s->data_roots, s->data_root_ptrs, err);
    if (st == PF_OK && ((o->token && *o->token && !s->token) ||
                        (o->agent_token && *o->agent_token && !s->agent_token)))
        st = pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory copying the tokens");
    if (st == PF_OK)
        st = coord_store_open(o->db_path, &s->store, err);
    if (st == PF_OK)
        st = coord_dataplane_secret_load(o->db_path, s->dataplane_secret, err);
    if (st == PF_OK)
        st = coord_store_load(s->store, &s->cluster, s->start_time, err);
    if (st != PF_OK) {
        coord_server_destroy(s);
        return st;
    }
    /* Stream ids continue from the database's so a reconnecting client resumes. */
    s->ring_last = coord_store_last_event_id(s->store);
    s->ring_first = s->ring_last + 1; /* empty */
    if (pipe(s->wake) != 0) {
        st = pf_error_set(err, PF_ERR_IO, NULL, "pipe: %s", strerror(errno));
        coord_server_destroy(s);
        return st;
    }
    s->mhd = coord_http_start(s, err);
    if (!s->mhd) {
        coord_server_destroy(s);
        return PF_ERR_IO;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : o->port;
    if (pthread_create(&s->ticker, NULL, tick_main, s) != 0) {
        coord_server_destroy(s);
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "cannot start the ticker thread");
    }
    s->ticker_started = 1;
    *out = s;
    return PF_OK;
}

int coord_server_port(const coord_server *s) {
    return s->port;
}

void coord_server_stop(coord_server *s) {
    s->stopping = 1;
    if (s->wake[1] >= 0) {
        char b = 1;
        ssize_t w = write(s->wake[1], &b, 1); /* async-signal-safe */
        (void)w;
    }
}

void coord_server_wait(coord_server *s) {
    while (!s->stopping) {
        struct pollfd p = {s->wake[0], POLLIN, 0};
        poll(&p, 1, 1000);
    }
}

void coord_server_destroy(coord_server *s) {
    if (!s)
        return;
    s->stopping = 1;
    pthread_mutex_lock(&s->lock);
    pthread_cond_broadcast(&s->changed); /* ends the event streams */
    pthread_mutex_unlock(&s->lock);
    if (s->mhd)
        MHD_stop_daemon(s->mhd);
    pf_http_watch_destroy(s->watch);
    pf_http_hosts_destroy(s->hosts);
    if (s->ticker_started)
        pthread_join(s->ticker, NULL);
    coord_store_close(s->store);
    coord_cluster_deinit(&s->cluster);
    coord_ring_clear(s);
    if (s->wake[0] >= 0)
        close(s->wake[0]);
    if (s->wake[1] >= 0)
        close(s->wake[1]);
    pthread_cond_destroy(&s->changed);
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->stats_lock);
    pf_free(s->counts);
    pf_free(s->token);
    pf_wire_key_clear(s->dataplane_secret, sizeof s->dataplane_secret);
    pf_free(s->agent_token);
    pf_free(s);
}
