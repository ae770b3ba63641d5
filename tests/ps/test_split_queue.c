/* test_split_queue.c - the work queue of data.splits "dynamic" (ps/split_queue.h): every
 * split exactly once per epoch, the order, waiting and the end, refusals, released splits,
 * the checkpoint bytes, and a large queue. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ps/split_queue.h"

static ps_split_queue *make(uint32_t n, int64_t epochs, uint64_t seed, int tasks) {
    ps_split_queue *q = NULL;
    pf_error err;
    assert_int_equal(ps_split_queue_create(n, epochs, seed, tasks, &q, &err), PF_OK);
    assert_non_null(q);
    return q;
}

static ps_lease_result lease(ps_split_queue *q, int task, uint64_t epoch) {
    return ps_split_queue_lease(q, task, epoch, NULL, 0, 1);
}

/* Reports `split` done by `task` in `epoch` without leasing another. */
static ps_lease_result finish(ps_split_queue *q, int task, uint64_t epoch, uint32_t split) {
    return ps_split_queue_lease(q, task, epoch, &split, 1, 0);
}

/* The order epoch `epoch` hands splits out in, leasing them all to task 0 and completing
 * the epoch. */
static void drain_epoch(ps_split_queue *q, uint32_t *order) {
    uint32_t n = ps_split_queue_splits(q);
    uint64_t epoch = ps_split_queue_stats_get(q).epoch;
    for (uint32_t i = 0; i < n; i++) {
        ps_lease_result r = lease(q, 0, epoch);
        assert_int_equal(r.state, PS_LEASE_GRANTED);
        order[i] = r.split;
    }
    for (uint32_t i = 0; i < n; i++)
        finish(q, 0, epoch, order[i]);
    assert_int_equal(ps_split_queue_stats_get(q).epoch, epoch + 1);
}

static void test_create_checks_arguments(void **state) {
    (void)state;
    ps_split_queue *q = (ps_split_queue *)1;
    pf_error err;
    assert_int_equal(ps_split_queue_create(0, 1, 1, 1, &q, &err), PF_ERR_INVALID);
    assert_null(q);
    assert_int_equal(ps_split_queue_create(PS_SPLIT_QUEUE_MAX_SPLITS + 1, 1, 1, 1, &q, &err),
                     PF_ERR_INVALID);
    assert_int_equal(ps_split_queue_create(4, -1, 1, 1, &q, &err), PF_ERR_INVALID);
    assert_int_equal(ps_split_queue_create(4, 1, 1, 0, &q, &err), PF_ERR_INVALID);
    assert_int_equal(ps_split_queue_create(4, 1, 1, 100000, &q, &err), PF_ERR_INVALID);
    assert_non_null(strstr(err.message, "tasks"));
    ps_split_queue_destroy(NULL);
}

/* Three tasks interleave over four epochs, each holding one split at a time and reporting it
 * with the next lease: every split is done exactly once per epoch, and the counts of each
 * ended epoch add up to n. */
static void test_each_split_once_per_epoch(void **state) {
    (void)state;
    enum { N = 101, EPOCHS = 4, TASKS = 3 };
    ps_split_queue *q = make(N, EPOCHS, 7, TASKS);
    uint32_t held[TASKS];
    int holding[TASKS] = {0};
    uint64_t epoch_of[TASKS] = {0};
    int seen[N];
    memset(seen, 0, sizeof seen);
    int ended = 0, turn = 0;
    while (ended < EPOCHS) {
        int t = turn++ % TASKS;
        if (turn % 5 == 0) /* now and then a task skips its turn: the others go on */
            continue;
        uint32_t n_done = holding[t] ? 1 : 0;
        ps_lease_result r = ps_split_queue_lease(q, t, epoch_of[t], &held[t], n_done, 1);
        assert_int_equal(r.accepted, n_done);
        assert_int_equal(r.refused, 0);
        if (n_done)
            seen[held[t]]++;
        holding[t] = 0;
        if (r.epoch_ended) {
            ended++;
            uint32_t sum = 0;
            for (int i = 0; i < TASKS; i++)
                sum += ps_split_queue_last_epoch(q, i);
            assert_int_equal(sum, N);
            for (int s = 0; s < N; s++) {
                assert_int_equal(seen[s], 1);
                seen[s] = 0;
            }
        }
        if (r.state == PS_LEASE_GRANTED) {
            held[t] = r.split;
            holding[t] = 1;
            epoch_of[t] = r.epoch;
        } else if (ended < EPOCHS) {
            assert_int_equal(r.state, PS_LEASE_WAIT);
        } else {
            assert_int_equal(r.state, PS_LEASE_END);
        }
    }
    ps_split_queue_stats st = ps_split_queue_stats_get(q);
    assert_true(st.finished);
    assert_int_equal(st.epoch, EPOCHS);
    assert_int_equal(st.granted, (uint64_t)N * EPOCHS);
    assert_int_equal(st.completed, (uint64_t)N * EPOCHS);
    assert_int_equal(st.refused, 0);
    ps_split_queue_destroy(q);
}

