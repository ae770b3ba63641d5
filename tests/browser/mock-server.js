#!/usr/bin/env node
/*
 * A stand-in coordinator for working on the dashboard without building psflow: serves web/
 * like `psflow coordinator --web web` does and answers the REST shapes of api/rest.md with
 * simulated jobs (training advances on a timer) plus the Server-Sent Events stream.
 * Development aid only; the browser test runs against the real coordinator.
 *
 *   node tests/browser/mock-server.js [--port 8080] [--web web] [--keepalive-ms 10000] [--state FILE]
 *   then open http://127.0.0.1:8080/  (PSFLOW_TOKEN=... makes it require a bearer token)
 *
 * With --state FILE the jobs, metrics and event ids are saved there every half second and
 * loaded at start, so that a killed and restarted mock keeps them, like the coordinator's
 * database does.
 */
'use strict';

const http = require('http');
const fs = require('fs');
const path = require('path');

const args = process.argv.slice(2);
const opt = (name, dflt) => {
    const i = args.indexOf('--' + name);
    return i >= 0 ? args[i + 1] : dflt;
};
const PORT = Number(opt('port', 8080));
const WEB = path.resolve(opt('web', path.join(__dirname, '..', '..', 'web')));
const KEEPALIVE_MS = Number(opt('keepalive-ms', 10000));
const TOKEN = process.env.PSFLOW_TOKEN || '';
const STATE = opt('state', '');

const jobs = new Map();
const metrics = new Map();
const events = [];
let nextEventId = 1;
const clients = new Set();
const nodes = new Map();
const started = Date.now();

let dirty = false;

function loadState() {
    if (!STATE || !fs.existsSync(STATE)) return;
    const st = JSON.parse(fs.readFileSync(STATE, 'utf8'));
    for (const j of st.jobs) jobs.set(j.name, j);
    for (const [k, v] of st.metrics) metrics.set(k, v);
    nextEventId = st.nextEventId;
}

function saveState() {
    if (!STATE || !dirty) return;
    dirty = false;
    const tmp = STATE + '.tmp';
    fs.writeFileSync(tmp, JSON.stringify({jobs: [...jobs.values()], metrics: [...metrics], nextEventId}));
    fs.renameSync(tmp, STATE);
}

const iso = (ms) => new Date(ms === undefined ? Date.now() : ms).toISOString();

for (const [role, n] of [['ps', 2], ['worker', 2]]) {
    for (let i = 0; i < n; i++) {
        const id = role + '-mock-' + (4000 + i);
        nodes.set(id, {id, role, address: '127.0.0.1:' + (2300 + nodes.size), state: 'idle', job: null,
            type: null, index: null, last_heartbeat: iso(), heartbeat_age_seconds: 0.2, version: '0.1.0'});
    }
}

function emit(type, data) {
    dirty = true;
    const ev = {id: nextEventId++, type, data};
    events.push(ev);
    if (events.length > 20000) events.shift();
    const msg = 'id: ' + ev.id + '\nevent: ' + type + '\ndata: ' + JSON.stringify(data) + '\n\n';
    for (const c of clients) c.write(msg);
}

function problem(res, status, title, detail, errors) {
    const body = {type: 'about:blank', title, status, detail};
    if (errors) body.errors = errors;
    res.writeHead(status, {'Content-Type': 'application/problem+json'});
    res.end(JSON.stringify(body));
}

function json(res, status, body, headers) {
    res.writeHead(status, Object.assign({'Content-Type': 'application/json'}, headers || {}));
    res.end(JSON.stringify(body));
}

const TOP_FIELDS = new Set(['name', 'replicas', 'model', 'data', 'optimizer', 'training', 'placement',
    'checkpoint', 'run_policy', 'device']);

