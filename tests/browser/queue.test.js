#!/usr/bin/env node
/*
 * Browser test of the Jobs page's queue (web/js/queue.js, docs/design.md "The queue"): a real
 * `psflow up` cluster on 127.0.0.1 with 1 ps and 1 worker agent, Fashion-MNIST softmax jobs
 * submitted through the API, and Debian's chromium driven by playwright-core. Run it through
 * run_test.sh queue (ctest -R test_queue_dashboard).
 *
 * The page stays open, never reloaded, while the queue changes under it:
 *   1. `low` runs; `next` (the same size) waits for capacity at position 1 and `huge` (2
 *      workers, on a cluster of 1) waits for a larger cluster at position 2: the queue card
 *      shows both, in that order, with those reasons, and once low's rate is measured, when
 *      next is expected to start (status.queue.estimated_start);
 *   2. `urgent` (priority 5) preempts `low`: `low` comes back into the queue with reason
 *      preempted, naming `urgent`, ahead of `next` (same priority, submitted first);
 *   3. `urgent` is cancelled: `low` resumes and leaves the queue, and `next` is position 1
 *      again;
 *   at each step the rows are exactly the API's (GET /api/v1/jobs?waiting=true: names,
 *   positions, reasons), a bad `waiting` is a 400, and the page logs no console error.
 */
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const {ARTIFACTS, launchChromium, log, check, waitFor, api, Cluster, ConsoleWatch, runMain,
    softmaxSpec} = require('./harness.js');

const SRC = process.env.PSFLOW_SRC;
const BIN = process.env.PSFLOW_BIN;

/* The queue card's rows: [{name, position, reason, text}] in page order. */
function readQueue(page) {
    return page.evaluate(() => [...document.querySelectorAll('[data-testid="queue-table"] tbody tr')]
        .map((r) => ({name: r.dataset.key, position: Number(r.dataset.position), reason: r.dataset.reason,
            text: r.children[4].textContent})));
}

/* The API's queue, in position order. */
async function apiQueue(base) {
    const page = await api(base, 'GET', '/api/v1/jobs?waiting=true');
    return page.items.map((j) => ({name: j.name, position: j.queue.position, reason: j.queue.reason}))
        .sort((a, b) => a.position - b.position);
}

const brief = (rows) => rows.map((r) => r.position + ':' + r.name + '(' + r.reason + ')').join(' ');

/* Waits until the page shows `want` (name:reason in order) and the API says the same. */
async function expectQueue(page, base, want, timeoutMs) {
    const wanted = want.map(([n, r], i) => (i + 1) + ':' + n + '(' + r + ')').join(' ');
    let seen = '';
    const rows = await waitFor('the queue ' + wanted, async () => {
        const got = await readQueue(page);
        seen = brief(got);
        return seen === wanted ? got : null;
    }, timeoutMs, 200).catch((e) => {
        throw new Error(e.message + '; the page shows ' + (seen || 'no queue'));
    });
    const fromApi = brief(await apiQueue(base));
    check(fromApi === wanted, 'the page shows the API\'s queue: ' + wanted);
    return rows;
}

function spec(name, workers, priority) {
    const s = softmaxSpec(SRC, name, 1, workers, 200000);
    s.run_policy = Object.assign(s.run_policy || {}, {priority});
    return s;
}

