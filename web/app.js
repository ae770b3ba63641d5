/*
 * psflow dashboard: one page that reads the coordinator's public REST API (api/rest.md) and
 * follows its Server-Sent Events stream. Plain browser JavaScript, no framework and no build
 * step; the charts are uPlot, served by the coordinator from web/node_modules at /vendor/uplot/.
 *
 * DESIGN
 * - Hash routing: "#/" lists the jobs, "#/jobs/NAME" shows one job. A token given in the URL
 *   fragment ("#token=..."), or typed into the banner after a 401, is kept in sessionStorage
 *   and sent as "Authorization: Bearer".
 * - One event stream for the whole page (GET /api/v1/events). Every time it opens, the current
 *   page fetches a fresh snapshot over REST; events that arrive while the snapshot loads are
 *   queued and applied after it, and applying an event twice is harmless (rows are keyed, metric
 *   points by task and step). So a dropped stream or a restarted coordinator (whose event ids may
 *   start again) never leaves the page stale or doubled, and no reload is needed.
 * - The stream is read with fetch() rather than EventSource: EventSource hides comment lines, so
 *   the ": keepalive" the coordinator sends every 10 s could not keep the indicator "live" on an
 *   idle cluster, and fetch() sends the Authorization header like every other request.
 *   Indicator: "live" while the stream is open and bytes (events or keepalives) arrived in the
 *   last 30 s, "stale" when it is open but silent for longer, "reconnecting" while it is closed
 *   and being retried (backoff 0.5 s doubling to 4 s). After 60 s of silence the stream is
 *   dropped and reopened.
 * - Long runs stay fast: the job page loads at most 2000 points per series
 *   (/metrics?max_points=2000, downsampled by the server), appends live "metric" events, and
 *   redraws at most once per animation frame. Past 20000 appended points it reloads the
 *   downsampled series.
 *
 * Test hooks (tests/browser/dashboard.test.js reads them):
 *   document.body.dataset.connection  "live" | "reconnecting" | "stale"
 *   document.body.dataset.page        "jobs" | "job"; dataset.loaded = "1" once its snapshot has
 *                                     been applied; dataset.loads counts snapshots (one more after
 *                                     each reconnect); dataset.phase is the job page's phase
 *   [data-testid=...]                 global-step, phase, loss-chart, task-table, placement-table,
 *                                     jobs-table, spec-errors, ...
 *   window.psflowStats = {points, lastDrawMs, loadMs, lastPointStep, lastPointDrawnAt}
 *     points            metric points (per task) that the loss chart holds
 *     loadMs            ms from opening the job page to the first chart draw with its data
 *                       (null until the job has metric points)
 *     lastDrawMs        duration of the latest loss-chart redraw (setData to uPlot's draw hook)
 *     lastPointStep     largest training step drawn on the loss chart
 *     lastPointDrawnAt  performance.now() when that step was first drawn
 */
import {ApiError, api, jobPath, setToken, takeTokenFromHash} from './js/api.js';
import {KeyedRows, fillRow, h, setText} from './js/dom.js';
import {Chart, legendValue, seriesColor, xAxis, yAxis} from './js/charts.js';
import {fmtBytes, fmtClock, fmtDuration, fmtInt, fmtNum, fmtRate, fmtSeconds, isNum, parseTime}
    from './js/format.js';
import {JobsPage} from './js/jobs_page.js';
import {SeriesTable, ema, taskOrder} from './js/series.js';
import {connectionState, onStream, setConnection, stream} from './js/stream.js';
import {TERMINAL, card, errorBox, phaseBadge, stateBadge, timeEl} from './js/widgets.js';