function validate(spec) {
    const errs = [];
    const add = (pointer, message) => errs.push({pointer, message});
    if (typeof spec.name !== 'string' || !/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(spec.name) || spec.name.length > 63) {
        add('/name', 'must match [a-z0-9]([-a-z0-9]*[a-z0-9])? and have at most 63 characters');
    }
    const r = spec.replicas || {};
    if (r.ps !== undefined && !(Number.isInteger(r.ps) && r.ps >= 1)) add('/replicas/ps', 'must be at least 1');
    if (r.worker !== undefined && !(Number.isInteger(r.worker) && r.worker >= 1)) add('/replicas/worker', 'must be at least 1');
    const m = spec.model || {};
    if (!['linear', 'softmax', 'mlp'].includes(m.type)) add('/model/type', 'must be one of linear, softmax, mlp');
    const t = spec.training || {};
    if (t.batch_size !== undefined && !(Number.isInteger(t.batch_size) && t.batch_size >= 1)) {
        add('/training/batch_size', 'must be at least 1');
    }
    if (t.max_steps !== undefined && !(Number.isInteger(t.max_steps) && t.max_steps >= 1)) {
        add('/training/max_steps', 'must be at least 1');
    }
    if (t.mode !== undefined && !['sync', 'async'].includes(t.mode)) add('/training/mode', 'must be one of sync, async');
    const o = spec.optimizer || {};
    if (!['sgd', 'momentum', 'adagrad', 'adam'].includes(o.type)) add('/optimizer/type', 'must be one of sgd, momentum, adagrad, adam');
    if (!(typeof o.learning_rate === 'number' && o.learning_rate > 0)) add('/optimizer/learning_rate', 'must be greater than 0');
    return errs;
}

function normalise(spec) {
    const s = JSON.parse(JSON.stringify(spec));
    s.replicas = Object.assign({ps: 1, worker: 1, chief: 0, evaluator: 0}, s.replicas);
    s.training = Object.assign({mode: 'async', batch_size: 100, max_steps: 1000, seed: 1, eval_every_steps: 200},
        s.training);
    s.training.replicas_to_aggregate = s.training.replicas_to_aggregate || s.replicas.worker;
    s.placement = s.placement || {strategy: 'round_robin', partitioner: {type: 'none'}};
    s.checkpoint = Object.assign({every_steps: 500, every_secs: 600, keep: 5}, s.checkpoint);
    s.device = s.device || 'cpu';
    return s;
}

function variables(spec) {
    const m = spec.model;
    const dims = m.type === 'linear' ? [m.inputs || 1, 1] :
        m.type === 'softmax' ? [m.inputs, m.outputs] : [m.inputs, ...(m.hidden || []), m.outputs];
    const vars = [];
    for (let l = 0; l + 1 < dims.length; l++) {
        vars.push({variable: 'dense_' + l + '/kernel', shape: [dims[l], dims[l + 1]]});
        vars.push({variable: 'dense_' + l + '/bias', shape: [dims[l + 1]]});
    }
    return vars;
}

function placement(job) {
    const nps = job.spec.replicas.ps;
    const ps = Array.from({length: nps}, (_, i) => ({task: i, bytes: 0, shards: 0, updates: job.status.global_step}));
    const shards = variables(job.spec).map((v, i) => {
        const bytes = v.shape.reduce((a, b) => a * b, 1) * 4;
        const p = i % nps;
        ps[p].bytes += bytes;
        ps[p].shards++;
        return Object.assign(v, {shard: 0, offset: 0, ps_task: p, bytes});
    });
    const total = shards.reduce((a, s) => a + s.bytes, 0);
    const max = Math.max(...ps.map((p) => p.bytes));
    return {total_bytes: total, imbalance: +(max / (total / nps)).toFixed(3), shards, ps};
}

function summary(job) {
    const st = job.status;
    const cond = st.conditions[st.conditions.length - 1];
    const active = st.phase === 'Running' ? 1 : 0;
    return {name: job.name, phase: st.phase, reason: cond.reason, message: st.message,
        mode: job.spec.training.mode, global_step: st.global_step, max_steps: st.max_steps, loss: st.loss,
        accuracy: st.accuracy, examples_per_sec: st.examples_per_sec, create_time: st.create_time,
        start_time: st.start_time, completion_time: st.completion_time,
        replicas: {ps: {ready: active * job.spec.replicas.ps, desired: job.spec.replicas.ps},
            worker: {ready: active * job.spec.replicas.worker, desired: job.spec.replicas.worker}}};
}