/* Each epoch's order is a permutation, the same for the same seed, another for another epoch
 * or seed. */
static void test_order_is_reproducible_permutation(void **state) {
    (void)state;
    enum { N = 64 };
    uint32_t a0[N], a1[N], b0[N], b1[N], c0[N];
    ps_split_queue *a = make(N, 0, 42, 1), *b = make(N, 0, 42, 1), *c = make(N, 0, 43, 1);
    drain_epoch(a, a0);
    drain_epoch(a, a1);
    drain_epoch(b, b0);
    drain_epoch(b, b1);
    drain_epoch(c, c0);
    int hit[N] = {0};
    for (int i = 0; i < N; i++)
        hit[a0[i]]++;
    for (int i = 0; i < N; i++)
        assert_int_equal(hit[i], 1);
    assert_memory_equal(a0, b0, sizeof a0);
    assert_memory_equal(a1, b1, sizeof a1);
    assert_memory_not_equal(a0, a1, sizeof a0);
    assert_memory_not_equal(a0, c0, sizeof a0);
    int in_order = 1;
    for (int i = 0; i < N; i++)
        in_order &= a0[i] == (uint32_t)i;
    assert_false(in_order);
    ps_split_queue_destroy(a);
    ps_split_queue_destroy(b);
    ps_split_queue_destroy(c);
}

/* With every remaining split leased a lease waits; a done report frees nothing to lease, but
 * the next epoch does. Without want nothing is leased. */
static void test_wait_when_all_leased(void **state) {
    (void)state;
    ps_split_queue *q = make(3, 0, 1, 2);
    uint32_t s[3];
    for (int i = 0; i < 3; i++)
        s[i] = lease(q, i % 2, 0).split;
    ps_lease_result r = lease(q, 1, 0);
    assert_int_equal(r.state, PS_LEASE_WAIT);
    assert_int_equal(r.split, 0);
    r = ps_split_queue_lease(q, 0, 0, &s[0], 1, 1);
    assert_int_equal(r.accepted, 1);
    assert_int_equal(r.state, PS_LEASE_WAIT);
    ps_split_queue_stats st = ps_split_queue_stats_get(q);
    assert_int_equal(st.pending, 0);
    assert_int_equal(st.leased, 2);
    assert_int_equal(st.done, 1);
    finish(q, 1, 0, s[1]);
    r = ps_split_queue_lease(q, 0, 0, &s[2], 1, 0);
    assert_int_equal(r.state, PS_LEASE_WAIT); /* no want */
    assert_true(r.epoch_ended);
    assert_int_equal(r.epoch, 1);
    assert_int_equal(ps_split_queue_last_epoch(q, 0), 2);
    assert_int_equal(ps_split_queue_last_epoch(q, 1), 1);
    assert_int_equal(ps_split_queue_task_done(q, 0), 0);
    assert_int_equal(ps_split_queue_stats_get(q).pending, 3);
    assert_int_equal(lease(q, 1, 1).state, PS_LEASE_GRANTED);
    ps_split_queue_destroy(q);
}

/* epochs 2: END from the second epoch's last done on, with refusals still counted; epochs 0
 * goes on. */
