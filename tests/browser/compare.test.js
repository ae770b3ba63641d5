#!/usr/bin/env node
/*
 * Browser test of the dashboard's run comparison ("#/compare?jobs=A,B,C", web/js/compare_*.js):
 * a real `psflow up` cluster on 127.0.0.1, three small jobs submitted through the API that
 * differ in their learning rate and batch size, and Debian's chromium driven by playwright-core
 * (no browser download). Run it through run_test.sh compare (ctest -R test_compare), which installs
 * the npm packages and skips when chromium is missing.
 *
 * Environment: PSFLOW_BIN (the built psflow), PSFLOW_SRC (the source tree), PSFLOW_ARTIFACTS
 * (screenshots; default tests/browser/artifacts), PSFLOW_CHROMIUM (default /usr/bin/chromium).
 *
 * What it checks, in order:
 *   1. the three jobs are ticked in the jobs list and "Compare" opens #/compare?jobs=... with
 *      all three, while they train; the page follows them to Succeeded without a reload;
 *   2. the chart draws three series (training loss by step);
 *   3. the spec table marks /optimizer/learning_rate and /training/batch_size as differing and
 *      not the fields the jobs share; "only differences" hides the others;
 *   4. the final figures table has a row per job whose step, loss, test figures and phase are
 *      the API's (GET /api/v1/jobs/NAME);
 *   5. "time since start" redraws the chart with a time x (still three series); the test loss
 *      of their evaluations is offered and drawn too, and a log y;
 *   6. a reload keeps the selection; removing a job rewrites the URL and the page, Back
 *      restores it;
 *   7. a URL naming a job that does not exist says so and still compares the others; a job
 *      added from the page's menu joins the URL;
 *   and no console errors but the 404s step 7 causes on purpose.
 */
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const {ARTIFACTS, launchChromium, log, check, waitFor, fatal, api, Cluster, ConsoleWatch, runMain} = require('./harness.js');

const SRC = process.env.PSFLOW_SRC;
const BIN = process.env.PSFLOW_BIN;
/* The jobs: what differs between them (the rest of the spec is shared). */
const VARIANTS = [
    {learning_rate: 0.05, batch_size: 50},
    {learning_rate: 0.1, batch_size: 50},
    {learning_rate: 0.2, batch_size: 100},
];
/* Long enough for the page to open while they train and for many metric reports (a trainer
 * reports every 0.25 s): 10 to 15 s on an idle machine. */
const MAX_STEPS = 40000;
const DIFFERING = ['/optimizer/learning_rate', '/training/batch_size'];
const SHARED = ['/model/type', '/training/max_steps', '/training/seed', '/data/format'];


/* A linear regression on synthetic data: thousands of steps a second. */
function jobSpec(name, v) {
    return {
        name,
        replicas: {ps: 1, worker: 1},
        model: {type: 'linear', inputs: 1},
        data: {format: 'synthetic_linear', w: 2, b: 10, noise: 0.1, n: 10000},
        optimizer: {type: 'sgd', learning_rate: v.learning_rate},
        training: {batch_size: v.batch_size, max_steps: MAX_STEPS, seed: 1, eval_every_steps: MAX_STEPS / 4},
    };
}


/* The fields of the final figures table that are the API's status figures as they are. */
const FINAL_FIELDS = ['global_step', 'loss', 'accuracy', 'test_auc', 'test_loss'];
/* Whether the table's row shows job's status: its numbers (or "—" for null) and phase. */
function rowMatches(row, job) {
    const st = job.status;
    return row && row.phase === st.phase && FINAL_FIELDS.every((f) =>
        (typeof st[f] === 'number' ? row[f] === st[f] : row[f] === '—'));
}