async function main() {
    if (!SRC || !BIN) throw new Error('PSFLOW_SRC and PSFLOW_BIN must be set (run run_test.sh queue)');
    fs.mkdirSync(ARTIFACTS, {recursive: true});
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'psflow-queue-'));
    const cluster = new Cluster(dir);
    let browser = null;
    let ok = false;
    try {
        process.env.PSFLOW_PUSH_DELAY_MS = '5';
        await cluster.start(1, 1);
        const base = cluster.url;
        const bad = await api(base, 'GET', '/api/v1/jobs?waiting=maybe').catch((e) => e);
        check(bad.status === 400 && /waiting/.test(bad.body.detail || bad.body.title || ''),
            'waiting=maybe is a 400 naming the parameter');

        browser = await launchChromium();
        const page = await (await browser.newContext({viewport: {width: 1280, height: 1000}})).newPage();
        const consoleWatch = new ConsoleWatch(page);
        await page.goto(base + '/#/');
        await waitFor('the jobs page loaded', () => page.evaluate(() => document.body.dataset.loaded === '1'),
            30000, 100);
        check(await page.locator('#queue .empty').isVisible(), 'an empty queue says so');

        /* ---- 1. capacity and a cluster too small */
        await api(base, 'POST', '/api/v1/jobs', spec('low', 1, 0));
        await waitFor('low running', async () =>
            (await api(base, 'GET', '/api/v1/jobs/low')).status.phase === 'Running', 60000, 200);
        await api(base, 'POST', '/api/v1/jobs', spec('next', 1, 0));
        await api(base, 'POST', '/api/v1/jobs', spec('huge', 2, 0));
        const first = await expectQueue(page, base, [['next', 'capacity'], ['huge', 'cluster_too_small']], 30000);
        check(/free up/.test(first[0].text) && /more agents than the cluster has/.test(first[1].text),
            'the reasons in words: "' + first[0].text + '", "' + first[1].text + '"');
        /* next holds the agents low runs on: expected to start when low's steps left at its
         * measured rate are done (the rate is known after 5 s of training) */
        const start = await waitFor('an expected start for next', async () => {
            const cell = await page.locator('[data-testid="queue-table"] tr[data-key="next"] td').nth(5).textContent();
            const job = await api(base, 'GET', '/api/v1/jobs/next');
            return /^in /.test(cell) && job.status.queue && job.status.queue.estimated_start ?
                {cell, at: job.status.queue.estimated_start} : null;
        }, 30000, 250);
        check(true, 'next is expected to start ' + start.cell + ' (estimated_start ' + start.at + ')');

        /* ---- 2. preemption */
        await api(base, 'POST', '/api/v1/jobs', spec('urgent', 1, 5));
        const second = await expectQueue(page, base,
            [['low', 'preempted'], ['next', 'capacity'], ['huge', 'cluster_too_small']], 60000);
        check(/preempted by urgent/.test(second[0].text), 'low: "' + second[0].text + '"');
        check(await page.locator('[data-testid="queue-table"] tr[data-key="low"] a[href="#/jobs/urgent"]').count() === 1,
            'the reason links to the job that preempted it');
        await page.locator('#queue').scrollIntoViewIfNeeded();
        await page.screenshot({path: path.join(ARTIFACTS, 'queue.png'), fullPage: true, animations: 'disabled'});

        /* ---- 3. the preemptor ends: low resumes */
        await api(base, 'POST', '/api/v1/jobs/urgent/cancel');
        await expectQueue(page, base, [['next', 'capacity'], ['huge', 'cluster_too_small']], 60000);
        const low = await api(base, 'GET', '/api/v1/jobs/low');
        check(low.status.preemptions === 1 && low.status.queue === null,
            'low resumed (preemptions ' + low.status.preemptions + ', phase ' + low.status.phase + ')');
        check(await page.evaluate(() => document.body.dataset.loads) === '1', 'no reload: one snapshot');

        for (const n of ['low', 'next', 'huge']) await api(base, 'POST', '/api/v1/jobs/' + n + '/cancel');
        await waitFor('an empty queue', async () => (await readQueue(page)).length === 0, 30000, 200);
        check(consoleWatch.unexpected.length === 0, 'no console errors' +
            (consoleWatch.unexpected.length ? ': ' + consoleWatch.unexpected.join(' | ') : ''));
        log('screenshot in ' + ARTIFACTS + ': queue.png');
        ok = true;
    } finally {
        if (browser) await browser.close().catch(() => {});
        if (!ok) cluster.dumpLogs();
        await cluster.stop();
        if (ok) fs.rmSync(dir, {recursive: true, force: true});
    }
}

runMain(main);
