/* leases.c - a training task's leased input (see leases.h). */
#include "worker/leases.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "psflow/clock.h"
#include "psflow/mem.h"
#include "psflow/wire.h"

#define LEASES_POLL_SECONDS 0.05 /* between two asks while the queue says WAIT */

void worker_leases_init(worker_leases *l, pf_stream_source *input, worker_link *link,
                        const char *who, int task, double stall_seconds) {
    memset(l, 0, sizeof *l);
    l->stall_seconds = stall_seconds;
    l->input = input;
    l->link = link;
    l->who = who;
    l->task = task;
    l->n_splits = (uint32_t)pf_stream_splits(input);
}

void worker_leases_free(worker_leases *l) {
    pf_free(l->report);
    pf_free(l->per_epoch);
    l->report = NULL;
    l->per_epoch = NULL;
}

/* Counts `n` accepted completions of epoch `epoch`. */
static void count_accepted(worker_leases *l, uint64_t epoch, uint32_t n) {
    l->accepted += n;
    if (epoch >= (uint64_t)l->n_per_epoch) {
        if (epoch >= 1000000)
            return; /* training.epochs' limit: never reached by a queue of this job */
        int want = (int)epoch + 1;
        uint64_t *v = pf_realloc(l->per_epoch, (size_t)want * sizeof *v);
        if (!v)
            return; /* the counts are for the log only */
        memset(v + l->n_per_epoch, 0, (size_t)(want - l->n_per_epoch) * sizeof *v);
        l->per_epoch = v;
        l->n_per_epoch = want;
    }
    l->per_epoch[epoch] += n;
}

/* One LEASE: the reports of the first report's epoch (as many as one message holds), and with
 * want a request for a split, which is added to the input when granted. */
static pf_status ask(worker_leases *l, int want, pf_error *err) {
    uint32_t done[WORKER_LEASES_MAX_BATCH];
    uint32_t n = 0;
    uint64_t epoch = l->n_report > 0 ? l->report[0].epoch : l->epoch;
    for (int i = 0; i < l->n_report; i++)
        if (l->report[i].epoch == epoch && n < WORKER_LEASES_MAX_BATCH)
            done[n++] = l->report[i].split;
    pf_wire_lease req = {epoch, l->n_splits, (uint32_t)want, n, done};
    pf_wire_lease_reply rep;
    pf_status st = worker_link_lease(l->link, &req, &rep, err);
    if (st != PF_OK)
        return st;
    int rest = 0, sent = 0; /* the reports not sent stay, in order */
    for (int i = 0; i < l->n_report; i++)
        if (l->report[i].epoch == epoch && sent < (int)n)
            sent++;
        else
            l->report[rest++] = l->report[i];
    l->n_report = rest;
    count_accepted(l, epoch, rep.accepted);
    if (rep.accepted > 0) /* one line per split or so: the record of what this task read */
        fprintf(stderr,
                "psflow %s %d: %" PRIu32 " split(s) of epoch %" PRIu64
                " recorded done by ps 0 (%" PRIu64 " by this task in that epoch)\n",
                l->who, l->task, rep.accepted, epoch,
                epoch < (uint64_t)l->n_per_epoch ? l->per_epoch[epoch] : 0);
    if (rep.refused > 0) {
        l->refused += rep.refused;
        fprintf(stderr,
                "psflow %s %d: ps 0 refused %" PRIu32 " of %" PRIu32
                " split completion(s) of epoch %" PRIu64
                " (given back to the queue after a lost connection, or a restarted ps 0): "
                "they are read again\n",
                l->who, l->task, rep.refused, n, epoch);
    }
    l->epoch = rep.epoch;
    l->waiting = rep.state == PF_WIRE_LEASE_WAIT;
    l->ended = rep.state == PF_WIRE_LEASE_END;
    if (rep.state != PF_WIRE_LEASE_GRANTED)
        return PF_OK;
    if (l->granted++ == 0)
        fprintf(stderr,
                "psflow %s %d: leased its first split (split %" PRIu32 " of epoch %" PRIu64
                ", of %" PRIu32 ")\n",
                l->who, l->task, rep.split, rep.epoch, l->n_splits);
    return pf_stream_lease_add(l->input, rep.split, rep.epoch, err);
}