/* What the compare page shows, read in one go. */
function readCompare(page) {
    return page.evaluate(() => {
        const box = document.querySelector('[data-testid="compare-chart"]');
        return {
            hash: location.hash,
            loaded: document.body.dataset.page === 'compare' && document.body.dataset.loaded === '1',
            chips: [...document.querySelectorAll('[data-testid="compare-jobs"] li')].map((li) => li.dataset.name),
            series: box ? Number(box.dataset.series) : -1,
            points: box && box.dataset.points ? box.dataset.points.split(',').map(Number) : [],
            xmode: box ? box.dataset.xmode : null,
            metric: box ? box.dataset.metric : null,
            draws: box ? Number(box.dataset.draws) : -1,
            legend: [...document.querySelectorAll('[data-testid="compare-chart"] .u-legend .u-series th')]
                .map((th) => th.textContent.trim()).slice(1),
            finals: [...document.querySelectorAll('[data-testid="finals-table"] tbody tr')].map((tr) => {
                const row = {name: tr.dataset.key};
                for (const td of tr.querySelectorAll('td')) {
                    row[td.dataset.field] = td.dataset.value !== undefined ? Number(td.dataset.value) :
                        td.textContent.trim();
                }
                return row;
            }),
            specRows: [...document.querySelectorAll('[data-testid="spec-diff"] tbody tr')].map((tr) => ({
                path: tr.dataset.path, differs: tr.dataset.differs === '1', hidden: tr.hidden,
                bg: getComputedStyle(tr).backgroundColor,
            })),
            missing: (() => {
                const el = document.querySelector('[data-testid="compare-missing"]');
                return el && !el.hidden ? el.textContent : '';
            })(),
        };
    });
}

function waitForCompare(page, what, pred) {
    return waitFor(what, async () => {
        const s = await readCompare(page);
        return s.loaded && pred(s) ? s : null;
    }, 15000, 100);
}

const sameSet = (a, b) => a.length === b.length && a.every((x) => b.includes(x));