static void test_end_and_endless(void **state) {
    (void)state;
    uint32_t order[5];
    ps_split_queue *q = make(5, 2, 3, 1);
    drain_epoch(q, order);
    assert_false(ps_split_queue_stats_get(q).finished);
    uint32_t s = lease(q, 0, 1).split;
    for (int i = 0; i < 3; i++)
        finish(q, 0, 1, lease(q, 0, 1).split);
    ps_lease_result r = ps_split_queue_lease(q, 0, 1, &s, 1, 0);
    assert_int_equal(ps_split_queue_stats_get(q).epoch, 1);
    r = ps_split_queue_lease(q, 0, 1, NULL, 0, 1);
    assert_int_equal(r.state, PS_LEASE_GRANTED);
    uint32_t last = r.split;
    r = ps_split_queue_lease(q, 0, 1, &last, 1, 1);
    assert_true(r.epoch_ended);
    assert_int_equal(r.state, PS_LEASE_END);
    assert_int_equal(r.epoch, 2);
    assert_int_equal(ps_split_queue_last_epoch(q, 0), 5);
    ps_split_queue_stats st = ps_split_queue_stats_get(q);
    assert_true(st.finished);
    assert_int_equal(st.pending + st.leased + st.done, 0);
    r = ps_split_queue_lease(q, 0, 2, &s, 1, 1);
    assert_int_equal(r.state, PS_LEASE_END);
    assert_int_equal(r.refused, 1);
    assert_int_equal(ps_split_queue_stats_get(q).refused, 1);
    assert_int_equal(ps_split_queue_release(q, 0), 0);
    ps_split_queue_destroy(q);

    q = make(2, 0, 3, 1);
    for (int e = 0; e < 50; e++)
        drain_epoch(q, order);
    assert_false(ps_split_queue_stats_get(q).finished);
    assert_int_equal(lease(q, 0, 50).state, PS_LEASE_GRANTED);
    ps_split_queue_destroy(q);
}

/* Every kind of refusal counts and changes nothing. */
static void test_refusals(void **state) {
    (void)state;
    ps_split_queue *q = make(8, 0, 5, 3);
    uint32_t a = lease(q, 0, 0).split, b = lease(q, 1, 0).split;
    uint32_t untouched = 0;
    while (untouched == a || untouched == b)
        untouched++;
    ps_lease_result r = finish(q, 1, 0, a); /* another task's */
    assert_int_equal(r.refused, 1);
    r = finish(q, 0, 1, a); /* another epoch */
    assert_int_equal(r.refused, 1);
    r = finish(q, 0, 0, untouched); /* not leased */
    assert_int_equal(r.refused, 1);
    uint32_t list[] = {8, UINT32_MAX, a, a}; /* out of range twice, then a repeat */
    r = ps_split_queue_lease(q, 0, 0, list, 4, 0);
    assert_int_equal(r.accepted, 1);
    assert_int_equal(r.refused, 3);
    r = ps_split_queue_lease(q, 3, 0, &b, 1, 1); /* out-of-range task */
    assert_int_equal(r.state, PS_LEASE_WAIT);
    assert_int_equal(r.refused, 1);
    r = ps_split_queue_lease(q, -1, 0, &b, 1, 1);
    assert_int_equal(r.refused, 1);
    assert_int_equal(ps_split_queue_release(q, 7), 0);
    assert_int_equal(ps_split_queue_task_done(q, 7), 0);
    ps_split_queue_stats st = ps_split_queue_stats_get(q);
    assert_int_equal(st.refused, 8);
    assert_int_equal(st.completed, 1);
    assert_int_equal(st.done, 1);
    assert_int_equal(st.leased, 1);
    assert_int_equal(st.pending, 6);
    assert_int_equal(ps_split_queue_task_done(q, 0), 1);
    assert_int_equal(finish(q, 1, 0, b).accepted, 1); /* b is still task 1's */
    ps_split_queue_destroy(q);
}