function log(job, type, reason, message) {
    const e = {job: job.name, time: iso(), type, reason, message};
    job.log.push(e);
    emit('log', e);
}

function setPhase(job, phase, reason, message) {
    const st = job.status;
    for (const c of st.conditions) if (c.status === 'True' && c.type !== 'Created') c.status = 'False';
    st.conditions.push({type: phase, status: 'True', reason, message, last_transition_time: iso()});
    st.phase = phase;
    st.message = message;
    if (phase === 'Running' && !st.start_time) st.start_time = iso();
    if (phase === 'Succeeded' || phase === 'Failed') st.completion_time = iso();
    log(job, 'Normal', reason, message);
    emit('job', summary(job));
}

function tasksOf(job) {
    return job.tasks;
}

function createJob(spec) {
    const now = Date.now();
    const job = {name: spec.name, spec, log: [], checkpoints: [], tasks: [],
        status: {phase: 'Created', message: 'job ' + spec.name + ' created', conditions: [],
            global_step: 0, max_steps: spec.training.max_steps, loss: null, accuracy: null, test_loss: null,
            examples_per_sec: 0, steps_per_sec: 0, restarts: 0, generation: 0, create_time: iso(now),
            start_time: null, completion_time: null,
            replica_statuses: {ps: {active: 0, succeeded: 0, failed: 0}, worker: {active: 0, succeeded: 0, failed: 0}}}};
    job.status.conditions.push({type: 'Created', status: 'True', reason: 'JobCreated',
        message: 'job ' + spec.name + ' created', last_transition_time: iso(now)});
    jobs.set(job.name, job);
    metrics.set(job.name, {points: [], evals: [], stale: {}});
    log(job, 'Normal', 'JobCreated', 'job ' + spec.name + ' created');
    emit('job', summary(job));
    if (spec.replicas.worker > 4) {
        job.status.message = 'waiting for agents: missing worker 4';
        return job;
    }
    setTimeout(() => startJob(job), 800);
    return job;
}

function startJob(job) {
    if (job.status.phase !== 'Created') return;
    job.status.generation = 1;
    let port = 2300;
    for (const type of ['ps', 'worker']) {
        for (let i = 0; i < job.spec.replicas[type]; i++) {
            const t = {type, index: i, node_id: type + '-mock-' + (4000 + i), address: '127.0.0.1:' + port++,
                state: 'Running', incarnation: Date.now() * 1000 + port, restarts: 0, last_heartbeat: iso(),
                heartbeat_age_seconds: 0.3, lease_seconds: 10, step: 0, examples_per_sec: 0};
            job.tasks.push(t);
            emit('task', Object.assign({job: job.name}, t));
            log(job, 'Normal', 'TaskRegistered', type + ' ' + i + ' assigned to ' + t.node_id + ' at ' + t.address);
        }
    }
    job.status.replica_statuses.ps.active = job.spec.replicas.ps;
    job.status.replica_statuses.worker.active = job.spec.replicas.worker;
    setPhase(job, 'Running', 'JobRunning', 'all ' + job.tasks.length + ' tasks running');
}

