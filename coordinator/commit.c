/* commit.c - the coordinator's commit step: what a change to the cluster wrote and queued is
 * persisted in one SQLite transaction, then its events are published (the in-memory ring of
 * recent events, the stream threads woken); and the wall clock the handlers read.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "psflow/clock.h"
#include "psflow/mem.h"
#include "coordinator/coordinator_internal.h"

double coord_now(void) {
    return pf_clock_wall();
}

static void ring_push(coord_server *s, int64_t id, const coord_event *e, char *data) {
    coord_ring_entry *r = &s->ring[(id - 1) % COORD_RING_SIZE];
    if (r->id)
        pf_free(r->data);
    r->id = id;
    snprintf(r->kind, sizeof r->kind, "%s", e->kind);
    snprintf(r->job, sizeof r->job, "%s", e->job);
    r->data = data;
    s->ring_last = id;
    if (s->ring_last - s->ring_first + 1 > COORD_RING_SIZE)
        s->ring_first = s->ring_last - COORD_RING_SIZE + 1;
}

void coord_ring_clear(coord_server *s) {
    for (int i = 0; i < COORD_RING_SIZE; i++) {
        pf_free(s->ring[i].data);
        s->ring[i].data = NULL;
        s->ring[i].id = 0;
    }
}

static void reload(coord_server *s, double now) {
    coord_cluster_deinit(&s->cluster);
    coord_cluster_init(&s->cluster, s->o.lease_seconds);
    s->cluster.preempt_grace = s->o.preempt_grace_seconds;
    pf_error err;
    if (coord_store_load(s->store, &s->cluster, now, &err) != PF_OK)
        fprintf(stderr, "psflow coordinator: reloading the state failed: %s\n", err.message);
}

int coord_commit(coord_server *s, double now, int (*extra)(coord_store *st, void *ctx), void *ctx) {
    int n_events;
    coord_event *events = coord_cluster_take_events(&s->cluster, &n_events);
    int64_t *ids = n_events ? pf_calloc((size_t)n_events, sizeof *ids) : NULL;
    char **texts = n_events ? pf_calloc((size_t)n_events, sizeof *texts) : NULL;
    int ok = (!n_events || (ids && texts)) && coord_store_begin(s->store) == PF_OK;
    int began = ok;
    for (int i = 0; ok && i < n_events; i++) {
        /* An event whose data cannot be built (a string that is not UTF-8) is not published;
         * failing to print built data is running out of memory, and fails the commit. */
        json_t *data = coord_event_json(&events[i]);
        if (!data)
            continue;
        texts[i] = json_dumps(data, JSON_COMPACT);
        json_decref(data);
        ok = texts[i] && coord_store_add_event(s->store, events[i].kind, events[i].job, texts[i],
                                               now, &ids[i]) == PF_OK;
    }
    ok = ok && coord_store_save(s->store, &s->cluster) == PF_OK;
    ok = ok && (!extra || extra(s->store, ctx) == 0);
    ok = ok && coord_store_commit(s->store) == PF_OK;
    if (ok) {
        coord_cluster_reap(&s->cluster);
        int published = 0;
        for (int i = 0; i < n_events; i++) {
            published += texts[i] != NULL;
            char *copy = texts[i] ? pf_strdup(texts[i]) : NULL;
            if (copy)
                ring_push(s, ids[i], &events[i], copy);
        }
        if (published)
            pthread_cond_broadcast(&s->changed);
    } else {
        if (began)
            coord_store_rollback(s->store);
        fprintf(stderr, "psflow coordinator: writing the state failed; reloading it\n");
        reload(s, now);
    }
    for (int i = 0; i < n_events; i++) {
        coord_event_deinit(&events[i]);
        if (texts)
            free(texts[i]);
    }
    pf_free(events);
    pf_free(ids);
    pf_free(texts);
    return ok ? 0 : -1;
}
