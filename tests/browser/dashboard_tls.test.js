#!/usr/bin/env node
/*
 * The dashboard over https in headless Chromium, against a running `psflow up --tls-cert
 * --tls-key --ca-file` (see test_dashboard_tls.sh, which starts it and submits the job).
 *
 *   node dashboard_tls.test.js URL SPKI JOB
 *
 * URL is the coordinator's https:// address, SPKI the base64 SHA-256 of the server
 * certificate's public key, JOB a job that is training. Checks:
 *   1. a browser that does not trust the certificate is refused: loading URL fails with a
 *      certificate error and no page is shown;
 *   2. a browser that trusts exactly that key (--ignore-certificate-errors-spki-list, which
 *      needs its own profile) loads the jobs page, whose event stream over https is live;
 *   3. the job's page shows the global step advancing while it trains (the job runs until
 *      the script cancels it); no console errors.
 * Environment: PSFLOW_CHROMIUM (default /usr/bin/chromium).
 */
'use strict';

const {chromium} = require('playwright-core');
const fs = require('fs');
const os = require('os');
const path = require('path');

const CHROMIUM = process.env.PSFLOW_CHROMIUM || '/usr/bin/chromium';
const CHROMIUM_ARGS = ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--disable-quic',
    '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];
/* How long the job's step may stay unchanged on the page before the test gives up. */
const STALL_MS = 90000;

function check(cond, message) {
    if (!cond) throw new Error('check failed: ' + message);
    console.log('ok: ' + message);
}

async function untrusted(url) {
    const browser = await chromium.launch({executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS});
    try {
        const page = await browser.newPage();
        let error = null;
        try {
            await page.goto(url + '/', {timeout: 15000});
        } catch (e) {
            error = String(e.message || e);
        }
        check(error && /ERR_CERT/.test(error),
            'a browser that does not trust the certificate is refused (' + (error || 'the page loaded').split('\n')[0] + ')');
    } finally {
        await browser.close();
    }
}

async function trusted(url, spki, job) {
    const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'psflow-tls-profile-'));
    const context = await chromium.launchPersistentContext(profile, {
        executablePath: CHROMIUM, headless: true, viewport: {width: 1280, height: 800},
        args: CHROMIUM_ARGS.concat(['--ignore-certificate-errors-spki-list=' + spki])});
    try {
        const page = context.pages()[0] || await context.newPage();
        const errors = [];
        page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
        page.on('pageerror', (e) => errors.push(String(e)));
        /* The page's own markers say when it is ready; the load event of every resource over
         * TLS on a loaded 2-core machine is no better sign and took over 30 s once in CI. */
        await page.goto(url + '/', {waitUntil: 'domcontentloaded', timeout: 60000});
        await page.waitForSelector('body[data-page="jobs"][data-loaded="1"][data-connection="live"]', {timeout: 40000});
        check(page.url().startsWith('https://'), 'the jobs page loaded over https and its event stream is live');
        await page.goto(url + '/#/jobs/' + job, {waitUntil: 'domcontentloaded', timeout: 60000});
        await page.waitForSelector('body[data-page="job"][data-loaded="1"]', {timeout: 40000});
        /* The job trains until the shell script cancels it: the page must show its step
         * advancing, three different values pushed by the event stream. */
        const seen = new Set();
        let last = -1, lastAdvance = Date.now();
        while (seen.size < 3) {
            const phase = await page.evaluate(() => document.body.dataset.phase || '');
            if (phase === 'Failed' || phase === 'Succeeded') throw new Error('the job ended early: ' + phase);
            const step = Number(await page.getAttribute('[data-testid="global-step"]', 'data-value'));
            if (step > last) {
                last = step;
                lastAdvance = Date.now();
                if (step > 0) seen.add(step);
            }
            if (Date.now() - lastAdvance > STALL_MS) throw new Error('the step shown stayed at ' + last + ' for ' + STALL_MS + ' ms');
            await page.waitForTimeout(100);
        }
        check(true, 'the job page shows the global step advancing live (' + [...seen].join(', ') + ')');
        check(errors.length === 0, 'no console errors (' + errors.join('; ') + ')');
    } finally {
        await context.close();
        fs.rmSync(profile, {recursive: true, force: true});
    }
}

async function main() {
    const [url, spki, job] = process.argv.slice(2);
    if (!url || !spki || !job) throw new Error('usage: dashboard_tls.test.js URL SPKI JOB');
    await untrusted(url);
    await trusted(url, spki, job);
}

main().then(() => process.exit(0), (e) => {
    console.error('FAIL: ' + (e.stack || e));
    process.exit(1);
});