/* Advances running jobs: a loss that decays with noise, evaluations, checkpoints. */
setInterval(() => {
    for (const job of jobs.values()) {
        const st = job.status;
        if (st.phase !== 'Running') continue;
        const sync = job.spec.training.mode === 'sync';
        const nw = job.spec.replicas.worker;
        /* About 30 s per job whatever its max_steps, in steps of at least 2 per 100 ms. */
        const inc = Math.max(2, Math.ceil(st.max_steps / 300)) * (sync ? 1 : nw);
        const prev = st.global_step;
        st.global_step = Math.min(st.max_steps, prev + inc);
        const now = Date.now() / 1000;
        const m = metrics.get(job.name);
        for (let w = 0; w < nw; w++) {
            const step = sync ? st.global_step : prev + Math.round((w + 1) * inc / nw);
            const loss = 2.3 * Math.exp(-step / (st.max_steps / 8)) + 0.3 + 0.05 * Math.random() + 0.02 * w;
            const pt = {task: 'worker-' + w, step, time: now, loss, examples_per_sec: 2500 + 200 * Math.random(),
                step_time_seconds: 0.03 + 0.01 * Math.random() + 0.005 * w};
            m.points.push(pt);
            emit('metric', Object.assign({job: job.name}, pt));
            if (sync && Math.random() < 0.02) m.stale['worker-' + w] = (m.stale['worker-' + w] || 0) + 1;
        }
        const last = m.points.slice(-nw);
        st.loss = last.reduce((a, p) => a + p.loss, 0) / last.length;
        st.examples_per_sec = last.reduce((a, p) => a + p.examples_per_sec, 0);
        st.steps_per_sec = inc * 10;
        for (const t of job.tasks) {
            t.heartbeat_age_seconds = Math.random();
            t.last_heartbeat = iso();
            if (t.type === 'worker') t.step = st.global_step;
        }
        const every = job.spec.training.eval_every_steps;
        if (every && Math.floor(st.global_step / every) > Math.floor(prev / every)) {
            const e = {step: st.global_step, time: now, accuracy: Math.min(0.95, 0.6 + st.global_step / 5000),
                test_loss: st.loss * 1.1};
            if (job.spec.model.outputs === 2 && job.spec.model.type !== 'linear') {
                e.test_auc = Math.min(0.8, 0.55 + st.global_step / 20000); /* a two-class job's */
                e.test_calibration = 1.02;
                st.test_auc = e.test_auc;
                st.test_calibration = e.test_calibration;
                if (job.spec.data.format === 'synthetic_ctr') st.bayes_auc = e.bayes_auc = 0.8117;
            }
            m.evals.push(e);
            st.accuracy = e.accuracy;
            st.test_loss = e.test_loss;
            emit('metric', Object.assign({job: job.name, task: 'chief'}, e));
        }
        const ck = job.spec.checkpoint.every_steps;
        if (ck && Math.floor(st.global_step / ck) > Math.floor(prev / ck)) {
            const p = placement(job);
            const c = {step: st.global_step, time: iso(), bytes: p.total_bytes,
                files: p.ps.map((x) => ({name: 'ps-' + x.task + '.safetensors', bytes: x.bytes,
                    crc32: Math.floor(Math.random() * 0xffffffff).toString(16).padStart(8, '0')}))};
            job.checkpoints.push(c);
            emit('checkpoint', Object.assign({job: job.name}, c));
            log(job, 'Normal', 'CheckpointSaved', 'checkpoint at step ' + c.step);
        }
        emit('job', summary(job));
        if (st.global_step >= st.max_steps) {
            for (const t of job.tasks) {
                t.state = 'Succeeded';
                emit('task', Object.assign({job: job.name}, t));
            }
            setPhase(job, 'Succeeded', 'JobSucceeded', 'job ' + job.name + ' reached step ' + st.max_steps);
        }
    }
}, 100);

function downsample(points, maxPoints, keyOf) {
    const series = new Map();
    for (const p of points) {
        const k = keyOf(p);
        if (!series.has(k)) series.set(k, []);
        series.get(k).push(p);
    }
    const out = [];
    let down = false;
    for (const list of series.values()) {
        if (list.length <= maxPoints) {
            out.push(...list);
            continue;
        }
        down = true;
        const lo = list[0].step;
        const hi = list[list.length - 1].step;
        const width = (hi - lo + 1) / maxPoints;
        let bucket = null;
        const flush = () => {
            if (!bucket) return;
            const n = bucket.items.length;
            const avg = (f) => bucket.items.reduce((a, p) => a + (p[f] || 0), 0) / n;
            out.push({task: bucket.items[0].task, step: Math.round(avg('step')), time: avg('time'), loss: avg('loss'),
                examples_per_sec: avg('examples_per_sec'), step_time_seconds: avg('step_time_seconds')});
        };
        for (const p of list) {
            const b = Math.floor((p.step - lo) / width);
            if (!bucket || bucket.b !== b) {
                flush();
                bucket = {b, items: []};
            }
            bucket.items.push(p);
        }
        flush();
    }
    out.sort((a, b) => a.step - b.step);
    return {points: out, downsampled: down};
}

