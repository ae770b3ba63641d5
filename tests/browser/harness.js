/*
 * What the browser tests of a real cluster share (dashboard, compare, serving and breakdown
 * .test.js): Debian's chromium launched headless, where screenshots go, logging and checks,
 * polling with a deadline, the REST API, `psflow up` on a free port with its logs, and a watch
 * on the page's console errors.
 */
'use strict';

const {spawn} = require('child_process');
const fs = require('fs');
const net = require('net');
const path = require('path');

const SRC = process.env.PSFLOW_SRC;
const BIN = process.env.PSFLOW_BIN;
/* Screenshots: PSFLOW_ARTIFACTS [tests/browser/artifacts]. */
const ARTIFACTS = process.env.PSFLOW_ARTIFACTS || path.join(SRC || '.', 'tests', 'browser', 'artifacts');
/* Debian's chromium (PSFLOW_CHROMIUM), never a downloaded one; no background traffic. */
const CHROMIUM = process.env.PSFLOW_CHROMIUM || '/usr/bin/chromium';
const CHROMIUM_ARGS = ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--disable-quic',
    '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];

/* A headless chromium browser (playwright-core). */
function launchChromium() {
    const {chromium} = require('playwright-core');
    return chromium.launch({executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS});
}

const t0 = Date.now();
function log(...args) {
    console.log('[' + ((Date.now() - t0) / 1000).toFixed(1).padStart(6) + ' s]', ...args);
}

function check(cond, message) {
    if (!cond) throw new Error('check failed: ' + message);
    log('ok: ' + message);
}

/* Polls fn until it returns a truthy value; an error it throws is retried unless fatal. */
async function waitFor(what, fn, timeoutMs, intervalMs) {
    const deadline = Date.now() + timeoutMs;
    let last;
    for (;;) {
        try {
            last = await fn();
            if (last) return last;
        } catch (e) {
            if (e.fatal) throw e;
            last = e;
        }
        if (Date.now() > deadline) {
            throw new Error('timed out after ' + timeoutMs / 1000 + ' s waiting for ' + what +
                (last instanceof Error ? ' (last error: ' + last.message + ')' : ''));
        }
        await new Promise((r) => setTimeout(r, intervalMs || 100));
    }
}

function fatal(message) {
    return Object.assign(new Error(message), {fatal: true});
}

function freePort() {
    return new Promise((resolve, reject) => {
        const srv = net.createServer();
        srv.on('error', reject);
        srv.listen(0, '127.0.0.1', () => {
            const {port} = srv.address();
            srv.close(() => resolve(port));
        });
    });
}

/* A REST call; the parsed answer, or an Error carrying the HTTP status and the problem body. */
async function api(base, method, route, body, headers = {}) {
    const res = await fetch(base + route, {
        method,
        headers: Object.assign(body === undefined ? {} : {'Content-Type': 'application/json'}, headers),
        body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    const data = text ? JSON.parse(text) : null;
    if (!res.ok) {
        const err = new Error(method + ' ' + route + ': ' + res.status + ' ' + text.slice(0, 300));
        err.status = res.status;
        err.body = data;
        throw err;
    }
    return data;
}

/* `psflow up` on a port of ours, its output in the work dir. */
class Cluster {
    constructor(dir) {
        this.dir = dir;
        this.logPath = path.join(dir, 'up.log');
    }

    async start(ps, workers) {
        this.port = await freePort();
        this.url = 'http://127.0.0.1:' + this.port;
        process.env.PSFLOW_WEB = path.join(SRC, 'web');
        const out = fs.openSync(this.logPath, 'a');
        this.child = spawn(BIN, ['up', '--ps', String(ps), '--workers', String(workers), '--port', String(this.port),
            '--dir', path.join(this.dir, 'up')], {cwd: this.dir, stdio: ['ignore', out, out], env: process.env});
        fs.closeSync(out);
        this.exited = new Promise((resolve) => this.child.on('exit', resolve));
        this.running = true;
        this.exited.then(() => {
            this.running = false;
        });
        await waitFor('psflow up to print the dashboard URL', async () => {
            if (!this.running) throw fatal('psflow up exited:\n' + this.tail(this.logPath));
            return fs.readFileSync(this.logPath, 'utf8').includes('dashboard: ' + this.url);
        }, 60000, 100);
        await waitFor((ps + workers) + ' agents registered', async () => {
            const nodes = await api(this.url, 'GET', '/api/v1/nodes');
            return nodes.items.filter((n) => n.state !== 'lost').length >= ps + workers;
        }, 30000, 200);
    }

    async stop() {
        if (!this.child) return;
        if (this.running) this.child.kill('SIGTERM');
        const timer = setTimeout(() => this.running && this.child.kill('SIGKILL'), 40000);
        await this.exited;
        clearTimeout(timer);
    }

    tail(file, n) {
        try {
            return fs.readFileSync(file, 'utf8').split('\n').slice(-(n || 40)).join('\n');
        } catch (e) {
            return '(no log)';
        }
    }

    dumpLogs() {
        const logs = [['up', this.logPath]];
        const upLogs = path.join(this.dir, 'up', 'logs');
        if (fs.existsSync(upLogs)) {
            for (const f of fs.readdirSync(upLogs)) logs.push(['up/' + f, path.join(upLogs, f)]);
        }
        for (const [name, file] of logs) console.log('---- ' + name + ' (' + file + ')\n' + this.tail(file));
    }
}

/* The page's console errors: each is logged; one not expected (allowing) is kept in
 * `unexpected` for the test's last check. */
class ConsoleWatch {
    constructor(page) {
        this.unexpected = [];
        this.allowed = [];
        page.on('console', (m) => {
            if (m.type() === 'error') this.record(m.text());
        });
        page.on('pageerror', (e) => this.record('uncaught: ' + e.message));
    }
    record(text) {
        const a = this.allowed.find((x) => x.re.test(text));
        if (a) {
            a.hits++;
            log('expected console error (' + a.why + '): ' + text);
        } else {
            this.unexpected.push(text);
            log('CONSOLE ERROR: ' + text);
        }
    }
    /* Runs fn while console errors matching re are expected (they are still logged). */
    async allowing(why, re, fn) {
        const a = {why, re, hits: 0};
        this.allowed.push(a);
        try {
            return await fn();
        } finally {
            this.allowed = this.allowed.filter((x) => x !== a);
        }
    }
}

/* A sync job of examples/fashion-mnist-softmax.json (src: the source tree) named `name`, with
 * `ps` and `workers` tasks, `steps` steps, no evaluation and no checkpoint before 600 s. */
function softmaxSpec(src, name, ps, workers, steps) {
    const spec = JSON.parse(fs.readFileSync(path.join(src, 'examples', 'fashion-mnist-softmax.json'), 'utf8'));
    spec.name = name;
    spec.replicas = {ps, worker: workers};
    spec.training = Object.assign(spec.training || {}, {mode: 'sync', max_steps: steps, eval_every_steps: 0});
    spec.checkpoint = {every_steps: 0, every_secs: 600};
    return spec;
}

/* Runs the test's main(): PASS and exit 0, or FAIL with the error and exit 1. */
function runMain(main) {
    main().then(() => {
        log('PASS');
        process.exit(0);
    }, (e) => {
        log('FAIL: ' + (e && e.stack || e));
        process.exit(1);
    });
}

module.exports = {ARTIFACTS, launchChromium, log, check, waitFor, fatal, freePort, api, Cluster,
    ConsoleWatch, runMain, softmaxSpec};
