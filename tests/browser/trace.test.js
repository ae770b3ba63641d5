#!/usr/bin/env node
/*
 * Browser test of the trace on demand (docs/profile.md, "Trace"): a real `psflow up` cluster
 * on 127.0.0.1 (2 ps and 2 worker agents), a sync Fashion-MNIST softmax job submitted through
 * the API, the job page in Debian's chromium driven by playwright-core, and the trace opened
 * in that chromium's own trace viewer (DevTools' Performance panel, devtools://devtools/
 * bundled/trace_app.html). Run it through run_test.sh trace (ctest -R test_trace_dashboard).
 *
 * What it checks, in order:
 *   1. the Step breakdown card's "Record a trace of 20 steps" records one: the page says
 *      which steps, then that the trace is complete, and "Download trace" saves a file;
 *   2. the file is trace-event JSON: metadata naming each task (ps-0, ps-1, worker-0,
 *      worker-1) and its thread, complete events ("X") with ts and dur, the 20 steps of
 *      each training task with its phases in order (input, compute, push, barrier) and no
 *      overlap, each ps's apply and copy; the clocks aligned: every apply of a ps lies within
 *      a worker's barrier (a push is taken while its worker waits) and at least one a step
 *      within barriers of both (the update, while both wait), within 2 ms;
 *   3. the Performance panel loads the file ("Load trace…") without errors and shows its
 *      timeline (screenshot trace.png); its importer (the panel's trace engine) finds each
 *      task's thread with all its spans (as many of each phase: spans of one microsecond
 *      sort either way, so their order is checked in the file, step 2);
 *   and no console errors on the job page.
 */
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const {ARTIFACTS, launchChromium, log, check, waitFor, api, Cluster, ConsoleWatch, runMain,
    softmaxSpec} = require('./harness.js');

const SRC = process.env.PSFLOW_SRC;
const BIN = process.env.PSFLOW_BIN;
const STEPS = 20;
const TASKS = ['ps-0', 'ps-1', 'worker-0', 'worker-1'];

/* The file's spans by task: {task: [{name, ts, dur, step}]} in time order, and its threads. */
function spansByTask(trace) {
    const names = {}, threads = {}, out = {};
    for (const e of trace.traceEvents) {
        if (e.ph === 'M' && e.name === 'process_name') names[e.pid] = e.args.name;
        if (e.ph === 'M' && e.name === 'thread_name') threads[e.pid] = e.args.name;
    }
    for (const e of trace.traceEvents) {
        if (e.ph !== 'X') continue;
        if (!(typeof e.ts === 'number' && typeof e.dur === 'number' && e.dur >= 0 && e.pid in names && e.tid === 1))
            throw new Error('not a complete event of a named task: ' + JSON.stringify(e));
        (out[names[e.pid]] = out[names[e.pid]] || []).push({name: e.name, ts: e.ts, dur: e.dur,
            step: e.args ? e.args.step : undefined});
    }
    for (const k of Object.keys(out)) out[k].sort((a, b) => a.ts - b.ts);
    return {spans: out, names, threads};
}

/* A training task's steps: each one's phases in order, checkpoint and evaluate aside, with
 * repeats (the finite check after the gradient is compute too) folded. */
function stepPhases(spans) {
    const steps = new Map();
    for (const s of spans) {
        if (s.name === 'checkpoint' || s.name === 'evaluate') continue;
        const list = steps.get(s.step) || [];
        if (list[list.length - 1] !== s.name) list.push(s.name);
        steps.set(s.step, list);
    }
    return steps;
}