function metricsBody(name, since, maxPoints) {
    const m = metrics.get(name);
    const pts = m.points.filter((p) => p.step >= since);
    const {points, downsampled} = downsample(pts, maxPoints, (p) => p.task);
    const agg = new Map();
    for (const p of points) {
        const a = agg.get(p.step) || {step: p.step, time: p.time, sum: 0, n: 0, eps: 0};
        a.sum += p.loss;
        a.n++;
        a.eps += p.examples_per_sec || 0;
        agg.set(p.step, a);
    }
    const aggregate = [...agg.values()].sort((a, b) => a.step - b.step).map((a) =>
        ({step: a.step, time: a.time, loss: a.sum / a.n, examples_per_sec: a.eps}));
    return {job: name, total_points: pts.length, downsampled, points, aggregate,
        evals: m.evals.filter((e) => e.step >= since), stale: m.stale};
}

function readBody(req) {
    return new Promise((resolve, reject) => {
        const chunks = [];
        let size = 0;
        req.on('data', (c) => {
            size += c.length;
            if (size > 8 << 20) reject(new Error('too large'));
            else chunks.push(c);
        });
        req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
        req.on('error', reject);
    });
}

const MIME = {'.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8',
    '.css': 'text/css; charset=utf-8', '.json': 'application/json'};

function serveFile(res, file) {
    fs.readFile(file, (err, data) => {
        if (err) return problem(res, 404, 'Not Found', 'no such file');
        res.writeHead(200, {'Content-Type': MIME[path.extname(file)] || 'application/octet-stream',
            'Cache-Control': 'no-cache'});
        res.end(data);
    });
}