/* A gone task's splits are leased again first, in the order released, and done once. */
static void test_release_puts_splits_back_first(void **state) {
    (void)state;
    enum { N = 20 };
    ps_split_queue *q = make(N, 0, 9, 3);
    uint32_t t0[3], t1[2];
    for (int i = 0; i < 3; i++)
        t0[i] = lease(q, 0, 0).split;
    for (int i = 0; i < 2; i++)
        t1[i] = lease(q, 1, 0).split;
    finish(q, 0, 0, t0[1]);
    assert_int_equal(ps_split_queue_release(q, 1), 2);
    assert_int_equal(ps_split_queue_release(q, 0), 2); /* t0[1] stays done */
    assert_int_equal(ps_split_queue_release(q, 0), 0);
    ps_split_queue_stats st = ps_split_queue_stats_get(q);
    assert_int_equal(st.released, 4);
    assert_int_equal(st.leased, 0);
    assert_int_equal(st.pending, N - 1);
    assert_int_equal(finish(q, 0, 0, t0[0]).refused, 1); /* no longer its */
    uint32_t expect[] = {t1[0], t1[1], t0[0], t0[2]};
    for (int i = 0; i < 4; i++)
        assert_int_equal(lease(q, 2, 0).split, expect[i]);
    int seen[N] = {0};
    seen[t0[1]] = 1;
    for (int i = 0; i < 4; i++) {
        assert_int_equal(finish(q, 2, 0, expect[i]).accepted, 1);
        seen[expect[i]]++;
    }
    ps_lease_result r;
    while ((r = lease(q, 2, 0)).state == PS_LEASE_GRANTED) {
        seen[r.split]++;
        r = finish(q, 2, 0, r.split);
        if (r.epoch_ended)
            break;
    }
    assert_true(r.epoch_ended);
    for (int s = 0; s < N; s++)
        assert_int_equal(seen[s], 1);
    assert_int_equal(ps_split_queue_last_epoch(q, 0), 1);
    assert_int_equal(ps_split_queue_last_epoch(q, 1), 0);
    assert_int_equal(ps_split_queue_last_epoch(q, 2), N - 1);
    ps_split_queue_destroy(q);
}

static uint8_t *encode(const ps_split_queue *q, size_t *len) {
    *len = ps_split_queue_encode(q, NULL, 0);
    uint8_t *buf = malloc(*len);
    assert_non_null(buf);
    assert_int_equal(ps_split_queue_encode(q, buf, *len - 1), *len); /* too small: untouched */
    assert_int_equal(ps_split_queue_encode(q, buf, *len), *len);
    return buf;
}

/* The bytes keep the epoch, the done splits and the counts and drop the leases: the splits
 * not done come back in the epoch's order. */
static void test_encode_decode_round_trip(void **state) {
    (void)state;
    enum { N = 13 };
    ps_split_queue *q = make(N, 5, 11, 2);
    uint32_t order[N];
    drain_epoch(q, order);
    for (int i = 0; i < 4; i++)
        order[i] = lease(q, i % 2, 1).split;
    finish(q, 0, 1, order[0]);
    finish(q, 1, 1, order[1]);
    size_t len;
    uint8_t *buf = encode(q, &len);
    assert_memory_equal(buf, "PFSQ", 4);

    ps_split_queue *r = make(N, 5, 11, 2);
    pf_error err;
    assert_int_equal(ps_split_queue_decode(r, buf, len, &err), PF_OK);
    ps_split_queue_stats st = ps_split_queue_stats_get(r);
    assert_int_equal(st.epoch, 1);
    assert_int_equal(st.done, 2);
    assert_int_equal(st.leased, 0);
    assert_int_equal(st.pending, N - 2);
    assert_int_equal(ps_split_queue_task_done(r, 0), 1);
    assert_int_equal(ps_split_queue_task_done(r, 1), 1);
    assert_int_equal(ps_split_queue_last_epoch(r, 0), N);
    assert_int_equal(finish(r, 0, 1, order[2]).refused, 1); /* the lease is gone */
    /* The restored queue leases the rest in epoch 1's order: the two that were leased, then
     * the untouched ones, each once; the original does the same after its tasks are gone. */
    ps_split_queue_release(q, 0);
    ps_split_queue_release(q, 1);
    uint32_t from_r[N - 2];
    for (int i = 0; i < N - 2; i++) {
        from_r[i] = lease(r, 0, 1).split;
        assert_true(from_r[i] != order[0] && from_r[i] != order[1]);
    }
    assert_int_equal(lease(r, 0, 1).state, PS_LEASE_WAIT);
    assert_int_equal(from_r[0], order[2]);
    assert_int_equal(from_r[1], order[3]);
    for (int i = 0; i < N - 2; i++)
        assert_int_equal(finish(r, 0, 1, from_r[i]).accepted, 1);
    assert_int_equal(ps_split_queue_stats_get(r).epoch, 2);
    assert_int_equal(ps_split_queue_last_epoch(r, 0), N - 1);
    assert_int_equal(ps_split_queue_last_epoch(r, 1), 1);

    /* A finished queue round-trips as finished. */
    ps_split_queue *f = make(1, 1, 0, 1);
    finish(f, 0, 0, lease(f, 0, 0).split);
    size_t flen;
    uint8_t *fbuf = encode(f, &flen);
    ps_split_queue *g = make(1, 1, 0, 1);
    assert_int_equal(ps_split_queue_decode(g, fbuf, flen, &err), PF_OK);
    assert_true(ps_split_queue_stats_get(g).finished);
    assert_int_equal(lease(g, 0, 1).state, PS_LEASE_END);
    free(fbuf);
    ps_split_queue_destroy(f);
    ps_split_queue_destroy(g);

    free(buf);
    ps_split_queue_destroy(q);
    ps_split_queue_destroy(r);
}