async function loadInDevTools(browser, file) {
    const page = await (await browser.newContext({viewport: {width: 1400, height: 900}})).newPage();
    const errors = [];
    page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
    page.on('pageerror', (e) => errors.push('uncaught: ' + e.message));
    await page.goto('devtools://devtools/bundled/trace_app.html', {waitUntil: 'commit'});
    /* the Performance tab, once the app is up; a dialog saying that no page is attached
     * comes up meanwhile, over everything: closed (Escape) until the tab takes the click */
    const perf = page.getByRole('tab', {name: 'Performance'}).locator('visible=true').first();
    await perf.waitFor({timeout: 30000});
    await waitFor('the Performance tab to take a click', async () => {
        await page.keyboard.press('Escape');
        await perf.click({timeout: 1000});
        return true;
    }, 30000, 200);
    log('DevTools: the Performance panel is open');
    const load = page.locator('[aria-label^="Load"]').locator('visible=true').first();
    await load.waitFor({timeout: 30000});
    const [chooser] = await Promise.all([page.waitForEvent('filechooser', {timeout: 30000}),
        load.click({timeout: 30000})]);
    await chooser.setFiles(file);
    log('DevTools: loading ' + path.basename(file));
    /* the summary tabs under the timeline come with a loaded trace */
    await page.getByRole('tab', {name: 'Bottom-up'}).locator('visible=true').first().waitFor({timeout: 30000});
    await page.waitForTimeout(1000);
    await page.screenshot({path: path.join(ARTIFACTS, 'trace.png')});
    /* the panel's own importer, on the same events: processes, threads, and their entries */
    const parsed = await page.evaluate(async (events) => {
        const Trace = await import('./models/trace/trace.js');
        const model = Trace.TraceModel.Model.createWithAllHandlers();
        await model.parse(events, {metadata: {}, isFreshRecording: false});
        const data = model.parsedTrace(0);
        const d = data.data || data;
        const out = [];
        for (const [pid, proc] of d.Renderer.processes)
            for (const [tid, th] of proc.threads)
                out.push({pid, tid, thread: th.name, names: (th.entries || []).map((e) => e.name)});
        return out;
    }, JSON.parse(fs.readFileSync(file, 'utf8')).traceEvents);
    return {parsed, errors};
}

