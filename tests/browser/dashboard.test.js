#!/usr/bin/env node
/*
 * Browser test of the dashboard (web/): a real cluster on 127.0.0.1, a job trained through the
 * API, and Debian's chromium driven by playwright-core (no browser download). Run it through
 * run_test.sh dashboard (ctest -R test_dashboard), which installs the npm packages and skips when chromium
 * is missing.
 *
 * Environment: PSFLOW_BIN (the built psflow), PSFLOW_SRC (the source tree), PSFLOW_ARTIFACTS
 * (screenshots; default tests/browser/artifacts), PSFLOW_CHROMIUM (default /usr/bin/chromium),
 * PSFLOW_DASHBOARD_MOCK=1 (runs the same checks against tests/browser/mock-server.js instead of
 * psflow: a development aid for the page, not a test of psflow).
 *
 * What it checks, in order:
 *   1. an invalid spec submitted from the page shows the API's error next to its field and in the
 *      list under the spec text;
 *   2. a small sync job submitted through the API: the global step shown increases, the loss
 *      chart gains points while it trains, the placement view lists every variable with bytes
 *      summing to the model's size, the task table lists every task, the phase reaches Succeeded;
 *   3. the coordinator is killed: the page shows "reconnecting"; it is restarted on the same
 *      database: the page is "live" again, without a reload, and has re-fetched its state;
 *   4. an embedding model's job (synthetic_ctr, async): its placement view marks the tables'
 *      shards with their rows, and each ps bar shows the rows a second it serves and receives,
 *      above zero while it trains, and (not against the mock) a dynamic table's share on each
 *      ps with its rows, admissions, evictions and lookups a second; the summary shows the
 *      chief's test AUC and calibration of
 *      this two-class model once it has evaluated, and beside the AUC the data's Bayes-optimal
 *      AUC (the job's status.bayes_auc); the job is then cancelled;
 *   4b. examples/fashion-mnist-mlp.json, shortened to 300 steps (greedy placement over max_size
 *      shards): the placement view shows an imbalance of at most 1.2, not marked as a warning
 *      (screenshot placement-fmnist.png), and the job succeeds;
 *   5. a job with as many metric points as the coordinator keeps (docs/operations.md: 20,000
 *      rows a job, 20,000 / n for each of its n training tasks): an async job the cluster's
 *      agents run until its workers have started, then cancelled, so that nothing else writes
 *      to it; its workers' rows are then filled up to their share with points posted through
 *      the metrics API as those workers (with their current incarnation, the agent token, and
 *      steps above those the job trained), and total_points is checked against the bound. It
 *      prints how long the job's page takes to open and how long each live update takes to
 *      redraw (figures, not pass/fail), and asserts that each point POSTed to
 *      /api/v1/jobs/NAME/metrics is drawn within 1 s;
 *   and no console errors other than the ones steps 1 and 4 cause on purpose.
 */
'use strict';

const {spawn} = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');
const {ARTIFACTS, launchChromium, log, check, waitFor, fatal, freePort, api, ConsoleWatch, runMain} = require('./harness.js');

const SRC = process.env.PSFLOW_SRC;
const BIN = process.env.PSFLOW_BIN;
const MOCK = process.env.PSFLOW_DASHBOARD_MOCK === '1';
/* The agent token of psflow up's coordinator: the metric reports this test makes as an agent
 * would need it ('' against the mock server). */
let agentToken = '';
const agentAuth = () => (agentToken ? {Authorization: 'Bearer ' + agentToken} : {});
/* The coordinator's retention of metric points (docs/operations.md, COORD_STORE_METRIC_ROWS and
 * COORD_STORE_MIN_TASK_ROWS): a job keeps at most 20,000 rows, 20,000 / n for each of its n
 * training tasks (chief and workers), at least 64 each; a task holding more is thinned. */
const METRIC_ROWS = 20000;
const MIN_TASK_ROWS = 64;
const metricRowsPerTask = (nTasks) => Math.max(MIN_TASK_ROWS, Math.floor(nTasks > 0 ? METRIC_ROWS / nTasks : METRIC_ROWS));
/* Live points posted into the big job (half to each of its two workers). */
const LIVE_POSTS = 20;
const LATENCY_LIMIT_MS = 1000;

function median(xs) {
    const s = xs.slice().sort((a, b) => a - b);
    return s.length ? s[Math.floor((s.length - 1) / 2)] : NaN;
}

/* ------------------------------------------------------------------ the cluster */

/* A process whose output goes to a log file in the work dir; exited resolves with its status. */
class Proc {
    constructor(name, cmd, args, dir) {
        this.name = name;
        this.logPath = path.join(dir, name + '.log');
        const out = fs.openSync(this.logPath, 'a');
        this.child = spawn(cmd, args, {cwd: dir, stdio: ['ignore', out, out], env: process.env});
        fs.closeSync(out);
        this.exited = new Promise((resolve) => this.child.on('exit', (code, sig) => resolve({code, sig})));
        this.running = true;
        this.exited.then(() => {
            this.running = false;
        });
    }
    async kill(sig, graceMs) {
        if (this.running) this.child.kill(sig || 'SIGTERM');
        const timer = setTimeout(() => this.running && this.child.kill('SIGKILL'), graceMs || 10000);
        await this.exited;
        clearTimeout(timer);
    }
    tail(n) {
        try {
            return fs.readFileSync(this.logPath, 'utf8').split('\n').slice(-(n || 30)).join('\n');
        } catch (e) {
            return '';
        }
    }
}

/* `psflow up --ps 2 --workers 2` on a port of ours. Its coordinator is killed with SIGKILL and
 * restarted as a `psflow coordinator` of our own on the same port and database; up's agents
 * keep running and register with it again. */