/* Decoding checks everything and leaves the queue as it was when anything is wrong. */
/* A queue made from the bytes alone takes its number of splits from them; bytes that are
 * not a queue's make none. */
static void test_from_bytes(void **state) {
    (void)state;
    ps_split_queue *q = make(9, 3, 4, 2);
    uint32_t order[9];
    drain_epoch(q, order);
    uint32_t s = lease(q, 1, 1).split;
    finish(q, 1, 1, s);
    size_t len;
    uint8_t *buf = encode(q, &len);
    ps_split_queue *r = NULL;
    pf_error err;
    assert_int_equal(ps_split_queue_from_bytes(buf, len, 3, 4, 2, &r, &err), PF_OK);
    assert_non_null(r);
    assert_int_equal(ps_split_queue_splits(r), 9);
    ps_split_queue_stats st = ps_split_queue_stats_get(r);
    assert_int_equal(st.epoch, 1);
    assert_int_equal(st.done, 1);
    assert_int_equal(ps_split_queue_task_done(r, 1), 1);
    ps_split_queue_destroy(r);
    r = (ps_split_queue *)1;
    assert_int_equal(ps_split_queue_from_bytes(buf, 10, 3, 4, 2, &r, &err), PF_ERR_FORMAT);
    assert_null(r);
    r = (ps_split_queue *)1;
    assert_int_equal(ps_split_queue_from_bytes(buf, len, 5, 4, 2, &r, &err), PF_ERR_FORMAT);
    assert_null(r);                                     /* another training.epochs */
    buf[20] = 0, buf[21] = 0, buf[22] = 0, buf[23] = 0; /* 0 splits */
    r = (ps_split_queue *)1;
    assert_int_equal(ps_split_queue_from_bytes(buf, len, 3, 4, 2, &r, &err), PF_ERR_INVALID);
    assert_null(r);
    free(buf);
    ps_split_queue_destroy(q);
}