(function () {
    const POLL_MS = 3000;
    const MAX_POINTS = 2000;
    const RELOAD_AFTER_APPENDED = 20000;
    window.psflowStats = {
        points: 0, lastDrawMs: 0, loadMs: null, lastPointStep: null, lastPointDrawnAt: null,
    };

    /* ---------------------------------------------------------------- token */

    function setupTokenForm() {
        document.getElementById('token-form').addEventListener('submit', (ev) => {
            ev.preventDefault();
            setToken(document.getElementById('token-input').value.trim());
            document.getElementById('token-banner').hidden = true;
            stream.restart();
        });
    }

    /* ---------------------------------------------------------------- pages */

    let page = null;

    function loadPage(p) {
        const gen = (p.loadGen = (p.loadGen || 0) + 1);
        p.loading = true;
        p.queue = [];
        p.load().then(() => {
            if (page !== p || gen !== p.loadGen) return;
            p.loading = false;
            p.loadedOnce = true;
            p.showError(null);
            const queued = p.queue;
            p.queue = [];
            for (const ev of queued) p.onEvent(ev);
            document.body.dataset.loaded = '1';
            document.body.dataset.loads = String(Number(document.body.dataset.loads || 0) + 1);
        }, (err) => {
            if (page !== p || gen !== p.loadGen) return;
            p.loading = false;
            const queued = p.queue;
            p.queue = [];
            if (p.loadedOnce) for (const ev of queued) p.onEvent(ev);
            p.showError(err);
            /* A coordinator that is still starting (503) or a dropped request: try again while
             * the stream is up; a reconnect reloads anyway. 401 and 404 wait for the user. */
            const status = err instanceof ApiError ? err.status : 0;
            if (status !== 401 && status !== 404) {
                setTimeout(() => {
                    if (page === p && gen === p.loadGen && !p.loading && connectionState() !== 'reconnecting') loadPage(p);
                }, 2000);
            }
        });
    }

    function route() {
        const main = document.getElementById('main');
        if (page) page.destroy();
        page = null;
        delete document.body.dataset.loaded;
        const hash = location.hash.replace(/^#/, '');
        const m = /^\/jobs\/([^/?&]+)/.exec(hash);
        if (m) {
            page = new JobPage(decodeURIComponent(m[1]));
            document.title = page.name + ' · psflow';
        } else {
            page = new JobsPage();
            document.title = 'Jobs · psflow';
        }
        document.body.dataset.page = page.kind;
        document.getElementById('nav-jobs').setAttribute('aria-current',
            page.kind === 'jobs' ? 'page' : 'false');
        main.replaceChildren(page.root);
        page.mounted();
        if (connectionState() !== 'reconnecting' || stream.failures > 0) loadPage(page);
    }

    /* ================================================================ job page */

    function storedSmoothing() {
        const v = Number(localStorage.getItem('psflow.smoothing') ?? 0.6);
        return Number.isFinite(v) && v >= 0 && v <= 0.99 ? v : 0.6;
    }

    class JobPage {
        constructor(name) {
            this.kind = 'job';
            this.name = name;
            this.loading = false;
            this.queue = [];
            this.err = errorBox();
            this.job = null;
            this.tasks = new Map();
            this.placement = null;
            this.checkpoints = new Map();
            this.logKeys = new Set();
            this.log = [];
            this.loss = new SeriesTable();
            this.stepTime = new SeriesTable();
            this.evals = new SeriesTable();
            this.stale = {};
            this.appended = 0;
            this.settings = {
                smoothing: storedSmoothing(),
                timeAxis: false,
                logY: false,
            };
            this.dirty = new Set();
            this.frame = 0;
            this.openedAt = performance.now();
            this.firstDrawPending = true;
            this.pendingPointStep = null;
            window.psflowStats.loadMs = null;
            window.psflowStats.points = 0;
            window.psflowStats.lastPointStep = null;
            window.psflowStats.lastPointDrawnAt = null;
            this.build();
        }

        /* ---------- layout */

        build() {
            const stat = (label, testid, hint, wide) => {
                const v = h('dd', {dataset: {testid}});
                return [h('div', {class: 'stat' + (wide ? ' stat-wide' : ''), title: hint || null},
                    h('dt', null, label), v), v];
            };
            const [sStep, vStep] = stat('Global step', 'global-step', 'Global step / max steps', true);
            const [sSps, vSps] = stat('Steps/s', 'steps-per-sec', 'Global steps per second');
            const [sEps, vEps] = stat('Examples/s', 'examples-per-sec');
            const [sEta, vEta] = stat('ETA', 'eta', 'Time left at the current rate');
            const [sLoss, vLoss] = stat('Loss', 'loss');
            const [sAcc, vAcc] = stat('Accuracy', 'accuracy', 'Latest evaluation on the test set');
            const [sRep, vRep] = stat('Workers / ps', 'replicas', 'Ready / desired');
            const [sRst, vRst] = stat('Restarts', 'restarts', 'Gang restarts (generation)');
            const [sDur, vDur] = stat('Running for', 'duration');
            this.v = {step: vStep, sps: vSps, eps: vEps, eta: vEta, loss: vLoss, acc: vAcc,
                rep: vRep, rst: vRst, dur: vDur};
            this.progress = h('div', {class: 'progress', role: 'progressbar', 'aria-valuemin': 0,
                'aria-label': 'Training progress'}, h('div', {class: 'progress-bar'}));

            this.phaseSlot = h('span');
            this.message = h('p', {class: 'job-message', dataset: {testid: 'job-message'}});
            this.conditions = h('ol', {class: 'conditions', dataset: {testid: 'conditions'}});
            this.suspendBtn = h('button', {type: 'button', class: 'btn', onclick: () => this.toggleSuspend()},
                'Suspend');
            this.cancelBtn = h('button', {type: 'button', class: 'btn btn-danger',
                onclick: () => this.cancel()}, 'Cancel job');
            this.scaleInput = h('input', {type: 'number', min: 1, id: 'scale-workers', class: 'input-small',
                'aria-label': 'Worker replicas'});
            this.scaleForm = h('form', {class: 'inline-form', onsubmit: (e) => {
                e.preventDefault();
                this.scale();
            }}, h('label', {for: 'scale-workers'}, 'Workers'), this.scaleInput,
            h('button', {type: 'submit', class: 'btn'}, 'Scale'));

            const head = h('div', {class: 'job-head'},
                h('div', {class: 'job-title'},
                    h('a', {href: '#/', class: 'back'}, '← Jobs'),
                    h('h1', null, this.name), this.phaseSlot),
                h('div', {class: 'job-actions'}, this.scaleForm, this.suspendBtn, this.cancelBtn));

            /* Loss chart controls. */
            const smooth = h('input', {type: 'range', min: 0, max: 0.99, step: 0.01, id: 'smoothing',
                value: this.settings.smoothing, dataset: {testid: 'smoothing'}});
            const smoothVal = h('output', {for: 'smoothing'}, this.settings.smoothing.toFixed(2));
            smooth.addEventListener('input', () => {
                this.settings.smoothing = Number(smooth.value);
                smoothVal.value = this.settings.smoothing.toFixed(2);
                localStorage.setItem('psflow.smoothing', smooth.value);
                this.markDirty('loss');
            });
            const timeToggle = h('input', {type: 'checkbox', id: 'x-time', dataset: {testid: 'x-time'}});
            timeToggle.addEventListener('change', () => {
                this.settings.timeAxis = timeToggle.checked;
                this.markDirty('loss', 'steptime');
            });
            const logToggle = h('input', {type: 'checkbox', id: 'log-y', dataset: {testid: 'log-y'}});
            logToggle.addEventListener('change', () => {
                this.settings.logY = logToggle.checked;
                this.markDirty('loss');
            });
            const resetZoom = h('button', {type: 'button', class: 'btn btn-small',
                onclick: () => this.lossChart.resetZoom()}, 'Reset zoom');
            const controls = h('div', {class: 'chart-controls'},
                h('label', {for: 'smoothing', class: 'control'}, 'Smoothing', smooth, smoothVal),
                h('label', {class: 'control'}, timeToggle, 'Wall time on x'),
                h('label', {class: 'control'}, logToggle, 'Log y'),
                resetZoom);

            this.lossBox = h('div', {class: 'chart', role: 'group', 'aria-label': 'Loss by step',
                dataset: {testid: 'loss-chart'}});
            this.lossEmpty = h('p', {class: 'empty chart-empty'}, 'No training metrics yet.');
            this.accBox = h('div', {class: 'chart', role: 'group', 'aria-label': 'Test accuracy and loss by step',
                dataset: {testid: 'accuracy-chart'}});
            this.accEmpty = h('p', {class: 'empty chart-empty'}, 'No evaluations yet.');
            this.stBox = h('div', {class: 'chart', role: 'group', 'aria-label': 'Step time per worker',
                dataset: {testid: 'step-time-chart'}});
            this.stEmpty = h('p', {class: 'empty chart-empty'}, 'No step times yet.');
            this.staleList = h('dl', {class: 'stale-list', dataset: {testid: 'stale'}});

            this.lossChart = new Chart(this.lossBox, 300, () => this.lossDrawn());
            this.accChart = new Chart(this.accBox, 220);
            this.stChart = new Chart(this.stBox, 220);

            /* Task table. */
            const taskBody = h('tbody');
            this.taskTable = h('table', {class: 'table', dataset: {testid: 'task-table'}},
                h('thead', null, h('tr', null, ['Task', 'Address', 'State', 'Incarnation', 'Restarts',
                    'Step', 'Examples/s', 'Heartbeat'].map((t, i) =>
                    h('th', {scope: 'col', class: i >= 3 ? 'num' : null}, t)))),
                taskBody);
            this.taskRows = new KeyedRows(taskBody, (row, t, fresh) => this.renderTaskRow(row, t, fresh));

            /* Placement. */
            this.psBars = h('div', {class: 'ps-bars', dataset: {testid: 'ps-bars'}});
            this.placementSummary = h('p', {class: 'placement-summary', dataset: {testid: 'placement-summary'}});
            const shardBody = h('tbody');
            this.placementTable = h('table', {class: 'table table-compact', dataset: {testid: 'placement-table'}},
                h('thead', null, h('tr', null, ['Variable', 'Shard', 'Shape', 'Offset', 'Bytes', 'ps'].map(
                    (t, i) => h('th', {scope: 'col', class: i === 1 || i >= 3 ? 'num' : null}, t)))),
                shardBody);
            this.shardRows = new KeyedRows(shardBody, (row, s) => {
                fillRow(row, [s.variable, fmtInt(s.shard), '[' + (s.shape || []).join(', ') + ']',
                    fmtInt(s.offset), fmtInt(s.bytes), 'ps ' + s.ps_task]);
                if (!row.dataset.styled) {
                    row.dataset.styled = '1';
                    row.dataset.variable = s.variable;
                    row.children[0].className = 'mono';
                    for (const i of [1, 3, 4, 5]) row.children[i].className = 'num';
                    row.children[2].className = 'mono';
                }
                row.dataset.bytes = s.bytes;
            });
            this.placementEmpty = h('p', {class: 'empty'}, 'No placement yet: it is fixed when the job starts.');

            /* Checkpoints. */
            const ckBody = h('tbody');
            this.ckTable = h('table', {class: 'table table-compact', dataset: {testid: 'checkpoints'}},
                h('thead', null, h('tr', null, ['Step', 'Time', 'Size', 'Files'].map((t, i) =>
                    h('th', {scope: 'col', class: i === 0 || i === 2 ? 'num' : null}, t)))),
                ckBody);
            this.ckRows = new KeyedRows(ckBody, (row, c) => {
                const files = h('ul', {class: 'files'}, (c.files || []).map((f) =>
                    h('li', null, h('span', {class: 'mono'}, f.name), ' ',
                        h('span', {class: 'muted'}, fmtBytes(f.bytes) + (f.crc32 ? ' · crc32 ' + f.crc32 : '')))));
                fillRow(row, [fmtInt(c.step), timeEl(c.time), fmtBytes(c.bytes), files]);
                row.children[0].className = 'num';
                row.children[2].className = 'num';
            });
            this.ckEmpty = h('p', {class: 'empty'}, 'No checkpoints yet.');

            /* Event log. */
            this.logList = h('ol', {class: 'log', dataset: {testid: 'event-log'}, 'aria-live': 'off'});
            this.logEmpty = h('p', {class: 'empty'}, 'No events yet.');

            this.syncCard = card('Step time per worker', {id: 'steptime', class: 'span-1'},
                this.stBox, this.stEmpty,
                h('h3', {class: 'subhead'}, 'Dropped stale gradients'), this.staleList);
            this.syncCard.hidden = true;

            this.root = h('div', {class: 'page page-job'},
                head,
                this.err.el,
                this.notFound = h('div', {class: 'alert', hidden: true}),
                h('section', {class: 'summary', 'aria-label': 'Job status'},
                    this.message,
                    h('dl', {class: 'stats'}, sStep, sSps, sEps, sEta, sLoss, sAcc, sRep, sRst, sDur),
                    this.progress,
                    h('details', {class: 'conditions-box'}, h('summary', null, 'Conditions'), this.conditions)),
                h('div', {class: 'grid'},
                    card('Loss', {id: 'loss', class: 'span-2', extra: controls}, this.lossBox, this.lossEmpty,
                        h('p', {class: 'hint'}, 'Drag across the chart to zoom, double-click to reset. ' +
                            'Click a legend entry to hide that series.')),
                    card('Accuracy', {id: 'accuracy', class: 'span-1'}, this.accBox, this.accEmpty),
                    this.syncCard,
                    card('Tasks', {id: 'tasks', class: 'span-2'}, h('div', {class: 'table-wrap'}, this.taskTable)),
                    card('Variable placement', {id: 'placement', class: 'span-2'},
                        this.placementSummary, this.psBars,
                        h('div', {class: 'table-wrap'}, this.placementTable), this.placementEmpty),
                    card('Checkpoints', {id: 'checkpoints-card', class: 'span-1'},
                        h('div', {class: 'table-wrap'}, this.ckTable), this.ckEmpty),
                    card('Event log', {id: 'log', class: 'span-1'}, this.logList, this.logEmpty)));
        }

        mounted() {
            this.ticker = setInterval(() => this.tick(), 1000);
            this.poller = setInterval(() => this.poll(), POLL_MS);
            this.markDirty('all');
        }

        destroy() {
            clearInterval(this.ticker);
            clearInterval(this.poller);
            cancelAnimationFrame(this.frame);
            this.lossChart.destroy();
            this.accChart.destroy();
            this.stChart.destroy();
        }

        showError(err) {
            if (err instanceof ApiError && err.status === 404) {
                this.notFound.hidden = false;
                this.notFound.replaceChildren('No job named ', h('strong', null, this.name), '. ',
                    h('a', {href: '#/'}, 'Back to all jobs'), '.');
                this.err.show(null);
                return;
            }
            this.notFound.hidden = true;
            this.err.show(err);
        }

        /* ---------- data */

        async load() {
            const p = (rest) => api(jobPath(this.name, rest));
            const soft = (rest, dflt) => p(rest).catch((e) => {
                if (e instanceof ApiError && (e.status === 404 || e.status === 409)) return dflt;
                throw e;
            });
            const job = await p('');
            /* A job waiting for agents has no placement yet; asking would only log a 409. */
            const placed = (job.status || {}).phase !== 'Created';
            const [tasks, placement, metrics, checkpoints, events] = await Promise.all([
                soft('/tasks', {items: []}),
                placed ? soft('/placement', null) : null,
                soft('/metrics?max_points=' + MAX_POINTS, null),
                soft('/checkpoints', {items: []}),
                soft('/events', {items: []}),
            ]);
            this.job = job;
            this.setTasks(tasks.items || []);
            this.placement = placement;
            this.setMetrics(metrics);
            this.checkpoints = new Map();
            for (const c of checkpoints.items || []) this.checkpoints.set(c.step, c);
            this.log = [];
            this.logKeys = new Set();
            for (const e of events.items || []) this.addLog(e);
            this.rateSamples = [];
            this.markDirty('all');
        }

        setTasks(items) {
            this.tasks = new Map();
            const now = performance.now();
            for (const t of items) this.tasks.set(t.type + '-' + t.index, Object.assign(t, {_at: now}));
        }

        setMetrics(m) {
            this.loss.clear();
            this.stepTime.clear();
            this.evals.clear();
            this.appended = 0;
            this.reloadingMetrics = false;
            let points = 0;
            if (m) {
                for (const pt of m.points || []) {
                    if (this.loss.set(pt.task, pt.step, pt.time, pt.loss)) points++;
                    if (isNum(pt.step_time_seconds)) this.stepTime.set(pt.task, pt.step, pt.time, pt.step_time_seconds);
                }
                for (const e of m.evals || []) this.setEval(e);
                this.stale = m.stale || {};
                this.totalPoints = m.total_points;
            }
            this.points = points;
            window.psflowStats.points = points;
        }

        setEval(e) {
            this.evals.set('accuracy', e.step, e.time, e.accuracy);
            this.evals.set('test_loss', e.step, e.time, e.test_loss);
        }

        addMetric(pt) {
            if (isNum(pt.accuracy) || isNum(pt.test_loss)) {
                this.setEval(pt);
                this.markDirty('acc');
                return;
            }
            if (!isNum(pt.step) || !pt.task) return;
            if (this.loss.set(pt.task, pt.step, pt.time, pt.loss)) {
                this.points++;
                this.appended++;
                window.psflowStats.points = this.points;
            }
            if (isNum(pt.step_time_seconds)) this.stepTime.set(pt.task, pt.step, pt.time, pt.step_time_seconds);
            if (isNum(pt.loss) && (this.pendingPointStep === null || pt.step > this.pendingPointStep)) {
                this.pendingPointStep = pt.step;
            }
            this.markDirty('loss', 'steptime', 'stats');
            if (this.appended > RELOAD_AFTER_APPENDED && !this.reloadingMetrics) this.reloadMetrics();
        }

        async reloadMetrics() {
            this.reloadingMetrics = true;
            try {
                const m = await api(jobPath(this.name, '/metrics?max_points=' + MAX_POINTS));
                if (page === this) {
                    this.setMetrics(m);
                    this.markDirty('loss', 'acc', 'steptime');
                }
            } catch (e) {
                this.reloadingMetrics = false;
            }
        }

        addLog(e) {
            const key = [e.time, e.type, e.reason, e.message].join('\u0000');
            if (this.logKeys.has(key)) return;
            this.logKeys.add(key);
            this.log.push(e);
            if (this.log.length > 1000) {
                const drop = this.log.shift();
                this.logKeys.delete([drop.time, drop.type, drop.reason, drop.message].join('\u0000'));
            }
        }

        onEvent(ev) {
            const d = ev.data;
            if (d.job !== undefined && d.job !== this.name) return;
            switch (ev.type) {
            case 'job':
                if (d.name === this.name) this.applySummary(d);
                break;
            case 'task':
                this.tasks.set(d.type + '-' + d.index, Object.assign(d, {_at: performance.now()}));
                this.markDirty('tasks');
                break;
            case 'metric':
                this.addMetric(d);
                break;
            case 'checkpoint':
                this.checkpoints.set(d.step, d);
                this.markDirty('checkpoints');
                break;
            case 'log':
                this.addLog(d);
                this.markDirty('log');
                break;
            default:
                break;
            }
        }

        applySummary(s) {
            if (!this.job) return;
            const st = this.job.status || (this.job.status = {});
            const phaseChanged = s.phase && s.phase !== st.phase;
            for (const k of ['phase', 'message', 'global_step', 'max_steps', 'loss', 'accuracy',
                'examples_per_sec', 'steps_per_sec', 'start_time', 'completion_time']) {
                if (s[k] !== undefined) st[k] = s[k];
            }
            if (s.replicas) this.liveReplicas = s.replicas;
            if (isNum(s.global_step)) this.sampleRate(s.global_step);
            this.markDirty('stats');
            /* Conditions and placement are not in the summary: fetch them when the phase moves. */
            if (phaseChanged) this.refreshDetails();
        }

        sampleRate(step) {
            const now = performance.now();
            const rs = this.rateSamples || (this.rateSamples = []);
            if (rs.length && rs[rs.length - 1].step === step) return;
            rs.push({t: now, step});
            while (rs.length > 2 && now - rs[0].t > 15000) rs.shift();
        }

        liveRate() {
            const rs = this.rateSamples || [];
            if (rs.length < 2) return null;
            const a = rs[0];
            const b = rs[rs.length - 1];
            if (b.t - a.t < 2000 || performance.now() - b.t > 10000) return null;
            return (b.step - a.step) / ((b.t - a.t) / 1000);
        }

        async refreshDetails() {
            try {
                const job = await api(jobPath(this.name));
                const placement = (job.status || {}).phase === 'Created' ? this.placement :
                    await api(jobPath(this.name, '/placement')).catch(() => this.placement);
                if (page !== this) return;
                this.job = job;
                this.placement = placement;
                this.markDirty('stats', 'placement');
            } catch (e) {
                /* The next stream reconnect or poll refreshes it. */
            }
        }

        /* Heartbeats, update counters and stale-gradient counts have no events: poll them while
         * the job is active and the stream is open. */
        async poll() {
            if (this.loading || !this.job || connectionState() === 'reconnecting') return;
            const phase = (this.job.status || {}).phase;
            if (TERMINAL.has(phase)) return;
            try {
                const sync = ((this.job.spec || {}).training || {}).mode === 'sync';
                const since = this.loss.lastStep();
                const [tasks, placement, m] = await Promise.all([
                    api(jobPath(this.name, '/tasks')),
                    phase === 'Created' ? this.placement :
                        api(jobPath(this.name, '/placement')).catch(() => this.placement),
                    sync && since !== null ?
                        api(jobPath(this.name, '/metrics?since_step=' + (since + 1) + '&max_points=1')).catch(() => null) :
                        null,
                ]);
                if (page !== this || this.loading) return;
                this.setTasks(tasks.items || []);
                this.placement = placement;
                if (m && m.stale) this.stale = m.stale;
                this.markDirty('tasks', 'placement', 'steptime');
            } catch (e) {
                /* A failed poll is retried on the next tick. */
            }
        }

        async toggleSuspend() {
            const phase = (this.job && this.job.status || {}).phase;
            await this.act(phase === 'Suspended' ? 'Could not resume' : 'Could not suspend',
                () => api(jobPath(this.name), {method: 'PATCH', body: {suspend: phase !== 'Suspended'}}));
        }

        async cancel() {
            if (!window.confirm('Cancel job ' + this.name + '? Its tasks are stopped; checkpoints are kept.')) return;
            await this.act('Could not cancel', () => api(jobPath(this.name, '/cancel'), {method: 'POST'}));
        }

        async scale() {
            const n = Number(this.scaleInput.value);
            if (!Number.isInteger(n) || n < 1) {
                this.err.show(new Error('worker replicas must be a whole number of at least 1'), 'Cannot scale');
                return;
            }
            await this.act('Could not scale', () => api(jobPath(this.name), {method: 'PATCH', body: {replicas: {worker: n}}}));
        }

        async act(what, fn) {
            for (const b of [this.suspendBtn, this.cancelBtn]) b.disabled = true;
            try {
                const job = await fn();
                if (job && job.status && page === this) {
                    this.job = job;
                    this.markDirty('stats');
                }
                this.err.show(null);
            } catch (e) {
                this.err.show(e, what);
            } finally {
                for (const b of [this.suspendBtn, this.cancelBtn]) b.disabled = false;
            }
        }

        /* ---------- rendering, batched per animation frame */

        markDirty(...parts) {
            for (const p of parts) {
                if (p === 'all') {
                    for (const q of ['stats', 'loss', 'acc', 'steptime', 'tasks', 'placement',
                        'checkpoints', 'log']) this.dirty.add(q);
                } else {
                    this.dirty.add(p);
                }
            }
            if (!this.frame) this.frame = requestAnimationFrame(() => this.render());
        }

        render() {
            this.frame = 0;
            const d = this.dirty;
            this.dirty = new Set();
            if (!this.job) return;
            if (d.has('stats')) this.renderStats();
            if (d.has('loss')) this.renderLoss();
            if (d.has('acc')) this.renderAcc();
            if (d.has('steptime')) this.renderStepTime();
            if (d.has('tasks')) this.renderTasks();
            if (d.has('placement')) this.renderPlacement();
            if (d.has('checkpoints')) this.renderCheckpoints();
            if (d.has('log')) this.renderLog();
        }

        stepsPerSec() {
            const st = this.job.status || {};
            if (st.phase !== 'Running') return null;
            const live = this.liveRate();
            if (live !== null) return live;
            return isNum(st.steps_per_sec) ? st.steps_per_sec : this.metricRate();
        }

        /* Steps per second over the last 30 s of metric points (server timestamps). */
        metricRate() {
            const x = this.loss.x;
            const t = this.loss.t;
            const n = x.length;
            if (n < 2 || t[n - 1] === null) return null;
            let i = n - 1;
            while (i > 0 && t[i - 1] !== null && t[n - 1] - t[i - 1] <= 30) i--;
            const dt = t[n - 1] - t[i];
            return dt > 0 ? (x[n - 1] - x[i]) / dt : null;
        }

        renderStats() {
            const st = this.job.status || {};
            const spec = this.job.spec || {};
            const phase = st.phase || 'Unknown';
            if (this.phaseSlot.textContent !== phase) this.phaseSlot.replaceChildren(phaseBadge(phase));
            document.body.dataset.phase = phase;
            setText(this.message, st.message || '');
            const maxSteps = isNum(st.max_steps) ? st.max_steps : (spec.training || {}).max_steps;
            setText(this.v.step, fmtInt(st.global_step) + (isNum(maxSteps) ? ' / ' + fmtInt(maxSteps) : ''));
            this.v.step.dataset.value = isNum(st.global_step) ? st.global_step : '';
            const sps = this.stepsPerSec();
            setText(this.v.sps, phase === 'Running' ? fmtRate(sps) : '—');
            setText(this.v.eps, phase === 'Running' ? fmtRate(st.examples_per_sec) : '—');
            let eta = '—';
            if (phase === 'Succeeded') eta = 'done';
            else if (phase === 'Running' && isNum(sps) && sps > 0 && isNum(maxSteps) && isNum(st.global_step)) {
                eta = fmtDuration(Math.max(0, maxSteps - st.global_step) / sps);
            }
            setText(this.v.eta, eta);
            setText(this.v.loss, fmtNum(st.loss, 4));
            setText(this.v.acc, isNum(st.accuracy) ? (st.accuracy * 100).toFixed(2) + ' %' : '—');
            const rep = spec.replicas || {};
            const rs = st.replica_statuses || {};
            const live = this.liveReplicas || {};
            const ready = (t) => (live[t] ? live[t].ready : (rs[t] || {}).active);
            const desired = (t) => (live[t] ? live[t].desired : rep[t]);
            setText(this.v.rep, fmtInt(ready('worker')) + '/' + fmtInt(desired('worker')) + ' · ' +
                fmtInt(ready('ps')) + '/' + fmtInt(desired('ps')));
            setText(this.v.rst, fmtInt(st.restarts) + (isNum(st.generation) ? ' (gen ' + st.generation + ')' : ''));
            this.renderDuration();
            const frac = isNum(maxSteps) && maxSteps > 0 && isNum(st.global_step) ?
                Math.min(1, st.global_step / maxSteps) : 0;
            this.progress.firstChild.style.width = (frac * 100).toFixed(1) + '%';
            this.progress.setAttribute('aria-valuemax', isNum(maxSteps) ? maxSteps : 0);
            this.progress.setAttribute('aria-valuenow', isNum(st.global_step) ? st.global_step : 0);
            this.progress.className = 'progress progress-' + phase.toLowerCase();

            const conds = st.conditions || [];
            const condSig = JSON.stringify(conds);
            if (condSig !== this.condSig) {
                this.condSig = condSig;
                this.conditions.replaceChildren(...conds.map((c) => h('li', {class: c.status === 'True' ? 'on' : 'off'},
                    h('span', {class: 'cond-type'}, c.type), ' ',
                    h('span', {class: 'cond-reason'}, c.reason || ''), ' ',
                    timeEl(c.last_transition_time),
                    c.message ? h('div', {class: 'cond-message'}, c.message) : null)));
            }

            const terminal = TERMINAL.has(phase);
            this.cancelBtn.hidden = terminal;
            this.suspendBtn.hidden = terminal;
            this.scaleForm.hidden = terminal;
            setText(this.suspendBtn, phase === 'Suspended' ? 'Resume' : 'Suspend');
            if (document.activeElement !== this.scaleInput && isNum(rep.worker)) {
                this.scaleInput.value = rep.worker;
            }
            const sync = (spec.training || {}).mode === 'sync';
            this.syncCard.hidden = !sync;
        }

        renderDuration() {
            const st = this.job.status || {};
            const start = parseTime(st.start_time);
            const end = parseTime(st.completion_time) || Date.now();
            setText(this.v.dur, start === null ? '—' : fmtDuration((end - start) / 1000));
        }

        lossSeriesKeys() {
            return [...this.loss.cols.keys()].sort(taskOrder);
        }

        /* The aggregate loss at each row: the mean over tasks of each task's latest loss at or
         * before that step, counting a task only between its first and last point. Tasks report
         * at different steps, so a mean of only the points at exactly one step would jump
         * between tasks; this is the live counterpart of the API's bucketed "aggregate". */
        aggregateColumn(keys) {
            const n = this.loss.x.length;
            const cols = keys.map((k) => this.loss.cols.get(k));
            const first = cols.map((c) => c.findIndex((v) => v !== null));
            const last = cols.map((c) => {
                for (let i = c.length - 1; i >= 0; i--) if (c[i] !== null) return i;
                return -1;
            });
            const cur = cols.map(() => null);
            const out = new Array(n);
            for (let i = 0; i < n; i++) {
                let sum = 0;
                let count = 0;
                for (let j = 0; j < cols.length; j++) {
                    const v = cols[j][i];
                    if (v !== null) cur[j] = v;
                    if (cur[j] !== null && i >= first[j] && i <= last[j]) {
                        sum += cur[j];
                        count++;
                    }
                }
                out[i] = count ? sum / count : null;
            }
            return out;
        }

        renderLoss() {
            const keys = this.lossSeriesKeys();
            const hasAgg = keys.length > 0;
            const empty = this.loss.x.length === 0;
            this.lossEmpty.hidden = !empty;
            this.lossBox.hidden = empty;
            if (empty) return;
            const {timeAxis, logY, smoothing} = this.settings;
            const pos = (col) => (logY ? col.map((v) => (v !== null && v > 0 ? v : null)) : col);
            const data = [timeAxis ? this.loss.times() : this.loss.x];
            if (hasAgg) {
                const agg = this.aggregateColumn(keys);
                data.push(pos(agg), pos(ema(agg, smoothing)));
            }
            for (const k of keys) data.push(pos(ema(this.loss.cols.get(k), smoothing)));
            const sig = [timeAxis, logY, hasAgg, keys.join(',')].join('|');
            this.drawStartedAt = performance.now();
            this.drawStep = this.pendingPointStep;
            this.lossChart.draw(sig, () => {
                const series = [{label: timeAxis ? 'Time' : 'Step',
                    value: legendValue((v) => (timeAxis ? fmtClock(v * 1000) : fmtInt(v)))}];
                const fmtv = legendValue((v) => fmtNum(v, 4));
                if (hasAgg) {
                    series.push({label: 'aggregate (raw)', stroke: 'rgba(17,24,39,0.28)', width: 1,
                        spanGaps: true, value: fmtv, points: {show: false}});
                    series.push({label: 'aggregate (smoothed)', stroke: '#111827', width: 2,
                        spanGaps: true, value: fmtv, points: {show: false}});
                }
                keys.forEach((k, i) => series.push({label: k, stroke: seriesColor(k, i), width: 1.25,
                    spanGaps: true, value: fmtv, points: {show: false}, alpha: 0.85}));
                return {
                    scales: {x: {time: timeAxis}, y: logY ? {distr: 3, log: 10} : {}},
                    series,
                    axes: [xAxis(timeAxis), yAxis('y', {label: 'loss', labelSize: 18})],
                    legend: {live: true},
                };
            }, data);
        }

        /* uPlot's draw hook for the loss chart: the figures window.psflowStats reports. */
        lossDrawn() {
            const now = performance.now();
            const stats = window.psflowStats;
            if (this.drawStartedAt !== undefined) stats.lastDrawMs = now - this.drawStartedAt;
            if (this.firstDrawPending && this.loadedOnce && !this.loading && this.loss.x.length) {
                this.firstDrawPending = false;
                stats.loadMs = now - this.openedAt;
            }
            if (this.drawStep !== null && this.drawStep !== undefined &&
                (stats.lastPointStep === null || this.drawStep > stats.lastPointStep)) {
                stats.lastPointStep = this.drawStep;
                stats.lastPointDrawnAt = now;
            } else if (stats.lastPointStep === null && this.loss.x.length) {
                stats.lastPointStep = this.loss.lastStep();
                stats.lastPointDrawnAt = now;
            }
        }

        renderAcc() {
            const empty = this.evals.x.length === 0;
            this.accEmpty.hidden = !empty;
            this.accBox.hidden = empty;
            if (empty) return;
            const acc = this.evals.cols.get('accuracy') || [];
            const tl = this.evals.cols.get('test_loss') || [];
            this.accChart.draw('acc', () => ({
                scales: {x: {time: false}, acc: {}, tl: {}},
                series: [
                    {label: 'Step', value: legendValue(fmtInt)},
                    {label: 'accuracy', scale: 'acc', stroke: '#059669', width: 2, spanGaps: true,
                        value: legendValue((v) => (v * 100).toFixed(2) + ' %'),
                        points: {show: true, size: 5}},
                    {label: 'test loss', scale: 'tl', stroke: '#d97706', width: 1.5, spanGaps: true,
                        dash: [6, 4], value: legendValue((v) => fmtNum(v, 4)),
                        points: {show: true, size: 4}},
                ],
                axes: [xAxis(false), yAxis('acc', {label: 'accuracy', labelSize: 18}),
                    yAxis('tl', {side: 1, label: 'test loss', labelSize: 18, grid: {show: false}})],
            }), [this.evals.x, acc, tl]);
        }

        renderStepTime() {
            const sync = (((this.job.spec || {}).training) || {}).mode === 'sync';
            if (!sync) return;
            const keys = [...this.stepTime.cols.keys()].sort(taskOrder);
            const empty = this.stepTime.x.length === 0;
            this.stEmpty.hidden = !empty;
            this.stBox.hidden = empty;
            if (!empty) {
                const timeAxis = this.settings.timeAxis;
                const data = [timeAxis ? this.stepTime.times() : this.stepTime.x];
                for (const k of keys) data.push(this.stepTime.cols.get(k));
                this.stChart.draw([timeAxis, keys.join(',')].join('|'), () => ({
                    scales: {x: {time: timeAxis}},
                    series: [{label: timeAxis ? 'Time' : 'Step',
                        value: legendValue((v) => (timeAxis ? fmtClock(v * 1000) : fmtInt(v)))}]
                        .concat(keys.map((k, i) => ({label: k, stroke: seriesColor(k, i), width: 1.25,
                            spanGaps: true, points: {show: false},
                            value: legendValue(fmtSeconds)}))),
                    axes: [xAxis(timeAxis), yAxis('y', {label: 'step time', labelSize: 18,
                        values: (u, splits) => splits.map((v) => (v === null ? '' : fmtSeconds(v)))})],
                }), data);
            }
            const entries = Object.entries(this.stale || {}).sort((a, b) => taskOrder(a[0], b[0]));
            if (!entries.length) {
                this.staleList.replaceChildren(h('div', {class: 'muted'}, 'None dropped.'));
            } else {
                this.staleList.replaceChildren(...entries.map(([k, v]) =>
                    h('div', {class: 'stale-item' + (v > 0 ? ' warn' : '')}, h('dt', null, k), h('dd', null, fmtInt(v)))));
            }
        }

        taskAge(t) {
            if (!isNum(t.heartbeat_age_seconds)) return null;
            return t.heartbeat_age_seconds + (performance.now() - t._at) / 1000;
        }

        renderTaskRow(row, t, fresh) {
            if (fresh) {
                row.append(h('th', {scope: 'row'}), h('td', {class: 'mono'}), h('td'),
                    h('td', {class: 'num mono'}), h('td', {class: 'num'}), h('td', {class: 'num'}),
                    h('td', {class: 'num'}), h('td', {class: 'num hb'}));
                row.dataset.task = t.type + '-' + t.index;
            }
            const c = row.children;
            setText(c[0], t.type + ' ' + t.index);
            c[0].title = t.node_id || 'no agent';
            setText(c[1], t.address || '—');
            if (c[2].textContent !== (t.state || 'Unknown')) c[2].replaceChildren(stateBadge(t.state));
            setText(c[3], t.incarnation === null || t.incarnation === undefined ? '—' : String(t.incarnation));
            setText(c[4], fmtInt(t.restarts));
            setText(c[5], fmtInt(t.step));
            setText(c[6], fmtRate(t.examples_per_sec));
            this.renderHeartbeat(c[7], t);
        }

        renderHeartbeat(td, t) {
            const age = this.taskAge(t);
            const lease = isNum(t.lease_seconds) && t.lease_seconds > 0 ? t.lease_seconds : null;
            const active = t.state === 'Running' || t.state === 'Pending';
            let level = 'idle';
            if (age !== null && lease !== null && (active || t.state === 'Lost')) {
                const f = age / lease;
                level = f >= 0.8 ? 'bad' : f >= 0.5 ? 'warn' : 'ok';
            }
            if (!td.firstChild) {
                td.append(h('span', {class: 'hb-text'}), h('span', {class: 'hb-meter', 'aria-hidden': 'true'},
                    h('span', {class: 'hb-fill'})));
            }
            setText(td.firstChild, age === null ? '—' : fmtDuration(age) + (lease ? ' / ' + lease + ' s' : ''));
            td.className = 'num hb hb-' + level;
            td.title = lease ? 'Heartbeat age; the lease is ' + lease + ' s' : 'Heartbeat age';
            const frac = age !== null && lease ? Math.min(1, age / lease) : 0;
            td.lastChild.firstChild.style.width = (frac * 100).toFixed(0) + '%';
            td.lastChild.hidden = !(active || t.state === 'Lost') || !lease;
        }

        renderTasks() {
            const rank = {chief: 0, ps: 1, worker: 2, evaluator: 3};
            const items = [...this.tasks.values()].sort((a, b) =>
                (rank[a.type] ?? 9) - (rank[b.type] ?? 9) || a.index - b.index);
            this.taskRows.update(items, (t) => t.type + '-' + t.index);
        }

        renderPlacement() {
            const p = this.placement;
            const shards = (p && p.shards) || [];
            this.placementEmpty.hidden = shards.length > 0;
            this.placementTable.hidden = shards.length === 0;
            this.shardRows.update(shards, (s) => s.variable + '#' + s.shard);
            if (!p || !shards.length) {
                this.psBars.replaceChildren();
                setText(this.placementSummary, '');
                return;
            }
            const total = isNum(p.total_bytes) ? p.total_bytes : shards.reduce((a, s) => a + s.bytes, 0);
            this.placementSummary.replaceChildren(
                h('span', null, 'Total ', h('strong', {dataset: {testid: 'placement-total'}, title: fmtInt(total) + ' bytes'},
                    fmtBytes(total)), ' in ', String(shards.length), ' shard' + (shards.length === 1 ? '' : 's')),
                h('span', {class: 'imbalance' + (p.imbalance > 1.2 ? ' warn' : ''),
                    title: 'Largest ps bytes / mean ps bytes (1.00 is perfectly even)'},
                'Imbalance ', h('strong', {dataset: {testid: 'imbalance'}}, isNum(p.imbalance) ? p.imbalance.toFixed(2) : '—')));
            const ps = (p.ps || []).slice().sort((a, b) => a.task - b.task);
            const max = Math.max(1, ...ps.map((x) => x.bytes || 0));
            this.psBars.replaceChildren(...ps.map((x) => h('div', {class: 'ps-bar', dataset: {ps: x.task}},
                h('div', {class: 'ps-bar-label'}, 'ps ' + x.task),
                h('div', {class: 'ps-bar-track', role: 'img',
                    'aria-label': 'ps ' + x.task + ': ' + fmtBytes(x.bytes) + ', ' + (x.shards || 0) + ' shards, ' +
                        fmtInt(x.updates) + ' updates'},
                h('div', {class: 'ps-bar-fill', style: 'width:' + ((x.bytes || 0) / max * 100).toFixed(1) + '%'})),
                h('div', {class: 'ps-bar-figures'}, h('span', {title: fmtInt(x.bytes) + ' bytes'}, fmtBytes(x.bytes)),
                    h('span', {class: 'muted'}, fmtInt(x.shards) + ' shard' + (x.shards === 1 ? '' : 's')),
                    h('span', {class: 'muted'}, fmtInt(x.updates) + ' updates')))));
        }

        renderCheckpoints() {
            const items = [...this.checkpoints.values()].sort((a, b) => b.step - a.step);
            this.ckRows.update(items, (c) => String(c.step));
            this.ckEmpty.hidden = items.length > 0;
            this.ckTable.hidden = items.length === 0;
        }

        renderLog() {
            const items = this.log.slice(-300).reverse();
            this.logEmpty.hidden = items.length > 0;
            this.logList.replaceChildren(...items.map((e) => h('li', {class: 'log-' + String(e.type || '').toLowerCase()},
                timeEl(e.time), ' ', h('span', {class: 'log-type'}, e.type || ''), ' ',
                e.reason ? h('span', {class: 'log-reason'}, e.reason) : null, ' ',
                h('span', {class: 'log-message'}, e.message || ''))));
        }

        tick() {
            if (!this.job) return;
            for (const [key, row] of this.taskRows.rows) {
                const t = this.tasks.get(key);
                if (t) this.renderHeartbeat(row.lastChild, t);
            }
            const st = this.job.status || {};
            if (!TERMINAL.has(st.phase)) this.renderDuration();
            if (st.phase === 'Running') this.markDirty('stats');
        }
    }

    /* ---------------------------------------------------------------- start */

    onStream({
        open() {
            if (page) loadPage(page);
        },
        /* The stream failed before opening: the REST API may still answer, so show what it has. */
        failed() {
            if (page && !page.loadedOnce && !page.loading) loadPage(page);
        },
        event(ev) {
            if (!page) return;
            if (page.loading) page.queue.push(ev);
            else page.onEvent(ev);
        },
    });

    takeTokenFromHash();
    setupTokenForm();
    setConnection('reconnecting');
    window.addEventListener('hashchange', () => {
        takeTokenFromHash();
        route();
        document.getElementById('main').focus({preventScroll: true});
        window.scrollTo(0, 0);
    });
    setInterval(() => stream.watchdog(), 1000);
    route();
    stream.start();
})();