async function main() {
    if (!SRC || !BIN) throw new Error('PSFLOW_SRC and PSFLOW_BIN must be set (run run_test.sh trace)');
    fs.mkdirSync(ARTIFACTS, {recursive: true});
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'psflow-trace-'));
    const cluster = new Cluster(dir);
    let browser = null;
    let ok = false;
    try {
        await cluster.start(2, 2);
        const base = cluster.url;
        const name = 'trace-' + Date.now().toString(36);
        await api(base, 'POST', '/api/v1/jobs', softmaxSpec(SRC, name, 2, 2, 10000000));
        log('cluster up at ' + base + '; submitted ' + name);
        await waitFor('the job to report steps', async () => {
            const j = await api(base, 'GET', '/api/v1/jobs/' + name);
            return j.status.global_step > 0;
        }, 120000, 500);

        browser = await launchChromium();
        const context = await browser.newContext({viewport: {width: 1280, height: 1000}, acceptDownloads: true});
        const page = await context.newPage();
        const consoleWatch = new ConsoleWatch(page);
        await page.goto(base + '/#/jobs/' + name);

        /* ---- 1. record from the page, download */
        const record = page.locator('[data-testid="trace-record"]');
        await record.waitFor({state: 'visible', timeout: 60000});
        await record.click();
        const state = page.locator('[data-testid="trace-state"]');
        const recording = await waitFor('the page to say what it records', async () => {
            const t = await state.textContent();
            return /recording steps \d+–\d+/.test(t) ? t : null;
        }, 15000, 100);
        check(true, 'the page: "' + recording + '"');
        const done = await waitFor('the trace to complete', async () => {
            const t = await state.textContent();
            return /^Trace \d+ of steps/.test(t) ? t : null;
        }, 120000, 250);
        check(true, 'the page: "' + done + '"');
        const [download] = await Promise.all([page.waitForEvent('download', {timeout: 15000}),
            page.locator('[data-testid="trace-download"]').click()]);
        const file = path.join(dir, download.suggestedFilename());
        await download.saveAs(file);
        check(/^trace-.*-trace-\d+\.json$/.test(download.suggestedFilename()),
            'Download trace saved ' + download.suggestedFilename() + ' (' + fs.statSync(file).size + ' bytes)');

        /* ---- 2. the file */
        const trace = JSON.parse(fs.readFileSync(file, 'utf8'));
        const apiTrace = await api(base, 'GET', '/api/v1/jobs/' + name + '/trace');
        check(JSON.stringify(apiTrace) === JSON.stringify(trace), 'the file is GET .../trace\'s answer');
        check(trace.psflow.state === 'complete' && trace.psflow.missing.length === 0 &&
            trace.psflow.steps === STEPS, 'complete, every task sent its spans (' +
            trace.psflow.tasks.map((t) => t.task + ' ' + t.shown + '/' + t.spans).join(', ') + ')');
        const {spans, threads, names} = spansByTask(trace);
        check(TASKS.every((t) => Object.values(names).includes(t) && spans[t] && spans[t].length > 0),
            'one process per task, each with spans: ' + TASKS.map((t) => t + ' ' + (spans[t] || []).length).join(', '));
        const from = trace.psflow.from;
        for (const t of ['worker-0', 'worker-1']) {
            const steps = stepPhases(spans[t]);
            const want = Array.from({length: STEPS}, (_, i) => from + i);
            check(JSON.stringify([...steps.keys()]) === JSON.stringify(want),
                t + ': steps ' + from + ' to ' + (from + STEPS - 1) + ', each once');
            const bad = [...steps.entries()].filter(([, p]) => p.join(' ') !== 'input compute push barrier');
            check(bad.length === 0, t + ': every step is input, compute, push, barrier in this order' +
                (bad.length ? ' (not: ' + JSON.stringify(bad.slice(0, 3)) + ')' : ''));
            const overlaps = spans[t].filter((s, i) => i > 0 &&
                s.ts < spans[t][i - 1].ts + spans[t][i - 1].dur - 1).length;
            check(overlaps === 0, t + ': its spans follow each other (' + spans[t].length + ' spans, thread "' +
                threads[Object.keys(names).find((p) => names[p] === t)] + '")');
        }
        const barriers = ['worker-0', 'worker-1'].map((t) => spans[t].filter((s) => s.name === 'barrier'));
        for (const p of ['ps-0', 'ps-1']) {
            const kinds = new Set(spans[p].map((s) => s.name));
            check(kinds.has('apply') && kinds.has('copy'), p + ': apply and copy (' + [...kinds].join(', ') + ')');
            /* a push is taken (aggregated) while its worker waits, and the step's update while
             * both do */
            const applies = spans[p].filter((s) => s.name === 'apply');
            const within = (a, bs) => bs.some((b) => b.ts - 2000 <= a.ts && a.ts + a.dur <= b.ts + b.dur + 2000);
            const inOne = applies.filter((a) => barriers.some((bs) => within(a, bs))).length;
            const inBoth = applies.filter((a) => barriers.every((bs) => within(a, bs))).length;
            check(applies.length >= STEPS && inOne === applies.length && inBoth >= STEPS,
                p + ': each of its ' + applies.length + ' applies lies within a barrier of a worker, ' +
                inBoth + ' (at least one a step: the update) within barriers of both (clocks aligned within 2 ms)');
        }

        /* ---- 3. Chromium's trace viewer */
        const {parsed, errors} = await loadInDevTools(browser, file);
        check(errors.length === 0, 'the Performance panel loaded the file without errors' +
            (errors.length ? ': ' + errors.join(' | ') : '') + ' (screenshot trace.png)');
        for (const t of TASKS) {
            const pid = Number(Object.keys(names).find((p) => names[p] === t));
            const th = parsed.find((x) => x.pid === pid && x.tid === 1);
            const count = (list) => JSON.stringify(Object.entries(list.reduce((a, n) =>
                Object.assign(a, {[n]: (a[n] || 0) + 1}), {})).sort());
            const mine = spans[t].map((s) => s.name);
            check(th && count(th.names) === count(mine), t + ': the panel\'s importer has its thread "' +
                (th && th.thread) + '" with its ' + mine.length + ' spans, phase by phase ' + count(mine));
        }
        check(consoleWatch.unexpected.length === 0, 'no console errors on the job page' +
            (consoleWatch.unexpected.length ? ': ' + consoleWatch.unexpected.join(' | ') : ''));
        await api(base, 'POST', '/api/v1/jobs/' + name + '/cancel');
        log('screenshot in ' + ARTIFACTS + ': trace.png');
        ok = true;
    } finally {
        if (browser) await browser.close().catch(() => {});
        if (!ok) cluster.dumpLogs();
        await cluster.stop();
        if (ok) fs.rmSync(dir, {recursive: true, force: true});
    }
}

runMain(main);
