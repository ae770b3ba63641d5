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
 *      again; with the default queue alone and no quota, the queues table stays hidden;
 *   4. queue `team-a` is put with a quota of 0 ps and 0 workers (every job of it borrows): the
 *      queues table appears; `borrower` (team-a) waits behind `hold` (default) with reason
 *      quota naming team-a; `hold` is cancelled and `borrower` starts on the idle agents, 1 ps
 *      and 1 worker borrowed (event Borrowing); `reclaim` (default) takes them back, so
 *      `borrower` waits again, preempted by `reclaim`; once its jobs are cancelled team-a is
 *      deleted and the queues table hides again; queue `team-m`, put with a quota of 1 GiB of
 *      memory and priority classes high 100 and low -10, shows both in its row (the classes
 *      in their own column, there only while a queue has classes), and hides again when
 *      deleted;
 *   at each step the rows are exactly the API's (GET /api/v1/jobs?waiting=true: names,
 *   positions, reasons; GET /api/v1/queues: every queue's figures), a bad `waiting` is a 400,
 *   and the page logs no console error.
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
            queue: r.dataset.queue, text: r.children[5].textContent})));
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
    check(fromApi === wanted, 'the page shows the API\'s queue: ' + (wanted || 'no job waits'));
    return rows;
}

function spec(name, workers, priority, queue) {
    const s = softmaxSpec(SRC, name, 1, workers, 200000);
    s.run_policy = Object.assign(s.run_policy || {}, {priority}, queue ? {queue} : {});
    return s;
}

/* Agents in words, as the page says them (written here again from the API's figures). */
function agents(a, skipZero) {
    const parts = [];
    if (!skipZero || a.ps) parts.push(a.ps + ' ps');
    if (!skipZero || a.workers) parts.push(a.workers + (a.workers === 1 ? ' worker' : ' workers'));
    return a.ps || a.workers ? parts.join(' · ') : '—';
}

function quota(q) {
    if (q.ps === null && q.workers === null) return 'no limit';
    return (q.ps === null ? 'no ps limit' : q.ps + ' ps') + ' · ' +
        (q.workers === null ? 'no worker limit' : q.workers + (q.workers === 1 ? ' worker' : ' workers'));
}

/* A queue's row as the page should show it: Queue | Quota | In use | Borrowed | Running |
 * Waiting | Weight. */
const queueRow = (q) => [q.name, quota(q.quota), agents(q.usage, false), agents(q.borrowed, true),
    q.jobs.running, q.jobs.waiting, q.weight].join(' | ');

/* The queues table: whether it is shown, and its rows as queueRow writes them. */
function readQueues(page) {
    return page.evaluate(() => {
        const t = document.querySelector('[data-testid="queues-table"]');
        const head = document.querySelector('[data-testid="queue-table"] thead th:nth-child(3)');
        return {shown: Boolean(t && t.checkVisibility()), head: head.textContent === 'Queue' && !head.hidden,
        rows: t ? [...t.querySelectorAll('tbody tr')].map((r) => [...r.children].map((c) => c.textContent)
            .join(' | ')) : []};
    });
}

/* Waits until the API's queues satisfy `want` (items by name) and the page shows them, each
 * row with the API's figures, the table (and the waiting jobs' Queue column) shown or not as
 * `shown` says. Returns the API's queues by name. */
async function expectQueues(page, base, what, shown, want, timeoutMs) {
    let seen = '';
    let wanted = '';
    const got = await waitFor('the queues: ' + what, async () => {
        const items = (await api(base, 'GET', '/api/v1/queues')).items;
        const byName = Object.fromEntries(items.map((q) => [q.name, q]));
        wanted = items.map(queueRow).join(' / ');
        if (!want(byName)) return null;
        const pg = await readQueues(page);
        seen = (pg.shown ? 'shown ' : 'hidden ') + pg.rows.join(' / ');
        return pg.shown === shown && pg.head === shown && pg.rows.join(' / ') === wanted ? byName : null;
    }, timeoutMs, 200).catch((e) => {
        throw new Error(e.message + '; the API has ' + (wanted || 'no queues') + '; the page shows ' +
            (seen || 'nothing'));
    });
    check(true, 'the queues table is ' + (shown ? 'shown' : 'hidden') + ' with the API\'s figures (' + what +
        '): ' + wanted);
    return got;
}

async function running(base, name) {
    await waitFor(name + ' running', async () =>
        (await api(base, 'GET', '/api/v1/jobs/' + name)).status.phase === 'Running', 60000, 200);
}