async function handle(req, res) {
    const url = new URL(req.url, 'http://localhost');
    const p = url.pathname;
    if (!p.startsWith('/api/')) {
        if (p.startsWith('/vendor/uplot/')) {
            return serveFile(res, path.join(WEB, 'node_modules/uplot/dist', path.basename(p)));
        }
        const rel = p === '/' ? 'index.html' : path.normalize(p).replace(/^[/\\]+/, '');
        if (rel.startsWith('..') || rel.includes('node_modules')) return problem(res, 404, 'Not Found', 'no such file');
        return serveFile(res, path.join(WEB, rel));
    }
    if (TOKEN) {
        const auth = req.headers.authorization || '';
        const qtok = p === '/api/v1/events' ? url.searchParams.get('access_token') : null;
        if (auth !== 'Bearer ' + TOKEN && qtok !== TOKEN) return problem(res, 401, 'Unauthorized', 'missing or wrong bearer token');
    }
    if (p === '/api/v1/events') {
        res.writeHead(200, {'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache', Connection: 'keep-alive'});
        res.write(': hello\n\n');
        const since = Number(req.headers['last-event-id'] || url.searchParams.get('since_id') || 0);
        if (since) for (const ev of events) if (ev.id > since) res.write('id: ' + ev.id + '\nevent: ' + ev.type + '\ndata: ' + JSON.stringify(ev.data) + '\n\n');
        clients.add(res);
        const ka = setInterval(() => res.write(': keepalive\n\n'), KEEPALIVE_MS);
        req.on('close', () => {
            clearInterval(ka);
            clients.delete(res);
        });
        return;
    }
    if (p === '/api/v1/nodes' && req.method === 'GET') {
        return json(res, 200, {items: [...nodes.values()]});
    }
    if (p === '/api/v1/queues' && req.method === 'GET') { /* the default queue only */
        return json(res, 200, {items: [{name: 'default', quota: {ps: null, workers: null}, weight: 1,
            usage: {ps: 0, workers: 0}, borrowed: {ps: 0, workers: 0},
            jobs: {running: 0, waiting: 0}, create_time: null}]});
    }
    if (p === '/api/v1/jobs' && req.method === 'GET') {
        const items = [...jobs.values()].reverse().map(summary);
        return json(res, 200, {items});
    }
    if (p === '/api/v1/jobs' && req.method === 'POST') {
        let spec;
        try {
            spec = JSON.parse(await readBody(req));
        } catch (e) {
            return problem(res, 400, 'Bad Request', 'malformed JSON: ' + e.message);
        }
        for (const k of Object.keys(spec)) if (!TOP_FIELDS.has(k)) return problem(res, 400, 'Bad Request', '/' + k + ': unknown field');
        const errs = validate(spec);
        if (errs.length) return problem(res, 422, 'Unprocessable Content', errs[0].pointer + ': ' + errs[0].message, errs);
        const n = normalise(spec);
        if (jobs.has(n.name)) {
            const old = jobs.get(n.name);
            if (JSON.stringify(old.spec) === JSON.stringify(n)) return json(res, 200, {name: old.name, spec: old.spec, status: old.status});
            return problem(res, 409, 'Conflict', 'job ' + n.name + ' exists with another spec');
        }
        const job = createJob(n);
        return json(res, 201, {name: job.name, spec: job.spec, status: job.status}, {Location: '/api/v1/jobs/' + job.name});
    }
    const m = /^\/api\/v1\/jobs\/([^/]+)(\/[a-z_]+)?$/.exec(p);
    if (m) {
        const job = jobs.get(decodeURIComponent(m[1]));
        if (!job) return problem(res, 404, 'Not Found', 'no job ' + m[1]);
        const sub = m[2] || '';
        const full = () => ({name: job.name, spec: job.spec, status: job.status});
        if (sub === '' && req.method === 'GET') return json(res, 200, full());
        if (sub === '' && req.method === 'PATCH') {
            const body = JSON.parse(await readBody(req) || '{}');
            if (body.suspend === true && job.status.phase === 'Running') setPhase(job, 'Suspended', 'JobSuspended', 'job suspended');
            if (body.suspend === false && job.status.phase === 'Suspended') setPhase(job, 'Running', 'JobResumed', 'job resumed');
            return json(res, 200, full());
        }
        if (sub === '/cancel' && req.method === 'POST') {
            if (job.status.phase !== 'Succeeded' && job.status.phase !== 'Failed') setPhase(job, 'Failed', 'Cancelled', 'job cancelled');
            return json(res, 200, full());
        }
        if (sub === '/tasks') return json(res, 200, {items: tasksOf(job)});
        if (sub === '/placement') {
            if (job.status.phase === 'Created') return problem(res, 409, 'Conflict', 'no placement before the job starts');
            return json(res, 200, placement(job));
        }
        if (sub === '/checkpoints') return json(res, 200, {items: job.checkpoints});
        if (sub === '/events') return json(res, 200, {items: job.log.slice(-1000)});
        if (sub === '/metrics' && req.method === 'GET') {
            const since = Number(url.searchParams.get('since_step') || 0);
            const maxPoints = Math.min(100000, Number(url.searchParams.get('max_points') || 2000));
            return json(res, 200, metricsBody(job.name, since, maxPoints));
        }
        if (sub === '/metrics' && req.method === 'POST') {
            const body = JSON.parse(await readBody(req));
            const store = metrics.get(job.name);
            for (const pt of body.points || []) {
                const full = Object.assign({task: body.task}, pt);
                store.points.push(full);
                emit('metric', Object.assign({job: job.name}, full));
            }
            for (const e of body.evals || []) {
                store.evals.push(e);
                emit('metric', Object.assign({job: job.name, task: 'chief'}, e));
            }
            store.points.sort((a, b) => a.step - b.step);
            res.writeHead(204);
            return res.end();
        }
    }
    return problem(res, 404, 'Not Found', 'no route ' + p);
}

loadState();
setInterval(saveState, 500);

http.createServer((req, res) => {
    handle(req, res).catch((e) => problem(res, 500, 'Internal Server Error', String(e)));
}).listen(PORT, '127.0.0.1', () => {
    console.log('mock coordinator on http://127.0.0.1:' + PORT + '/ (web: ' + WEB + ', up since ' + iso(started) + ')');
});
