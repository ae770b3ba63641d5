#!/usr/bin/env node
/*
 * Browser test of a job's serving tasks on its page (web/js/serving.js): a real `psflow up`
 * cluster on 127.0.0.1 (1 ps and 2 worker agents), a Fashion-MNIST softmax job with
 * `"serving": {"replicas": 1}` submitted through the API, and Debian's chromium driven by
 * playwright-core (no browser download). Run it through run_test.sh serving (ctest -R
 * test_serving_dashboard), which installs the npm packages and skips when chromium is missing.
 *
 * What it checks, in order:
 *   1. while the job trains, its page shows a Serving card with one row: Running, the endpoint
 *      status.serving names (a link), and a version;
 *   2. predictions sent to that endpoint show on the page without a reload: the requests, a
 *      p50 and a p99 latency, and a requests/s above zero, each the API's figure;
 *   3. the version shown follows the checkpoints: it rises while the job trains and ends at
 *      max_steps once the job has succeeded, the server still Running (screenshot
 *      serving.png);
 *   and no console errors.
 */
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const {ARTIFACTS, launchChromium, log, check, waitFor, fatal, api, Cluster, ConsoleWatch, runMain} = require('./harness.js');

const SRC = process.env.PSFLOW_SRC;
const BIN = process.env.PSFLOW_BIN;
/* With every push 3 ms late (the agents' --push-delay-ms) the job trains for about 20 s, a
 * checkpoint every 500 steps: several versions while the page is open. */
const MAX_STEPS = 6000;
const EVERY = 500;

function jobSpec(name) {
    const spec = JSON.parse(fs.readFileSync(path.join(SRC, 'examples', 'fashion-mnist-softmax.json'), 'utf8'));
    spec.name = name;
    spec.replicas = {ps: 1, worker: 1};
    spec.training = Object.assign(spec.training || {}, {mode: 'async', max_steps: MAX_STEPS, eval_every_steps: 0});
    delete spec.training.replicas_to_aggregate;
    spec.checkpoint = {every_steps: EVERY, keep: 3};
    spec.serving = {replicas: 1};
    return spec;
}

/* The serving row as the page shows it. */
function readServing(page) {
    return page.evaluate(() => {
        const card = document.getElementById('serving');
        const row = document.querySelector('[data-testid="serving-table"] tbody tr[data-serve="0"]');
        if (!card || card.hidden || !row) return null;
        const cell = (id) => row.querySelector('[data-testid="' + id + '"]').textContent;
        const link = row.children[2].querySelector('a');
        return {state: row.children[1].textContent, endpoint: link ? link.getAttribute('href') : null,
            version: cell('serving-version'), rate: cell('serving-rate'), p50: cell('serving-p50'),
            p99: cell('serving-p99'), requests: row.children[7].textContent};
    });
}

const number = (text) => Number(String(text).replace(/[^0-9.]/g, ''));

async function main() {
    if (!SRC || !BIN) throw new Error('PSFLOW_SRC and PSFLOW_BIN must be set (run run_test.sh serving)');
    fs.mkdirSync(ARTIFACTS, {recursive: true});
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'psflow-serving-'));
    const cluster = new Cluster(dir);
    let browser = null;
    let ok = false;
    let sending = false;
    try {
        process.env.PSFLOW_PUSH_DELAY_MS = '3';
        await cluster.start(1, 2);
        const base = cluster.url;
        const name = 'served-' + Date.now().toString(36);
        await api(base, 'POST', '/api/v1/jobs', jobSpec(name));
        log('cluster up at ' + base + '; submitted ' + name + ' with a serving section');

        browser = await launchChromium();
        const page = await (await browser.newContext({viewport: {width: 1280, height: 1000}})).newPage();
        const consoleWatch = new ConsoleWatch(page);
        await page.goto(base + '/#/jobs/' + name);

        /* ---- 1. the serving row while the job trains */
        let s = await waitFor('the Serving card with a running server and a version', async () => {
            const x = await readServing(page);
            return x && x.state === 'Running' && x.endpoint && /^[0-9,]+$/.test(x.version) ? x : null;
        }, 90000, 200);
        let job = await api(base, 'GET', '/api/v1/jobs/' + name);
        const firstVersion = number(s.version);
        check(s.endpoint === job.status.serving[0].endpoint, 'the page links the endpoint status.serving names (' + s.endpoint + ')');
        check(job.status.phase === 'Running' && firstVersion < MAX_STEPS,
            'it shows version ' + s.version + ' while the job trains (step ' + job.status.global_step + ')');

        /* ---- 2. predictions show up live */
        sending = true;
        const body = JSON.stringify({instances: [new Array(784).fill(0.5)]});
        let sent = 0;
        const sender = (async () => {
            while (sending) {
                const res = await fetch(s.endpoint + ':predict', {method: 'POST', body,
                    headers: {'Content-Type': 'application/json'}});
                if (res.status !== 200) throw fatal('predict: HTTP ' + res.status + ' ' + (await res.text()));
                await res.text();
                sent++;
                await new Promise((r) => setTimeout(r, 5));
            }
        })();
        s = await waitFor('the page to show the requests with their latency and rate', async () => {
            const x = await readServing(page);
            return x && number(x.requests) >= 100 && x.p50.endsWith(' ms') && x.p99.endsWith(' ms') &&
                number(x.rate) > 0 ? x : null;
        }, 30000, 200);
        job = await api(base, 'GET', '/api/v1/jobs/' + name);
        const api0 = job.status.serving[0];
        check(api0.requests >= number(s.requests) && api0.latency_p99_ms !== null,
            'the page shows ' + s.requests + ' requests, p50 ' + s.p50 + ', p99 ' + s.p99 + ', ' + s.rate +
            ' requests/s without a reload (the API: ' + api0.requests + ' requests, p99 ' +
            api0.latency_p99_ms.toFixed(3) + ' ms)');

        /* ---- 3. the version follows the checkpoints to the end */
        job = await waitFor('the job to succeed', async () => {
            const j = await api(base, 'GET', '/api/v1/jobs/' + name);
            if (j.status.phase === 'Failed') throw fatal('the job failed: ' + j.status.message);
            return j.status.phase === 'Succeeded' ? j : null;
        }, 180000, 500);
        s = await waitFor('the page to show version ' + MAX_STEPS, async () => {
            const x = await readServing(page);
            return x && number(x.version) === MAX_STEPS ? x : null;
        }, 30000, 200);
        check(s.state === 'Running' && number(s.version) > firstVersion,
            'after the job succeeded the page shows the server Running on version ' + s.version +
            ' (from ' + firstVersion + ' when it opened)');
        sending = false;
        await sender;
        log(sent + ' predictions sent');
        await page.screenshot({path: path.join(ARTIFACTS, 'serving.png'), fullPage: true, animations: 'disabled'});
        check(consoleWatch.unexpected.length === 0, 'no console errors' +
            (consoleWatch.unexpected.length ? ': ' + consoleWatch.unexpected.join(' | ') : ''));
        log('screenshot in ' + ARTIFACTS + ': serving.png');
        ok = true;
    } finally {
        sending = false;
        if (browser) await browser.close().catch(() => {});
        if (!ok) cluster.dumpLogs();
        await cluster.stop();
        if (ok) fs.rmSync(dir, {recursive: true, force: true});
    }
}

runMain(main);