/* Step 4: a queue with a quota of nothing, whose job borrows and is reclaimed. */
async function quotaScenario(page, base) {
    const put = await api(base, 'PUT', '/api/v1/queues/team-a', {quota: {ps: 0, workers: 0}, weight: 2});
    check(put.name === 'team-a' && put.quota.ps === 0 && put.weight === 2, 'PUT team-a: ' + JSON.stringify(put));
    await expectQueues(page, base, 'team-a put', true, (q) => q['team-a'] && q.default, 30000);

    await api(base, 'POST', '/api/v1/jobs', spec('hold', 1, 0));
    await running(base, 'hold');
    await api(base, 'POST', '/api/v1/jobs', spec('borrower', 1, 0, 'team-a'));
    const [quotaRow] = await expectQueue(page, base, [['borrower', 'quota']], 30000);
    check(quotaRow.queue === 'team-a' && /^queue team-a's quota/.test(quotaRow.text),
        'borrower waits for its queue\'s quota: "' + quotaRow.text + '" (queue ' + quotaRow.queue + ')');
    check(await page.locator('[data-testid="queue-table"] tr[data-key="borrower"] td').nth(1).textContent() ===
        'team-a', 'the Queue column names team-a');
    await expectQueues(page, base, 'hold holds the agents, borrower waits', true, (q) =>
        q.default.jobs.running === 1 && q.default.usage.workers === 1 && q['team-a'].jobs.waiting === 1, 30000);
    await page.locator('#queue').scrollIntoViewIfNeeded();
    await page.screenshot({path: path.join(ARTIFACTS, 'queue_quota.png'), fullPage: true, animations: 'disabled'});

    /* hold ends: borrower starts on the idle agents, beyond its quota */
    await api(base, 'POST', '/api/v1/jobs/hold/cancel');
    await expectQueue(page, base, [], 60000);
    await expectQueues(page, base, 'borrower borrows 1 ps and 1 worker', true, (q) =>
        q['team-a'].jobs.running === 1 && q['team-a'].borrowed.ps === 1 && q['team-a'].borrowed.workers === 1 &&
        q.default.jobs.running === 0, 60000);
    check(await page.locator('[data-testid="queues-table"] tr[data-key="team-a"] td').nth(2).textContent() ===
        '1 ps · 1 worker', 'Borrowed says 1 ps · 1 worker');
    await waitFor('a Borrowing event of borrower', async () =>
        (await api(base, 'GET', '/api/v1/jobs/borrower/events')).items.some((e) => e.reason === 'Borrowing'),
    30000, 200);
    await page.locator('#queue').scrollIntoViewIfNeeded();
    await page.screenshot({path: path.join(ARTIFACTS, 'queue_borrowed.png'), fullPage: true, animations: 'disabled'});

    /* a job of the default queue takes the borrowed agents back */
    await api(base, 'POST', '/api/v1/jobs', spec('reclaim', 1, 0));
    const [back] = await expectQueue(page, base, [['borrower', 'preempted']], 60000);
    check(/preempted by reclaim/.test(back.text), 'borrower: "' + back.text + '"');
    await expectQueues(page, base, 'reclaim took the agents back', true, (q) =>
        q.default.jobs.running === 1 && q['team-a'].jobs.running === 0 && q['team-a'].jobs.waiting === 1 &&
        q['team-a'].borrowed.workers === 0, 60000);

    for (const n of ['reclaim', 'borrower']) await api(base, 'POST', '/api/v1/jobs/' + n + '/cancel');
    await expectQueue(page, base, [], 60000);
    await api(base, 'DELETE', '/api/v1/queues/team-a');
    await expectQueues(page, base, 'team-a deleted', false, (q) => !q['team-a'], 30000);

    /* a quota of memory and priority classes */
    await api(base, 'PUT', '/api/v1/queues/team-m', {quota: {memory_bytes: 1 << 30},
        priority_classes: {low: -10, high: 100}});
    let seen = [];
    const cells = await waitFor('team-m with its memory and classes shown', async () => {
        seen = await page.evaluate(() => [...document.querySelectorAll(
            '[data-testid="queues-table"] tr')].map((r) => r.dataset.key + ': ' + [...r.children]
            .map((c) => c.textContent).join(' | ')));
        const row = seen.find((r) => r.startsWith('team-m: '));
        return row && row.split(' | ').length === 8 ? row.slice(8).split(' | ') : null;
    }, 30000, 200).catch((e) => {
        throw new Error(e.message + '; the page shows ' + JSON.stringify(seen));
    });
    check(cells[1] === 'no agent limit · 1.0 GiB' && cells[7] === 'high 100, low -10',
        'team-m: quota "' + cells[1] + '", classes "' + cells[7] + '"');
    await api(base, 'DELETE', '/api/v1/queues/team-m');
    await expectQueues(page, base, 'team-m deleted', false, (q) => !q['team-m'], 30000);
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
            const cell = await page.locator('[data-testid="queue-table"] tr[data-key="next"] td').nth(6).textContent();
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
        await expectQueues(page, base, 'the default queue alone', false, (q) => Object.keys(q).length === 1,
            30000);

        for (const n of ['low', 'next', 'huge']) await api(base, 'POST', '/api/v1/jobs/' + n + '/cancel');
        await waitFor('an empty queue', async () => (await readQueue(page)).length === 0, 30000, 200);

        /* ---- 4. a queue with a quota: waiting for it, borrowing, reclaiming */
        await quotaScenario(page, base);
        check(await page.evaluate(() => document.body.dataset.loads) === '1', 'no reload: one snapshot');
        check(consoleWatch.unexpected.length === 0, 'no console errors' +
            (consoleWatch.unexpected.length ? ': ' + consoleWatch.unexpected.join(' | ') : ''));
        log('screenshots in ' + ARTIFACTS + ': queue.png, queue_quota.png, queue_borrowed.png');
        ok = true;
    } finally {
        if (browser) await browser.close().catch(() => {});
        if (!ok) cluster.dumpLogs();
        await cluster.stop();
        if (ok) fs.rmSync(dir, {recursive: true, force: true});
    }
}

runMain(main);