class Cluster {
    constructor(dir) {
        this.dir = dir;
        this.procs = [];
        this.coordinatorPid = null;
        this.coordinator = null;
    }

    async start() {
        this.port = await freePort();
        this.url = 'http://127.0.0.1:' + this.port;
        this.db = path.join(this.dir, 'up', 'psflow.db');
        if (MOCK) {
            await this.startCoordinator();
            return;
        }
        /* The coordinator up starts finds the dashboard through PSFLOW_WEB (the --web twin). */
        process.env.PSFLOW_WEB = path.join(SRC, 'web');
        /* Three worker agents: two train, one runs the job's evaluator. */
        const up = new Proc('up', BIN, ['up', '--ps', '2', '--workers', '3', '--port', String(this.port),
            '--dir', path.join(this.dir, 'up')], this.dir);
        this.procs.push(up);
        const m = await waitFor('psflow up to print the dashboard URL and the coordinator pid', async () => {
            if (!up.running) throw fatal('psflow up exited:\n' + up.tail());
            const text = fs.readFileSync(up.logPath, 'utf8');
            const pid = /coordinator \S+ \(pid (\d+)/.exec(text);
            return pid && text.includes('dashboard: ' + this.url) ? pid : null;
        }, 60000, 100);
        this.coordinatorPid = Number(m[1]);
        agentToken = fs.readFileSync(path.join(this.dir, 'up', 'agent-token'), 'utf8').trim();
        await waitFor('4 agents registered', async () => {
            const nodes = await api(this.url, 'GET', '/api/v1/nodes');
            return nodes.items.filter((n) => n.state !== 'lost').length >= 4;
        }, 30000, 200);
    }

    async startCoordinator() {
        const n = this.procs.filter((p) => p.name.startsWith('coordinator')).length;
        const proc = MOCK ?
            new Proc('coordinator-' + n, process.execPath,
                [path.join(SRC, 'tests', 'browser', 'mock-server.js'), '--port', String(this.port),
                    '--state', path.join(this.dir, 'mock-state.json')], this.dir) :
            new Proc('coordinator-' + n, BIN, ['coordinator', '--listen', '127.0.0.1:' + this.port,
                '--db', this.db, '--web', path.join(SRC, 'web')], this.dir);
        this.procs.push(proc);
        this.coordinator = proc;
        await waitFor('the coordinator to answer', async () => {
            if (!proc.running) throw fatal('coordinator exited:\n' + proc.tail());
            return (await fetch(this.url + (MOCK ? '/api/v1/jobs' : '/readyz'))).ok;
        }, 20000, 100);
    }

    async killCoordinator() {
        if (this.coordinator) {
            await this.coordinator.kill('SIGKILL');
            return;
        }
        process.kill(this.coordinatorPid, 'SIGKILL');
        await waitFor('the coordinator to die', async () => {
            try {
                process.kill(this.coordinatorPid, 0);
            } catch (e) {
                return true;
            }
            /* A zombie until psflow up reaps it: it no longer answers. */
            return !(await fetch(this.url + '/livez').then((r) => r.ok, () => false));
        }, 10000, 50);
    }

    /* up first, which stops its agents (they deregister from the coordinator that is running)
     * and its coordinator, then the coordinator this test restarted. */
    async stop() {
        await Promise.all(this.procs.filter((p) => p.name === 'up').map((p) => p.kill('SIGTERM', 40000)));
        await Promise.all(this.procs.filter((p) => p.name !== 'up').map((p) => p.kill('SIGTERM')));
    }

    dumpLogs() {
        const logs = [...this.procs.map((p) => [p.name, p.logPath])];
        const upLogs = path.join(this.dir, 'up', 'logs');
        if (fs.existsSync(upLogs)) {
            for (const f of fs.readdirSync(upLogs)) logs.push(['up/' + f, path.join(upLogs, f)]);
        }
        for (const [name, file] of logs) {
            let text = '';
            try {
                text = fs.readFileSync(file, 'utf8').split('\n').slice(-40).join('\n');
            } catch (e) {
                text = '(no log)';
            }
            console.log('---- ' + name + ' (' + file + ')\n' + text);
        }
    }
}

/* ------------------------------------------------------------------ the job */

function trainingSpec(name) {
    return {
        name,
        /* The mock coordinator runs no evaluator. */
        replicas: MOCK ? {ps: 2, worker: 2} : {ps: 2, worker: 2, evaluator: 1},
        model: {type: 'softmax', inputs: 784, outputs: 10},
        data: {format: 'idx',
            train: ['/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz',
                '/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz'],
            test: ['/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz',
                '/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz']},
        optimizer: {type: 'adam', learning_rate: 0.005},
        training: {mode: 'sync', batch_size: 100, max_steps: 10000, seed: 1, eval_every_steps: 2000},
        checkpoint: {every_steps: 2500, every_secs: 600, keep: 5},
    };
}

/* The variables of a softmax or mlp spec with their sizes in bytes (float32). */
function expectedVariables(spec) {
    const m = spec.model;
    const dims = m.type === 'softmax' ? [m.inputs, m.outputs] :
        m.type === 'linear' ? [m.inputs || 1, 1] : [m.inputs, ...(m.hidden || []), m.outputs];
    const vars = {};
    for (let l = 0; l + 1 < dims.length; l++) {
        vars['dense_' + l + '/kernel'] = dims[l] * dims[l + 1] * 4;
        vars['dense_' + l + '/bias'] = dims[l + 1] * 4;
    }
    return vars;
}

/* ------------------------------------------------------------------ the browser */

const bodyData = (page, key) => page.evaluate((k) => document.body.dataset[k], key);

/* Waits until the page shows route hash (a hash change is asynchronous after a click) and has
 * applied that page's snapshot. */
function waitForRoute(page, hash, kind) {
    return page.waitForFunction(({hash, kind}) => location.hash === hash && document.body.dataset.page === kind &&
        document.body.dataset.loaded === '1', {hash, kind}, {timeout: 10000});
}
const stats = (page) => page.evaluate(() => Object.assign({}, window.psflowStats));

/* POSTs one loss point from inside the page, as task `task` of its current incarnation
 * `incarnation` (with the agent token, as an agent reports), and returns how long until the
 * chart drew it, both measured with the page's performance.now(). */
async function postPointAndTime(page, base, job, task, incarnation, step, loss) {
    const sent = await page.evaluate(async ({job, task, incarnation, step, loss, auth}) => {
        const t = performance.now();
        const res = await fetch('/api/v1/jobs/' + encodeURIComponent(job) + '/metrics', {
            method: 'POST', headers: Object.assign({'Content-Type': 'application/json'}, auth),
            body: JSON.stringify({task, incarnation, points: [{step, time: Date.now() / 1000, loss,
                examples_per_sec: 1000, step_time_seconds: 0.05}]}),
        });
        return {t, status: res.status, text: res.status === 204 ? '' : await res.text()};
    }, {job, task, incarnation, step, loss, auth: agentAuth()});
    if (sent.status !== 204) {
        throw new Error('POST metrics as ' + task + ' answered ' + sent.status + ', expected 204: ' + sent.text.slice(0, 300));
    }
    const drawn = await waitFor('step ' + step + ' to be drawn on the loss chart', async () => {
        const s = await stats(page);
        return s.lastPointStep >= step ? s : null;
    }, 10000, 10);
    return {latency: drawn.lastPointDrawnAt - sent.t, drawMs: drawn.lastDrawMs};
}

async function main() {
    if (!SRC || (!BIN && !MOCK)) throw new Error('PSFLOW_SRC and PSFLOW_BIN must be set (run run_test.sh dashboard)');
    fs.mkdirSync(ARTIFACTS, {recursive: true});
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'psflow-browser-'));
    const cluster = new Cluster(dir);
    let browser = null;
    let ok = false;
    try {
        await cluster.start();
        const base = cluster.url;
        log('cluster up at ' + base + (MOCK ? ' (mock coordinator)' : '') + ', work dir ' + dir);

        browser = await launchChromium();
        const context = await browser.newContext({viewport: {width: 1280, height: 800}});
        const page = await context.newPage();
        const consoleWatch = new ConsoleWatch(page);
        page.on('dialog', (d) => d.accept());

        /* ---- jobs page and an invalid spec submitted from it */
        await page.goto(base + '/');
        await page.waitForSelector('body[data-page="jobs"][data-loaded="1"][data-connection="live"]', {timeout: 15000});
        check(true, 'jobs page loaded and the stream is live');

        const suffix = Date.now().toString(36);
        const badName = 'bad-' + suffix;
        await page.fill('#f-name', badName);
        await page.fill('#f-training-batch_size', '0');
        const badSpec = JSON.parse(await page.inputValue('[data-testid="spec-text"]'));
        check(badSpec.training.batch_size === 0 && badSpec.name === badName,
            'the quick fields edit the spec text (batch_size 0, name ' + badName + ')');
        let apiErr = null;
        try {
            await api(base, 'POST', '/api/v1/jobs', badSpec);
        } catch (e) {
            apiErr = e;
        }
        check(apiErr && apiErr.status === 422, 'the API answers 422 to batch_size 0');
        const want = (apiErr.body.errors || []).find((e) => e.pointer === '/training/batch_size');
        check(want, 'the 422 names /training/batch_size in errors[] (' + JSON.stringify(apiErr.body.errors) + ')');
        await consoleWatch.allowing('the invalid spec answers 422', /status of 422/, async () => {
            await page.click('[data-testid="submit-job"]');
            await page.waitForSelector('.field[data-pointer="/training/batch_size"] .field-error:not(:empty)', {timeout: 5000});
        });
        /* The page drops a leading "POINTER: " from the message, since it shows the pointer. */
        const wantText = want.message.startsWith(want.pointer + ': ') ? want.message.slice(want.pointer.length + 2) : want.message;
        const shown = await page.textContent('.field[data-pointer="/training/batch_size"] .field-error');
        check(shown === wantText, 'the API\'s message "' + wantText + '" is shown next to the batch size field');
        const listed = await page.textContent('[data-testid="spec-errors"] li[data-pointer="/training/batch_size"]');
        check(listed.includes('/training/batch_size') && listed.includes(wantText),
            'the error list under the spec names the pointer and the message');
        check(await page.getAttribute('#f-training-batch_size', 'aria-invalid') === 'true',
            'the batch size input is marked aria-invalid');
        await page.screenshot({path: path.join(ARTIFACTS, 'jobs-invalid-full.png'), fullPage: true, animations: 'disabled'});

        /* ---- a job trained through the API, watched on its page */
        const spec = trainingSpec('dash-' + suffix);
        const name = spec.name;
        const maxSteps = spec.training.max_steps;
        await api(base, 'POST', '/api/v1/jobs', spec);
        log('submitted ' + name + ' (' + maxSteps + ' sync steps, 2 ps, 2 workers)');
        const link = page.locator('[data-testid="jobs-table"] a', {hasText: name});
        await link.waitFor({timeout: 5000});
        await link.click();
        await waitForRoute(page, '#/jobs/' + name, 'job');
        /* Sample what the page shows every 50 ms while the job runs. */
        await page.evaluate(() => {
            window.__samples = [];
            window.__sampler = setInterval(() => {
                const el = document.querySelector('[data-testid="global-step"]');
                window.__samples.push({phase: document.body.dataset.phase, step: Number(el.dataset.value || -1),
                    text: el.textContent, points: window.psflowStats.points});
            }, 50);
        });
        let runningShot = false;
        /* How long the job takes depends on the machine (sanitizer builds on two shared cores run it
         * several times slower), so the wait fails only when the step shown stops advancing for
         * STALL_MS, or after the test's own limit. */
        const STALL_MS = 90000;
        let lastStep = -1, lastAdvance = Date.now();
        /* Steps/s as the page shows it against the API's status.steps_per_sec, read between two
         * GETs that agree (the figure did not move meanwhile). The page follows the event stream,
         * which may be a report or two behind a GET on a loaded machine: a read agrees when the
         * page shows one of the last few figures the API gave. */
        const rateReads = [];
        const recentRates = [];
        const readRate = async () => {
            const a = (await api(base, 'GET', '/api/v1/jobs/' + name)).status;
            const shown = await page.textContent('[data-testid="steps-per-sec"]');
            const b = (await api(base, 'GET', '/api/v1/jobs/' + name)).status;
            if (a.phase !== 'Running' || b.phase !== 'Running' || a.steps_per_sec !== b.steps_per_sec ||
                a.stalled || b.stalled) return;
            recentRates.push(a.steps_per_sec);
            if (recentRates.length > 4) recentRates.shift();
            const wants = await page.evaluate(async (vs) => {
                const {fmtRate} = await import('./js/format.js');
                return vs.map((v) => fmtRate(v));
            }, recentRates);
            const want = wants[wants.length - 1];
            rateReads.push({shown, want, ok: wants.includes(shown), api: a.steps_per_sec});
        };
        await waitFor(name + ' to succeed', async () => {
            const phase = await bodyData(page, 'phase');
            if (phase === 'Failed') throw fatal(name + ' failed');
            if (phase === 'Running') await readRate();
            /* One picture mid-run, for people; nothing depends on catching that moment. */
            const step = Number(await page.getAttribute('[data-testid="global-step"]', 'data-value'));
            if (step > lastStep) {
                lastStep = step;
                lastAdvance = Date.now();
            } else if (Date.now() - lastAdvance > STALL_MS) {
                throw fatal('the global step shown stayed at ' + lastStep + ' for ' + STALL_MS / 1000 + ' s');
            }
            if (!runningShot && phase === 'Running' && step >= maxSteps / 3) {
                runningShot = true;
                await page.screenshot({path: path.join(ARTIFACTS, 'job-running.png'), animations: 'disabled'});
            }
            return phase === 'Succeeded';
        }, 420000, 250).catch(async (e) => {
            log('job status: ' + JSON.stringify((await api(base, 'GET', '/api/v1/jobs/' + name)).status));
            throw e;
        });
        const samples = await page.evaluate(() => {
            clearInterval(window.__sampler);
            return window.__samples;
        });
        const running = samples.filter((s) => s.phase === 'Running');
        const steps = [...new Set(samples.map((s) => s.step).filter((s) => s >= 0))];
        const increasing = steps.every((s, i) => i === 0 || s > steps[i - 1]);
        check(steps.length >= 3 && increasing,
            'the global step shown increased through ' + steps.length + ' values (' + steps.slice(0, 6).join(', ') +
            (steps.length > 6 ? ', …' : '') + ')');
        check(steps[steps.length - 1] === maxSteps, 'the global step shown ends at max_steps ' + maxSteps);
        const runPoints = [...new Set(running.map((s) => s.points))];
        check(runPoints.length >= 2 && runPoints[runPoints.length - 1] > runPoints[0],
            'the loss chart gained points while the job ran (' + runPoints[0] + ' → ' + runPoints[runPoints.length - 1] + ')');
        const stepText = await page.textContent('[data-testid="global-step"]');
        check(stepText.replace(/,/g, '').startsWith(String(maxSteps)), 'the header shows global step "' + stepText + '"');
        /* The page shows the API's figure (most reads, not all, show one of the API's last few). */
        const agree = rateReads.filter((r) => r.ok).length;
        const measured = rateReads.filter((r) => r.api !== null);
        check(agree * 2 >= rateReads.length && (!measured.length || measured.some((r) => r.ok)),
            'Steps/s on the page is the API\'s steps_per_sec in ' + agree + ' of ' + rateReads.length + ' reads (' +
            measured.slice(-4).map((r) => r.shown + ' vs ' + r.want).join(', ') + ')');

        const expected = expectedVariables(spec);
        const expectedTotal = Object.values(expected).reduce((a, b) => a + b, 0);
        await page.waitForSelector('[data-testid="placement-table"] tbody tr', {timeout: 10000});
        const rows = await page.$$eval('[data-testid="placement-table"] tbody tr',
            (trs) => trs.map((tr) => ({variable: tr.dataset.variable, bytes: Number(tr.dataset.bytes),
                ps: tr.children[5].textContent})));
        const got = {};
        for (const r of rows) got[r.variable] = (got[r.variable] || 0) + r.bytes;
        check(JSON.stringify(Object.keys(got).sort()) === JSON.stringify(Object.keys(expected).sort()),
            'the placement view lists every variable: ' + Object.keys(got).sort().join(', '));
        for (const [v, b] of Object.entries(expected)) check(got[v] === b, v + ' has ' + b + ' bytes');
        const shownTotal = rows.reduce((a, r) => a + r.bytes, 0);
        check(shownTotal === expectedTotal, 'placement bytes sum to the model size ' + expectedTotal);
        const bars = await page.$$eval('[data-testid="ps-bars"] .ps-bar', (els) => els.length);
        check(bars === spec.replicas.ps, 'one bar per ps (' + bars + ')');
        /* A finished job's ps applied every step: the count shown is final, not its last heartbeat's. */
        const wantUpdates = await page.evaluate(async (n) => (await import('./js/format.js')).fmtInt(n) + ' updates',
            maxSteps);
        const updates = await waitFor('the final update counts', async () => {
            const labels = await page.$$eval('[data-testid="ps-bars"] .ps-bar-track', (els) =>
                els.map((e) => e.getAttribute('aria-label')));
            return labels.every((l) => l.endsWith(wantUpdates)) && labels;
        }, 10000).catch(async () => page.$$eval('[data-testid="ps-bars"] .ps-bar-track', (els) =>
            els.map((e) => e.getAttribute('aria-label'))));
        check(updates.every((l) => l.endsWith(wantUpdates)),
            'each ps bar of the finished job shows "' + wantUpdates + '" (' + updates.join('; ') + ')');

        const taskKeys = await page.$$eval('[data-testid="task-table"] tbody tr', (trs) => trs.map((tr) => tr.dataset.task));
        const wantTasks = [];
        for (const t of ['ps', 'worker', 'evaluator']) for (let i = 0; i < (spec.replicas[t] || 0); i++) wantTasks.push(t + '-' + i);
        check(JSON.stringify(taskKeys.slice().sort()) === JSON.stringify(wantTasks.sort()),
            'the task table lists every task: ' + taskKeys.join(', '));
        /* Lag (training.max_staleness) is a column of its own; this sync job reports none. */
        const lagCol = await page.$$eval('[data-testid="task-table"] thead th', (ths) =>
            ths.map((th) => th.textContent).indexOf('Lag'));
        const lagCells = await page.$$eval('[data-testid="task-table"] tbody tr', (trs, k) =>
            trs.map((tr) => tr.children[k] ? tr.children[k].textContent : null), lagCol);
        check(lagCol > 0 && lagCells.every((v) => v === '—'),
            'the task table has a Lag column, "—" for a job without max_staleness (' + lagCells.join(' ') + ')');
        if (spec.replicas.evaluator) {
            /* The evaluator task's series: in the API, and drawn on the accuracy chart. */
            const m = await api(base, 'GET', '/api/v1/jobs/' + name + '/metrics');
            const evSteps = m.evals.filter((e) => e.task === 'evaluator').map((e) => e.step);
            check(evSteps.length >= 1, 'the API has the evaluator\'s evaluations (steps ' + evSteps.join(', ') + ')');
            const legend = await waitFor('the accuracy chart to show the evaluator series', async () => {
                const labels = await page.$$eval('[data-testid="accuracy-chart"] .u-legend .u-series th',
                    (ths) => ths.map((th) => th.textContent.trim()));
                return labels.includes('evaluator accuracy') ? labels : null;
            }, 10000, 100);
            check(true, 'the accuracy chart draws the evaluator series (legend: ' + legend.join(', ') + ')');
        }
        const evals = await page.$$eval('[data-testid="accuracy-chart"]', (els) => els.length && !els[0].hidden);
        log('accuracy chart visible: ' + evals + '; checkpoints listed: ' +
            await page.$$eval('[data-testid="checkpoints"] tbody tr', (trs) => trs.length));
        await page.evaluate(() => window.scrollTo(0, 0));
        await page.screenshot({path: path.join(ARTIFACTS, 'job.png'), animations: 'disabled'});
        await page.screenshot({path: path.join(ARTIFACTS, 'job-full.png'), fullPage: true, animations: 'disabled'});

        /* ---- coordinator restart: reconnecting, then live again without a reload */
        await page.evaluate(() => {
            window.__sameDocument = true;
        });
        const loadsBefore = Number(await bodyData(page, 'loads'));
        await consoleWatch.allowing('the coordinator is down', /ERR_CONNECTION_REFUSED|ERR_INCOMPLETE_CHUNKED_ENCODING|ERR_EMPTY_RESPONSE|ERR_CONNECTION_RESET|Failed to fetch/, async () => {
            const killedAt = Date.now();
            await cluster.killCoordinator();
            await page.waitForSelector('body[data-connection="reconnecting"]', {timeout: 10000});
            log('page shows reconnecting ' + (Date.now() - killedAt) + ' ms after the coordinator was killed');
            check((await page.textContent('#connection')).includes('Reconnecting'), 'the indicator reads "Reconnecting"');
            await page.screenshot({path: path.join(ARTIFACTS, 'job-reconnecting.png'), animations: 'disabled'});
            const restartAt = Date.now();
            await cluster.startCoordinator();
            await page.waitForSelector('body[data-connection="live"]', {timeout: 20000});
            log('page live again ' + (Date.now() - restartAt) + ' ms after the restart began');
            await waitFor('the page to re-fetch its state', async () => Number(await bodyData(page, 'loads')) > loadsBefore, 10000);
        });
        check(await page.evaluate(() => window.__sameDocument === true), 'the page was not reloaded');
        check(await bodyData(page, 'phase') === 'Succeeded', 'after the restart the page still shows Succeeded');
        const apiStep = (await api(base, 'GET', '/api/v1/jobs/' + name)).status.global_step;
        check(Number((await page.getAttribute('[data-testid="global-step"]', 'data-value'))) === apiStep,
            'after the restart the page shows the global step the API reports (' + apiStep + ')');

        /* ---- an embedding model: tables in the placement view, rows per second per ps */
        const ctrName = 'dash-ctr-' + suffix;
        /* and, against a real coordinator, a dynamic table (rows by 64-bit id, a share on each ps) */
        const dynamic = MOCK ? [] : [{name: 'item', kind: 'dynamic', max_rows: 50000, dim: 8}];
        await api(base, 'POST', '/api/v1/jobs', {
            name: ctrName, replicas: {ps: 2, worker: 2},
            model: {type: 'softmax', outputs: 2, embeddings: [{name: 'user', vocab: 100000, dim: 8}, ...dynamic]},
            data: {format: 'synthetic_ctr', n: 100000},
            optimizer: {type: 'adagrad', learning_rate: 0.5},
            training: {mode: 'async', batch_size: 100, max_steps: 100000000, eval_every_steps: 500},
            placement: {partitioner: {type: 'fixed_shards', num_shards: 2}}});
        await page.goto(base + '/#/jobs/' + ctrName);
        const tableRows = await waitFor('the placement view to list the table\'s shards', async () => {
            const r = await page.$$eval('[data-testid="placement-table"] tbody tr[data-kind="table"]',
                (trs) => trs.map((tr) => tr.children[6].textContent));
            return r.length === 2 ? r : null;
        }, 60000, 250);
        check(tableRows.every((t) => t.replace(/,/g, '') === '50000 (table)'),
            'the table\'s two shards show their rows (' + tableRows.join(', ') + ')');
        const rates = await waitFor('each ps bar to show rows a second above zero', async () => {
            const t = await page.$$eval('[data-testid="ps-rows"]', (els) => els.map((e) => e.textContent));
            return t.length === 2 && t.every((x) => /^[1-9][0-9,.]* rows\/s pulled, [1-9][0-9,.]* pushed$/.test(x)) ? t : null;
        }, 60000, 250);
        check(true, 'each ps bar shows the rows it serves and receives (' + rates.join('; ') + ')');
        if (!MOCK) {
            const shares = await page.$$eval('[data-testid="placement-table"] tbody tr[data-kind="dynamic"]',
                (trs) => trs.map((tr) => tr.children[6].textContent.replace(/,/g, '')));
            check(shares.length === 2 && shares.every((t) => t === 'up to 25000 (dynamic)'),
                'the dynamic table has a share on each ps (' + shares.join(', ') + ')');
            const held = await waitFor('each ps bar to show its share of the dynamic table', async () => {
                const t = await page.$$eval('[data-testid="ps-table"]', (els) => els.map((e) => e.textContent));
                return t.length === 2 && t.every((x) => /^item: [1-9][0-9,]* of 25,000 rows, [1-9][0-9,]* admitted, [0-9,]+ evicted, [0-9,.]+[kM]? lookups\/s$/.test(x)) ? t : null;
            }, 60000, 250);
            check(true, 'each ps bar shows its rows of the dynamic table (' + held.join('; ') + ')');
        }
        const quality = await waitFor('the summary to show the test AUC, calibration and Bayes-optimal AUC', async () => {
            const t = await page.$$eval('[data-testid="test-auc"], [data-testid="test-calibration"], [data-testid="bayes-auc"]',
                (els) => els.map((e) => (e.parentNode.hidden ? '' : e.dataset.testid + '=' + e.textContent)));
            const q = Object.fromEntries(t.filter((x) => /=[0-9]/.test(x)).map((x) => x.split('=')));
            return Object.keys(q).length === 3 ? q : null;
        }, 60000, 250);
        const [auc, cal, bayesShown] = ['test-auc', 'test-calibration', 'bayes-auc'].map((k) => Number(quality[k]));
        check(auc > 0.5 && auc <= 1 && cal > 0.5 && cal < 2,
            'the summary shows the two-class job\'s test AUC ' + auc + ' and calibration ' + cal);
        const bayesApi = (await api(base, 'GET', '/api/v1/jobs/' + ctrName)).status.bayes_auc;
        check(bayesShown > 0.5 && bayesShown <= 1 && bayesShown.toFixed(4) === Number(bayesApi).toFixed(4),
            'the summary shows the Bayes-optimal AUC ' + bayesShown + ' (status.bayes_auc ' + bayesApi + ')');
        check(await page.$eval('[data-testid="bayes-auc"]', (e) =>
            e.parentNode.previousElementSibling.querySelector('[data-testid="test-auc"]') !== null),
        'the Bayes-optimal AUC stands beside the test AUC');
        await page.locator('#placement').screenshot({path: path.join(ARTIFACTS, 'job-embeddings.png'), animations: 'disabled'});
        await api(base, 'POST', '/api/v1/jobs/' + ctrName + '/cancel');
        await waitFor('the embedding job to end (cancelled: Failed)', async () =>
            (await api(base, 'GET', '/api/v1/jobs/' + ctrName)).status.phase === 'Failed', 60000, 250);

        /* ---- the fashion-mnist example: both ps share its variables (greedy over max_size) */
        if (MOCK) {
            log('skipped against the mock (it places round robin): the fashion-mnist example\'s imbalance');
        } else {
            const fmSpec = JSON.parse(fs.readFileSync(path.join(SRC, 'examples', 'fashion-mnist-mlp.json'), 'utf8'));
            fmSpec.name = 'dash-fmnist-' + suffix;
            fmSpec.training.max_steps = 300;
            await api(base, 'POST', '/api/v1/jobs', fmSpec);
            await page.goto(base + '/#/jobs/' + fmSpec.name);
            /* This job's placement, not the previous page's: the MLP's last layer is listed. */
            const imbalance = await waitFor('the placement view to show the example\'s imbalance', async () => {
                const names = await page.$$eval('[data-testid="placement-table"] tbody tr', (trs) => trs.map((tr) => tr.textContent));
                const t = await page.textContent('[data-testid="imbalance"]');
                return names.some((x) => x.includes('dense_2/kernel')) && /^[0-9]/.test(t) ? Number(t) : null;
            }, 60000, 250);
            const warned = await page.$eval('[data-testid="imbalance"]', (e) => e.parentNode.classList.contains('warn'));
            const fmPlacement = await api(base, 'GET', '/api/v1/jobs/' + fmSpec.name + '/placement');
            const psBytes = fmPlacement.ps.map((x) => x.bytes);
            check(imbalance <= 1.2 && !warned && imbalance.toFixed(2) === fmPlacement.imbalance.toFixed(2),
                'the example\'s placement shows imbalance ' + imbalance.toFixed(2) + ' without a warning (ps bytes ' +
                psBytes.join(', ') + ', ' + fmPlacement.shards.length + ' shards)');
            await page.locator('#placement').screenshot({path: path.join(ARTIFACTS, 'placement-fmnist.png'), animations: 'disabled'});
            await waitFor('the example job (300 steps) to succeed', async () =>
                (await api(base, 'GET', '/api/v1/jobs/' + fmSpec.name)).status.phase === 'Succeeded', 180000, 500);
        }

        /* ---- a job with as many metric points as the coordinator keeps */
        const bigName = 'dash-big-' + suffix;
        const bigSpec = trainingSpec(bigName);
        /* Run by the cluster's agents (2 ps, 2 of the 3 worker agents), async with steps to spare:
         * a report is accepted only from a started task, with its current incarnation. */
        bigSpec.replicas = {ps: 2, worker: 2};
        bigSpec.training = {mode: 'async', batch_size: 100, max_steps: 100000000, seed: 1};
        delete bigSpec.checkpoint;
        await api(base, 'POST', '/api/v1/jobs', bigSpec);
        const workerNames = ['worker-0', 'worker-1'];
        const taskName = (t) => (t.type === 'worker' ? 'worker-' + t.index : t.type);
        const startedTasks = await waitFor('the big job\'s workers to start', async () => {
            const items = (await api(base, 'GET', '/api/v1/jobs/' + bigName + '/tasks')).items;
            const ws = items.filter((t) => workerNames.includes(taskName(t)));
            return ws.length === workerNames.length && ws.every((t) => t.incarnation > 0 && t.state === 'Running') &&
                (await api(base, 'GET', '/api/v1/jobs/' + bigName)).status.global_step > 0 ? items : null;
        }, 60000, 100);
        /* Cancelled once it trains: its agents stop, so only this test writes to it from here on
         * (the tasks keep their incarnation, so their reports are still accepted). */
        await api(base, 'POST', '/api/v1/jobs/' + bigName + '/cancel');
        await waitFor('the big job to end (cancelled: Failed) and its tasks to stop', async () => {
            const st = (await api(base, 'GET', '/api/v1/jobs/' + bigName)).status;
            const items = (await api(base, 'GET', '/api/v1/jobs/' + bigName + '/tasks')).items;
            return st.phase === 'Failed' && items.every((t) => t.state !== 'Running');
        }, 60000, 250);
        /* Its agents' last reports may still arrive: wait until the rows stop changing. */
        let lastTotal = -1, sameSince = Date.now();
        await waitFor('the big job\'s metric rows to stop changing', async () => {
            const total = (await api(base, 'GET', '/api/v1/jobs/' + bigName + '/metrics?max_points=1')).total_points;
            if (total !== lastTotal) {
                lastTotal = total;
                sameSince = Date.now();
            }
            return Date.now() - sameSince >= 2000;
        }, 60000, 250);
        const tasksNow = (await api(base, 'GET', '/api/v1/jobs/' + bigName + '/tasks')).items;
        const incarnation = {};
        for (const t of tasksNow) incarnation[taskName(t)] = t.incarnation;
        for (const w of workerNames) {
            const before = startedTasks.find((t) => taskName(t) === w).incarnation;
            check(incarnation[w] === before, w + ' keeps its incarnation ' + before + ' after the cancel');
        }
        /* The names its workers report as (api/rest.md): worker 0 of a job without a chief task
         * is its chief and reports as "chief"; the rows kept are counted per name. */
        const reporters = workerNames.map((w) => (w === 'worker-0' && !bigSpec.replicas.chief ? 'chief' : w));
        for (let k = 0; k < workerNames.length; k++) incarnation[reporters[k]] = incarnation[workerNames[k]];
        const trainingTasks = tasksNow.filter((t) => t.type === 'chief' || t.type === 'worker').length;
        const perTask = metricRowsPerTask(trainingTasks);
        const bound = perTask * trainingTasks;
        /* What the job trained: every point, raw (fewer than max_points), counted per task. */
        const trained = await api(base, 'GET', '/api/v1/jobs/' + bigName + '/metrics?max_points=100000');
        check(!trained.downsampled && trained.total_points <= bound,
            'the job trained ' + trained.total_points + ' metric points, within the bound of ' + bound);
        const trainedRows = {}; let trainedTop = 0;
        for (const p of trained.points) {
            trainedRows[p.task] = (trainedRows[p.task] || 0) + 1;
            trainedTop = Math.max(trainedTop, p.step);
        }
        /* Each worker is filled up to its share less its live posts, with steps above the job's. */
        const liveEach = LIVE_POSTS / reporters.length;
        const firstStep = trainedTop + 1;
        const fill = {};
        for (const w of reporters) fill[w] = Math.max(0, perTask - liveEach - (trainedRows[w] || 0));
        const topStep = firstStep + Math.max(...Object.values(fill));
        const batch = 5000;
        const insertStart = Date.now();
        let inserted = 0;
        for (const task of reporters) {
            for (let from = firstStep; from < firstStep + fill[task]; from += batch) {
                const points = [];
                for (let s = from; s < Math.min(from + batch, firstStep + fill[task]); s++) {
                    const k = s - firstStep;
                    points.push({step: s, time: 1.7e9 + k * 0.05, loss: 2.3 * Math.exp(-k / 3000) + 0.3 +
                        0.05 * Math.sin(k / 7) + (task === reporters[1] ? 0.02 : 0),
                    examples_per_sec: 2000 + (k % 100), step_time_seconds: 0.04 + (k % 13) / 1000});
                }
                await api(base, 'POST', '/api/v1/jobs/' + bigName + '/metrics',
                    {task, incarnation: incarnation[task], points}, agentAuth());
                inserted += points.length;
            }
        }
        log('inserted ' + inserted + ' metric points into ' + bigName + ' (as ' + reporters.join(', ') +
            ', steps ' + firstStep + '..' + (topStep - 1) + ', above the ' + trained.total_points +
            ' points it trained) in ' + (Date.now() - insertStart) + ' ms');
        const getStart = Date.now();
        const m = await api(base, 'GET', '/api/v1/jobs/' + bigName + '/metrics?max_points=2000');
        log('GET /metrics?max_points=2000 of that job answered in ' + (Date.now() - getStart) + ' ms with ' +
            m.points.length + ' points (part of the page\'s opening time below)');
        const BIG_POINTS = m.total_points;
        check(BIG_POINTS <= bound && BIG_POINTS >= 0.9 * bound,
            'the API holds ' + BIG_POINTS + ' points, within the retention bound ' + bound + ' (' + trainingTasks +
            ' training tasks x ' + perTask + ') and at least 90% of it');

        await page.click('a.back');
        await waitForRoute(page, '#/', 'jobs');
        await page.locator('[data-testid="jobs-table"] a', {hasText: bigName}).click();
        /* Read the figures only once the big job's page is the one showing. */
        const bigStats = () => page.evaluate((hash) => (location.hash === hash && document.body.dataset.page === 'job' &&
            window.psflowStats.loadMs !== null ? Object.assign({}, window.psflowStats) : null), '#/jobs/' + bigName);
        const opened = await waitFor('the big job\'s chart to be drawn', bigStats, 20000, 20);
        log('RESULT job page with ' + BIG_POINTS + ' points opened in ' + opened.loadMs.toFixed(0) +
            ' ms (route change to first chart draw; the chart holds ' + opened.points + ' downsampled points)');
        await page.goto('about:blank');
        await page.goto(base + '/#/jobs/' + bigName);
        const fresh = await waitFor('the big job\'s chart after a fresh load', bigStats, 20000, 20);
        /* The page asks for at most 2000 points (web/js/job_metrics.js): what it drew is that
         * downsampled series, a tenth of the job's points or so (exactly 2000 can come back,
         * which is BIG_POINTS / 10 only when the job holds 20000). */
        check(opened.points > 0 && opened.points <= 2000 && opened.points <= BIG_POINTS / 5,
            'the page loaded a downsampled series (' + opened.points + ' of ' + BIG_POINTS + ' points)');
        log('RESULT fresh page load of that job page: chart drawn ' + fresh.loadMs.toFixed(0) +
            ' ms after the page script started, ' + fresh.lastPointDrawnAt.toFixed(0) + ' ms after navigation start');
        await page.waitForSelector('body[data-connection="live"]', {timeout: 10000});
        const draws = [];
        const lats = [];
        for (let i = 1; i <= LIVE_POSTS; i++) {
            const task = reporters[i % reporters.length];
            const r = await postPointAndTime(page, base, bigName, task, incarnation[task], topStep + i, 0.31);
            draws.push(r.drawMs);
            lats.push(r.latency);
        }
        log('RESULT live update redraw with ' + BIG_POINTS + ' points in the job: median ' + median(draws).toFixed(1) +
            ' ms, max ' + Math.max(...draws).toFixed(1) + ' ms over ' + draws.length + ' updates');
        log('RESULT metric POST to drawn on the chart: median ' + median(lats).toFixed(1) + ' ms, max ' +
            Math.max(...lats).toFixed(1) + ' ms over ' + lats.length + ' posts');
        check(Math.max(...lats) < LATENCY_LIMIT_MS, 'every POSTed metric was drawn within ' + LATENCY_LIMIT_MS + ' ms');
        const kept = (await api(base, 'GET', '/api/v1/jobs/' + bigName + '/metrics?max_points=1')).total_points;
        check(kept <= bound && kept >= 0.9 * bound, 'after the live posts the job keeps ' + kept +
            ' points, within the retention bound ' + bound + ' and at least 90% of it');
        await page.screenshot({path: path.join(ARTIFACTS, 'job-big.png'), animations: 'disabled'});

        /* ---- the jobs page with both jobs */
        await page.goto(base + '/');
        await page.waitForSelector('body[data-page="jobs"][data-loaded="1"][data-connection="live"]', {timeout: 10000});
        await page.screenshot({path: path.join(ARTIFACTS, 'jobs.png'), animations: 'disabled'});
        await page.screenshot({path: path.join(ARTIFACTS, 'jobs-full.png'), fullPage: true, animations: 'disabled'});

        check(consoleWatch.unexpected.length === 0, 'no console errors' +
            (consoleWatch.unexpected.length ? ': ' + consoleWatch.unexpected.join(' | ') : ''));
        log('screenshots in ' + ARTIFACTS);
        ok = true;
    } finally {
        if (browser) await browser.close().catch(() => {});
        if (!ok) cluster.dumpLogs();
        await cluster.stop();
        if (ok) fs.rmSync(dir, {recursive: true, force: true});
    }
}

runMain(main);