/* Queues the completed splits of the batch (or of no batch) for the next report. */
static void queue_report(worker_leases *l) {
    if (l->n_batch_done == 0)
        return;
    if (l->n_report + l->n_batch_done > l->cap_report) {
        int cap = (l->n_report + l->n_batch_done) * 2;
        pf_stream_split_done *v = pf_realloc(l->report, (size_t)cap * sizeof *v);
        if (!v) { /* unreported splits stay leased to this task: read again after it ends */
            fprintf(stderr, "psflow %s %d: out of memory for the splits to report\n", l->who,
                    l->task);
            l->n_batch_done = 0;
            return;
        }
        l->report = v;
        l->cap_report = cap;
    }
    memcpy(l->report + l->n_report, l->batch_done, (size_t)l->n_batch_done * sizeof *l->report);
    l->n_report += l->n_batch_done;
    l->n_batch_done = 0;
}

/* Leases until WORKER_LEASES_AHEAD splits are open, or the queue has none to give. */
static pf_status lease_ahead(worker_leases *l, pf_error *err) {
    pf_status st = PF_OK;
    l->waiting = 0;
    while (st == PF_OK && !l->ended && !l->waiting &&
           pf_stream_leased_open(l->input) < WORKER_LEASES_AHEAD)
        st = ask(l, 1, err);
    return st;
}

/* Fills slots [got, count) with the batch's examples again, from its first. */
static void fill_up(int got, int count, int width, float *x, float *y, int32_t *labels) {
    for (int i = got; i < count; i++) {
        int from = (i - got) % got;
        memcpy(x + (size_t)i * (size_t)width, x + (size_t)from * (size_t)width,
               (size_t)width * sizeof *x);
        y[i] = y[from];
        if (labels)
            labels[i] = labels[from];
    }
}

pf_status worker_leases_fill(worker_leases *l, int count, float *x, float *y, int32_t *labels,
                             const int *stop, pf_error *err) {
    if (l->held)
        return PF_OK;
    int width = pf_stream_features(l->input), got = 0;
    l->n_batch_done = 0;
    double waited_since = 0;
    for (;;) {
        pf_status st = lease_ahead(l, err);
        int g = 0, nd = 0;
        if (st == PF_OK)
            st = pf_stream_take(l->input, count - got, x + (size_t)got * (size_t)width, y + got,
                                labels ? labels + got : NULL, &g, l->batch_done + l->n_batch_done,
                                WORKER_LEASES_MAX_BATCH - l->n_batch_done, &nd, err);
        if (st != PF_OK)
            return st;
        got += g;
        l->n_batch_done += nd;
        if (got == 0) /* splits found done without an example of this batch: theirs were in */
            queue_report(l); /* batches applied already, or they were empty */
        if (got == count || (got > 0 && l->n_batch_done == WORKER_LEASES_MAX_BATCH))
            break;
        if (!l->waiting && !l->ended)
            continue; /* the splits open were taken through: lease more */
        if (got > 0)  /* nothing left to lease now: train on what there is */
            break;
        if (l->ended) /* every split of the last epoch was done: nothing is left to report */
            return PF_ERR_NOT_FOUND;
        if (stop && __atomic_load_n(stop, __ATOMIC_RELAXED))
            return pf_error_set(err, PF_ERR_CANCELLED, NULL, "stopped waiting for a split");
        double now = pf_clock_now();
        if (waited_since == 0)
            waited_since = now;
        else if (now - waited_since > l->stall_seconds)
            return pf_error_set(err, PF_ERR_UNAVAILABLE, NULL,
                                "no split to lease for %.0f s (training.stall_timeout_secs): "
                                "the epoch's last splits are leased to a task that does not "
                                "finish them",
                                now - waited_since);
        /* every split left is leased by others (this task's done ones were reported with the
         * ask): ask again a little later */
        pf_clock_sleep(LEASES_POLL_SECONDS);
    }
    if (got < count)
        fill_up(got, count, width, x, y, labels);
    l->held = 1;
    return PF_OK;
}

void worker_leases_pushed(worker_leases *l, int applied) {
    if (!l->held || !applied)
        return;
    l->held = 0;
    queue_report(l);
}

void worker_leases_log(const worker_leases *l) {
    char line[1024];
    size_t n = 0;
    line[0] = '\0';
    for (int e = 0; e < l->n_per_epoch && n < sizeof line - 32; e++)
        n += (size_t)snprintf(line + n, sizeof line - n, "%s%d:%" PRIu64, e ? " " : "", e,
                              l->per_epoch[e]);
    fprintf(stderr,
            "psflow %s %d: leased splits: %" PRIu64 " granted, %" PRIu64 " completed, %" PRIu64
            " refused; completed per epoch: %s\n",
            l->who, l->task, l->granted, l->accepted, l->refused, n ? line : "none");
}
