#!/usr/bin/env node
/*
 * Browser test of the job page's step breakdown (web/js/profile.js, docs/profile.md): a real
 * `psflow up` cluster on 127.0.0.1 (1 ps and 2 worker agents, every push 5 ms late), a sync
 * Fashion-MNIST softmax job submitted through the API, and Debian's chromium driven by
 * playwright-core. Run it through run_test.sh breakdown (ctest -R test_breakdown_dashboard).
 *
 * What it checks, in order:
 *   1. the Step breakdown card shows one bar per task (ps-0, worker-0, worker-1) and the
 *      legend; each training task's phases fill at least 95 % of its bar ("other", what no
 *      phase covers, the rest) and its figure is a time per step;
 *   2. a bar shows the API's figures: for one window (the same `recent.seconds`), each
 *      segment's share is the API's phase over its time, or over the phases' sum where that
 *      is larger (within 0.005);
 *   3. the bars update live: a later window replaces the one first shown, without a reload
 *      (screenshot breakdown.png);
 *   and no console errors.
 */
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const {ARTIFACTS, launchChromium, log, check, waitFor, api, Cluster, ConsoleWatch, runMain,
    softmaxSpec} = require('./harness.js');

const SRC = process.env.PSFLOW_SRC;
const BIN = process.env.PSFLOW_BIN;
const TRAINING = ['input', 'pull', 'compute', 'push', 'barrier', 'checkpoint', 'evaluate'];

/* Every bar as the page shows it: task -> {seconds, window, figure, shares {phase: share}}. */
function readBars(page) {
    return page.evaluate(() => {
        const card = document.getElementById('profile');
        if (!card || card.hidden) return null;
        const out = {};
        for (const row of document.querySelectorAll('[data-testid="breakdown-bars"] .breakdown-row')) {
            const shares = {};
            for (const seg of row.querySelectorAll('.breakdown-track span'))
                shares[seg.dataset.phase] = Number(seg.dataset.share);
            out[row.dataset.task] = {seconds: Number(row.dataset.seconds), window: row.dataset.window,
                figure: row.children[2].textContent, shares};
        }
        return out;
    });
}

async function main() {
    if (!SRC || !BIN) throw new Error('PSFLOW_SRC and PSFLOW_BIN must be set (run run_test.sh breakdown)');
    fs.mkdirSync(ARTIFACTS, {recursive: true});
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'psflow-breakdown-'));
    const cluster = new Cluster(dir);
    let browser = null;
    let ok = false;
    try {
        process.env.PSFLOW_PUSH_DELAY_MS = '5';
        await cluster.start(1, 2);
        const base = cluster.url;
        const name = 'breakdown-' + Date.now().toString(36);
        await api(base, 'POST', '/api/v1/jobs', softmaxSpec(SRC, name, 1, 2, 200000));
        log('cluster up at ' + base + '; submitted ' + name);

        browser = await launchChromium();
        const page = await (await browser.newContext({viewport: {width: 1280, height: 1000}})).newPage();
        const consoleWatch = new ConsoleWatch(page);
        await page.goto(base + '/#/jobs/' + name);

        /* ---- 1. a bar per task, filled */
        const first = await waitFor('a bar of a recent window for each task', async () => {
            const b = await readBars(page);
            return b && ['ps-0', 'worker-0', 'worker-1'].every((t) => b[t] && b[t].window === 'recent') ? b : null;
        }, 90000, 200);
        const legend = await page.locator('[data-testid="breakdown-legend"] .breakdown-key').allTextContents();
        check([...TRAINING, 'apply', 'copy', 'other'].every((p) => legend.includes(p)),
            'the legend names every phase (' + legend.join(', ') + ')');
        /* The phases account for a step's time: at least 95 % of a recent window's bar. A
         * window the machine's load cut into (the trainer descheduled between phases) has a
         * larger "other"; the bar moves on every 2 s, so a later window shows it filled. An
         * error thrown here says by how much the last one fell short. */
        const filled = (b, t) => TRAINING.reduce((a, p) => a + b[t].shares[p], 0);
        const full = await waitFor('every training task\'s phases filling >= 95 % of its bar', async () => {
            const b = await readBars(page);
            if (!b || !['worker-0', 'worker-1'].every((t) => b[t] && b[t].window === 'recent')) return null;
            for (const t of ['worker-0', 'worker-1']) {
                if (filled(b, t) < 0.95) {
                    throw new Error(t + ': its phases fill ' + (100 * filled(b, t)).toFixed(1) +
                        ' % of the bar (the rest: ' + (100 * b[t].shares.other).toFixed(1) + ' %)');
                }
            }
            return b;
        }, 30000, 500);
        for (const t of ['worker-0', 'worker-1']) {
            check(filled(full, t) >= 0.95 && / ms\/step$/.test(full[t].figure),
                t + ': its phases fill ' + (100 * filled(full, t)).toFixed(1) + ' % of the bar (the rest: ' +
                (100 * full[t].shares.other).toFixed(1) + ' %), ' + full[t].figure);
        }
        check(/pulls\/s/.test(first['ps-0'].figure), 'ps-0: ' + first['ps-0'].figure);

        /* ---- 2. the API's figures, for the same window */
        const same = await waitFor('the page and the API on the same window of worker-1', async () => {
            const b = await readBars(page);
            const prof = await api(base, 'GET', '/api/v1/jobs/' + name + '/profile');
            const t = prof.tasks.find((x) => x.type === 'worker' && x.index === 1);
            return b && t && t.recent && Math.abs(b['worker-1'].seconds - t.recent.seconds) < 1e-9 ?
                {page: b['worker-1'], api: t.recent} : null;
        }, 30000, 100);
        let worst = 0;
        const sum = TRAINING.reduce((a, p) => a + same.api.phases[p], 0);
        const whole = Math.max(same.api.seconds, sum); /* as the bar divides */
        for (const p of TRAINING) worst = Math.max(worst, Math.abs(same.page.shares[p] - same.api.phases[p] / whole));
        check(worst <= 0.005, 'worker-1\'s segments are the API\'s shares of the same ' +
            same.api.seconds.toFixed(2) + ' s window (largest difference ' + worst.toFixed(4) + ')');

        /* ---- 3. live */
        const later = await waitFor('a later window on the page', async () => {
            const b = await readBars(page);
            return b && b['worker-0'] && b['worker-0'].seconds !== first['worker-0'].seconds ? b : null;
        }, 30000, 200);
        check(true, 'worker-0\'s bar moved to a later window without a reload (' +
            first['worker-0'].seconds.toFixed(3) + ' s -> ' + later['worker-0'].seconds.toFixed(3) + ' s; ' +
            Object.entries(later['worker-0'].shares).filter(([, v]) => v >= 0.01)
                .map(([k, v]) => k + ' ' + (100 * v).toFixed(0) + ' %').join(', ') + ')');
        await page.locator('#profile').scrollIntoViewIfNeeded();
        await page.screenshot({path: path.join(ARTIFACTS, 'breakdown.png'), fullPage: true, animations: 'disabled'});
        await api(base, 'POST', '/api/v1/jobs/' + name + '/cancel');
        check(consoleWatch.unexpected.length === 0, 'no console errors' +
            (consoleWatch.unexpected.length ? ': ' + consoleWatch.unexpected.join(' | ') : ''));
        log('screenshot in ' + ARTIFACTS + ': breakdown.png');
        ok = true;
    } finally {
        if (browser) await browser.close().catch(() => {});
        if (!ok) cluster.dumpLogs();
        await cluster.stop();
        if (ok) fs.rmSync(dir, {recursive: true, force: true});
    }
}

runMain(main);