static void test_decode_refuses_bad_bytes(void **state) {
    (void)state;
    enum { N = 10 };
    ps_split_queue *q = make(N, 3, 1, 2);
    finish(q, 1, 0, lease(q, 1, 0).split);
    size_t len;
    uint8_t *buf = encode(q, &len);
    uint8_t *bad = malloc(len);
    assert_non_null(bad);

    ps_split_queue *r = make(N, 3, 1, 2);
    uint32_t kept = lease(r, 0, 0).split;
    pf_error err;
    assert_int_equal(ps_split_queue_decode(r, buf, len - 1, &err), PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "bytes"));
    assert_int_equal(ps_split_queue_decode(r, buf, 3, &err), PF_ERR_FORMAT);
    memcpy(bad, buf, len);
    bad[0] ^= 1;
    assert_int_equal(ps_split_queue_decode(r, bad, len, &err), PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "PFSQ"));
    memcpy(bad, buf, len);
    bad[4] = 2; /* version */
    assert_int_equal(ps_split_queue_decode(r, bad, len, &err), PF_ERR_FORMAT);
    memcpy(bad, buf, len);
    bad[40] ^= 0x80; /* one more split marked done than counted */
    assert_int_equal(ps_split_queue_decode(r, bad, len, &err), PF_ERR_FORMAT);
    memcpy(bad, buf, len);
    bad[len - 8] ^= 1; /* task 1's count */
    assert_int_equal(ps_split_queue_decode(r, bad, len, &err), PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "tasks did"));

    ps_split_queue *other_n = make(N + 1, 3, 1, 2), *other_epochs = make(N, 4, 1, 2);
    assert_int_equal(ps_split_queue_decode(other_n, buf, len, &err), PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "splits saved"));
    assert_int_equal(ps_split_queue_decode(other_epochs, buf, len, &err), PF_ERR_FORMAT);
    assert_non_null(strstr(err.message, "epochs saved"));

    /* r is as it was: its lease still holds. */
    ps_split_queue_stats st = ps_split_queue_stats_get(r);
    assert_int_equal(st.leased, 1);
    assert_int_equal(st.done, 0);
    assert_int_equal(finish(r, 0, 0, kept).accepted, 1);

    /* A queue with fewer tasks takes the bytes of one with more, and drops the rest's counts. */
    ps_split_queue *one = make(N, 3, 1, 1);
    assert_int_equal(ps_split_queue_decode(one, buf, len, &err), PF_OK);
    assert_int_equal(ps_split_queue_stats_get(one).done, 1);
    assert_int_equal(ps_split_queue_task_done(one, 0), 0);

    free(bad);
    free(buf);
    ps_split_queue_destroy(q);
    ps_split_queue_destroy(r);
    ps_split_queue_destroy(other_n);
    ps_split_queue_destroy(other_epochs);
    ps_split_queue_destroy(one);
}

/* A million splits: an epoch leased by two tasks, one of them gone halfway, and done. */
static void test_large_queue(void **state) {
    (void)state;
    enum { N = 1000000 };
    ps_split_queue *q = make(N, 0, 2024, 2);
    uint32_t held[2] = {0, 0};
    int holding[2] = {0, 0};
    ps_lease_result r = {0};
    for (uint64_t i = 0; !r.epoch_ended; i++) {
        int t = (int)(i % 2);
        if (i == N) {
            assert_int_equal(ps_split_queue_release(q, 1), holding[1]);
            holding[1] = 0;
        }
        r = ps_split_queue_lease(q, t, 0, &held[t], (uint32_t)holding[t], 1);
        assert_int_equal(r.accepted, (uint32_t)holding[t]);
        holding[t] = r.state == PS_LEASE_GRANTED;
        held[t] = r.split;
    }
    assert_int_equal(ps_split_queue_last_epoch(q, 0) + ps_split_queue_last_epoch(q, 1), N);
    ps_split_queue_stats st = ps_split_queue_stats_get(q);
    assert_int_equal(st.epoch, 1);
    assert_int_equal(st.completed, N);
    assert_int_equal(st.refused, 0);
    size_t len;
    uint8_t *buf = encode(q, &len);
    pf_error err;
    assert_int_equal(ps_split_queue_decode(q, buf, len, &err), PF_OK);
    free(buf);
    ps_split_queue_destroy(q);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_checks_arguments),
        cmocka_unit_test(test_each_split_once_per_epoch),
        cmocka_unit_test(test_order_is_reproducible_permutation),
        cmocka_unit_test(test_wait_when_all_leased),
        cmocka_unit_test(test_end_and_endless),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_release_puts_splits_back_first),
        cmocka_unit_test(test_encode_decode_round_trip),
        cmocka_unit_test(test_from_bytes),
        cmocka_unit_test(test_decode_refuses_bad_bytes),
        cmocka_unit_test(test_large_queue),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