async function main() {
    if (!SRC || !BIN) throw new Error('PSFLOW_SRC and PSFLOW_BIN must be set (run run_test.sh compare)');
    fs.mkdirSync(ARTIFACTS, {recursive: true});
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'psflow-compare-'));
    const cluster = new Cluster(dir);
    let browser = null;
    let ok = false;
    try {
        /* One ps and one worker agent per job: the three train at once. */
        await cluster.start(3, 3);
        const base = cluster.url;
        log('cluster up at ' + base + ', work dir ' + dir);

        const suffix = Date.now().toString(36);
        const names = VARIANTS.map((v, i) => 'cmp-' + suffix + '-' + i);
        for (let i = 0; i < names.length; i++) await api(base, 'POST', '/api/v1/jobs', jobSpec(names[i], VARIANTS[i]));
        log('submitted ' + names.join(', ') + ' (' + MAX_STEPS + ' steps each)');

        browser = await launchChromium();
        const context = await browser.newContext({viewport: {width: 1280, height: 900}});
        const page = await context.newPage();
        const consoleWatch = new ConsoleWatch(page);

        /* ---- 1. pick them in the jobs list, while they train */
        await page.goto(base + '/');
        await page.waitForSelector('body[data-page="jobs"][data-loaded="1"]', {timeout: 15000});
        check(await page.isDisabled('[data-testid="compare-selected"]'), 'Compare is disabled with nothing ticked');
        for (const n of names) {
            await page.check('[data-testid="jobs-table"] tr[data-key="' + n + '"] [data-testid="compare-pick"]');
        }
        await page.click('[data-testid="compare-selected"]');
        let s = await waitForCompare(page, 'the compare page with three jobs', (x) => x.chips.length === 3);
        const trainingAtOpen = s.finals.filter((r) => r.phase !== 'Succeeded').length;
        check(s.hash.startsWith('#/compare?jobs=') && sameSet(s.chips, names),
            'Compare opens ' + s.hash + ' with the three ticked jobs (phases ' +
            s.finals.map((r) => r.phase).join(', ') + ')');

        const jobs = await waitFor('the three jobs to succeed', async () => {
            const got = await Promise.all(names.map((n) => api(base, 'GET', '/api/v1/jobs/' + n)));
            const failed = got.find((j) => j.status.phase === 'Failed');
            if (failed) throw fatal(failed.name + ' failed: ' + failed.status.message);
            return got.every((j) => j.status.phase === 'Succeeded') ? got : null;
        }, 150000, 500);
        log('the three jobs succeeded at steps ' + jobs.map((j) => j.status.global_step).join(', '));
        /* The page follows their events and fetches them again: no reload. */
        s = await waitForCompare(page, 'the page to show the three jobs\' final figures', (x) =>
            x.series === 3 && jobs.every((j) => rowMatches(x.finals.find((r) => r.name === j.name), j)));
        check(true, 'the page shows the jobs\' final figures and phase without a reload (' + trainingAtOpen +
            ' of them had not succeeded yet when it opened)');

        /* ---- 2. the chart */
        check(s.series === 3 && s.metric === 'loss' && s.xmode === 'step' && sameSet(s.legend, names),
            'the chart draws three training loss series by step (legend ' + s.legend.join(', ') + ')');
        check(s.points.every((n) => n >= 2), 'each is a line of several points (' + s.points.join(', ') + ')');

        /* ---- 3. the spec table */
        const differing = s.specRows.filter((r) => r.differs).map((r) => r.path);
        log('differing spec fields: ' + differing.join(', ') + ' (of ' + s.specRows.length + ')');
        check(DIFFERING.every((p) => differing.includes(p)), 'the spec table marks ' + DIFFERING.join(' and ') + ' as differing');
        const shared = s.specRows.filter((r) => SHARED.includes(r.path));
        check(shared.length === SHARED.length && shared.every((r) => !r.differs),
            'it does not mark the shared fields ' + SHARED.join(', '));
        const lrRow = s.specRows.find((r) => r.path === DIFFERING[0]);
        check(lrRow.bg !== shared[0].bg, 'a differing row is highlighted (' + lrRow.bg + ' against ' + shared[0].bg + ')');
        await page.screenshot({path: path.join(ARTIFACTS, 'compare.png'), fullPage: true, animations: 'disabled'});
        await page.check('[data-testid="spec-only-diff"]');
        s = await readCompare(page);
        const visible = s.specRows.filter((r) => !r.hidden);
        check(visible.length === differing.length && visible.every((r) => r.differs),
            '"Only differences" shows the ' + visible.length + ' differing rows alone');
        await page.locator('#compare-specs').screenshot({path: path.join(ARTIFACTS, 'compare-specs-diff.png'), animations: 'disabled'});
        await page.uncheck('[data-testid="spec-only-diff"]');

        /* ---- 4. the final figures */
        check(sameSet(s.finals.map((r) => r.name), names), 'the final figures table has a row per job');
        for (const j of jobs) {
            const row = s.finals.find((r) => r.name === j.name);
            check(rowMatches(row, j) && row.duration > 0,
                j.name + ': step ' + row.global_step + ', loss ' + row.loss + ', accuracy ' + row.accuracy +
                ', test AUC ' + row.test_auc + ', test loss ' + row.test_loss + ', ' + row.phase + ', ' +
                row.duration + ' s are the API\'s');
        }

        /* ---- 5. step / time */
        const before = s.draws;
        await page.check('[data-testid="compare-x-time"]');
        s = await waitForCompare(page, 'the chart redrawn by time', (x) => x.xmode === 'time' && x.draws > before);
        check(s.series === 3, 'time since start on x redraws the chart (' + (s.draws - before) + ' draws), three series');
        await page.locator('#compare-metrics').screenshot({path: path.join(ARTIFACTS, 'compare-time.png'), animations: 'disabled'});
        await page.uncheck('[data-testid="compare-x-time"]');
        s = await waitForCompare(page, 'the chart redrawn by step', (x) => x.xmode === 'step');
        check(s.series === 3, 'and back to steps');
        /* The jobs evaluate (a test loss, no accuracy for a regression): the menu offers it. */
        await page.selectOption('[data-testid="compare-metric"]', 'test_loss');
        s = await waitForCompare(page, 'the test loss chart', (x) => x.metric === 'test_loss');
        check(s.series === 3, 'the test loss chart has three series (' + s.points.join(', ') + ' evaluations)');
        await page.selectOption('[data-testid="compare-metric"]', 'loss');
        s = await waitForCompare(page, 'the training loss chart again', (x) => x.metric === 'loss');
        const drawsLinear = s.draws;
        await page.check('[data-testid="compare-log-y"]');
        s = await waitForCompare(page, 'the chart redrawn with a log y', (x) => x.draws > drawsLinear);
        await page.locator('#compare-metrics').screenshot({path: path.join(ARTIFACTS, 'compare-log.png'), animations: 'disabled'});
        await page.uncheck('[data-testid="compare-log-y"]');
        check(s.series === 3, 'a log y redraws the three series');

        /* ---- 6. the URL round-trips; removing a job rewrites it */
        const url = page.url();
        await page.reload();
        s = await waitForCompare(page, 'the page after a reload', (x) => x.series === 3);
        check(page.url() === url && sameSet(s.chips, names) && s.finals.length === 3,
            'a reload keeps the three jobs (' + s.hash + ')');
        const gone = names[1];
        await page.click('[data-testid="compare-jobs"] li[data-name="' + gone + '"] [data-testid="remove-job"]');
        s = await waitForCompare(page, 'the page without ' + gone, (x) => x.chips.length === 2);
        const kept = names.filter((n) => n !== gone);
        check(!s.hash.includes(gone) && kept.every((n) => s.hash.includes(n)),
            'removing ' + gone + ' rewrites the URL to ' + s.hash);
        check(s.series === 2 && s.finals.length === 2 && sameSet(s.chips, kept),
            'and the chart (2 series) and the tables follow');
        await page.goBack();
        s = await waitForCompare(page, 'the page after Back', (x) => x.chips.length === 3 && x.series === 3);
        check(sameSet(s.chips, names), 'Back brings the removed job back');

        /* ---- 7. a missing job, and adding one from the menu */
        const ghost = 'no-such-job-' + suffix;
        await consoleWatch.allowing('a job that does not exist answers 404', /status of 404/, async () => {
            await page.goto(base + '/#/compare?jobs=' + names[0] + ',' + ghost);
            s = await waitForCompare(page, 'the page with a missing job', (x) => x.missing !== '');
        });
        check(s.missing.includes(ghost) && s.series === 1 && s.finals.length === 1,
            'a missing job is named ("' + s.missing.trim() + '") and the other is still shown');
        await page.screenshot({path: path.join(ARTIFACTS, 'compare-missing.png'), animations: 'disabled'});
        await page.selectOption('[data-testid="compare-add-select"]', names[2]);
        await page.click('[data-testid="compare-add"]');
        s = await waitForCompare(page, names[2] + ' added', (x) => x.series === 2);
        check(s.hash.includes(names[2]) && s.chips.includes(names[2]), 'a job added from the menu joins the URL (' + s.hash + ')');
        await page.click('[data-testid="drop-missing"]');
        s = await waitForCompare(page, 'the missing job dropped', (x) => x.missing === '');
        check(!s.hash.includes(ghost) && s.chips.length === 2, 'dropping the missing job rewrites the URL (' + s.hash + ')');

        check(consoleWatch.unexpected.length === 0, 'no console errors' +
            (consoleWatch.unexpected.length ? ': ' + consoleWatch.unexpected.join(' | ') : ''));
        log('screenshots in ' + ARTIFACTS + ': compare.png, compare-specs-diff.png, compare-time.png, compare-log.png, compare-missing.png');
        ok = true;
    } finally {
        if (browser) await browser.close().catch(() => {});
        if (!ok) cluster.dumpLogs();
        await cluster.stop();
        if (ok) fs.rmSync(dir, {recursive: true, force: true});
    }
}

runMain(main);
