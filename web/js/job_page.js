/*
 * "#/jobs/NAME": one job. Its summary and actions, the metric charts, the task table, the step
 * breakdown, the serving tasks, the variable placement, the checkpoints and the event log. A
 * snapshot comes over REST (see main.js for when); then "job", "task", "metric", "checkpoint"
 * and "log" events update it, and what has no events (heartbeats, update counters,
 * stale-gradient counts, the step breakdown, the serving tasks' figures) is polled every 3 s while the job is active (or, with
 * a serving section, while its servers run after it) and the stream is open. Rendering is batched per animation
 * frame: markDirty(part...) names what changed.
 */

import {ApiError, api, jobPath} from './api.js';
import {h} from './dom.js';
import {CheckpointTable} from './checkpoints.js';
import {EventLog} from './event_log.js';
import {isNum} from './format.js';
import {JobActions} from './job_actions.js';
import {JobMetrics, MAX_POINTS} from './job_metrics.js';
import {JobSummary} from './job_summary.js';
import {PlacementView} from './placement.js';
import {ProfileView} from './profile.js';
import {ServingView} from './serving.js';
import {connectionState} from './stream.js';
import {TaskTable} from './task_table.js';
import {TERMINAL, card, errorBox, phaseBadge} from './widgets.js';

const POLL_MS = 3000;
const PARTS = ['stats', 'loss', 'acc', 'steptime', 'tasks', 'profile', 'serving', 'placement',
    'checkpoints', 'log'];

/* Whether the job's servers may still run: a serving section, and not failed (or deleted). */
function serves(job) {
    const st = job.status || {};
    return Array.isArray(st.serving) && st.serving.length > 0 && st.phase !== 'Failed';
}

function isSync(job) {
    return ((job.spec || {}).training || {}).mode === 'sync';
}

export class JobPage {
    constructor(name) {
        this.kind = 'job';
        this.name = name;
        this.loading = false;
        this.queue = [];
        this.err = errorBox();
        this.job = null;
        this.placement = null;
        this.destroyed = false;
        this.dirty = new Set();
        this.frame = 0;
        this.build();
    }

    build() {
        this.metrics = new JobMetrics(this.name, {
            markDirty: (...parts) => this.markDirty(...parts),
            current: () => !this.destroyed,
            settled: () => this.loadedOnce && !this.loading,
        });
        this.summary = new JobSummary();
        this.actions = new JobActions(this.name, {
            phase: () => (this.job && this.job.status || {}).phase,
            applyJob: (job) => {
                if (this.destroyed) return;
                this.job = job;
                this.markDirty('stats');
            },
            err: this.err,
        });
        this.tasks = new TaskTable();
        this.placementView = new PlacementView();
        this.profileView = new ProfileView(this.name);
        this.profile = null;
        this.servingView = new ServingView();
        this.checkpoints = new CheckpointTable();
        this.log = new EventLog();
        this.phaseSlot = h('span');

        const head = h('div', {class: 'job-head'},
            h('div', {class: 'job-title'},
                h('a', {href: '#/', class: 'back'}, '← Jobs'),
                h('h1', null, this.name), this.phaseSlot),
            this.actions.el);

        this.root = h('div', {class: 'page page-job'},
            head,
            this.err.el,
            this.notFound = h('div', {class: 'alert', hidden: true}),
            this.summary.el,
            h('div', {class: 'grid'},
                this.metrics.lossCard,
                this.metrics.accCard,
                this.metrics.syncCard,
                card('Tasks', {id: 'tasks', class: 'span-2'}, h('div', {class: 'table-wrap'}, this.tasks.el)),
                this.profileView.el,
                this.servingView.el,
                this.placementView.el,
                this.checkpoints.el,
                this.log.el));
    }

    mounted() {
        this.ticker = setInterval(() => this.tick(), 1000);
        this.poller = setInterval(() => this.poll(), POLL_MS);
        this.markDirty('all');
    }

    destroy() {
        this.destroyed = true;
        clearInterval(this.ticker);
        clearInterval(this.poller);
        cancelAnimationFrame(this.frame);
        this.metrics.destroy();
        this.profileView.destroy();
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
        const [tasks, placement, metrics, checkpoints, events, profile] = await Promise.all([
            soft('/tasks', {items: []}),
            placed ? soft('/placement', null) : null,
            soft('/metrics?max_points=' + MAX_POINTS, null),
            soft('/checkpoints', {items: []}),
            soft('/events', {items: []}),
            soft('/profile', null),
        ]);
        this.job = job;
        this.tasks.setAll(tasks.items || []);
        this.placement = placement;
        this.profile = profile;
        this.metrics.set(metrics);
        this.checkpoints.setAll(checkpoints.items || []);
        this.log.setAll(events.items || []);
        this.summary.noteSummary({});
        this.markDirty('all');
    }

    onEvent(ev) {
        const d = ev.data;
        if (d.job !== undefined && d.job !== this.name) return;
        switch (ev.type) {
        case 'job':
            if (d.name === this.name) this.applySummary(d);
            break;
        case 'task':
            this.tasks.set(d);
            this.markDirty('tasks');
            break;
        case 'metric':
            this.metrics.add(d);
            this.applyEvaluation(d);
            break;
        case 'checkpoint':
            this.checkpoints.set(d);
            this.markDirty('checkpoints');
            break;
        case 'log':
            this.log.add(d);
            this.markDirty('log');
            break;
        default:
            break;
        }
    }

    /* The chief's evaluation of a two-class job: its AUC and calibration for the summary (and
     * a synthetic_ctr job's Bayes-optimal AUC, which comes with each). */
    applyEvaluation(d) {
        if (!this.job || d.task !== 'chief' || !isNum(d.test_auc)) return;
        const st = this.job.status || (this.job.status = {});
        st.test_auc = d.test_auc;
        st.test_calibration = d.test_calibration;
        if (isNum(d.bayes_auc)) st.bayes_auc = d.bayes_auc;
        this.markDirty('stats');
    }

    applySummary(s) {
        if (!this.job) return;
        const st = this.job.status || (this.job.status = {});
        const phaseChanged = s.phase && s.phase !== st.phase;
        for (const k of ['phase', 'message', 'global_step', 'max_steps', 'progress', 'eta_seconds',
            'loss', 'accuracy', 'examples_per_sec', 'steps_per_sec', 'stalled', 'stalled_seconds',
            'start_time', 'completion_time']) {
            if (s[k] !== undefined) st[k] = s[k];
        }
        this.summary.noteSummary(s);
        this.markDirty('stats');
        /* Conditions and placement are not in the summary: fetch them when the phase moves. */
        if (phaseChanged) this.refreshDetails();
    }

    async refreshDetails() {
        try {
            const job = await api(jobPath(this.name));
            const placement = (job.status || {}).phase === 'Created' ? this.placement :
                await api(jobPath(this.name, '/placement')).catch(() => this.placement);
            if (this.destroyed) return;
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
        if (TERMINAL.has(phase)) {
            if (serves(this.job)) this.pollServing();
            return;
        }
        if (serves(this.job)) this.pollServing();
        try {
            const sync = isSync(this.job);
            const since = this.metrics.lastStep();
            const [tasks, placement, m, profile] = await Promise.all([
                api(jobPath(this.name, '/tasks')),
                phase === 'Created' ? this.placement :
                    api(jobPath(this.name, '/placement')).catch(() => this.placement),
                sync && since !== null ?
                    api(jobPath(this.name, '/metrics?since_step=' + (since + 1) + '&max_points=1')).catch(() => null) :
                    null,
                api(jobPath(this.name, '/profile')).catch(() => this.profile),
            ]);
            if (this.destroyed || this.loading) return;
            this.tasks.setAll(tasks.items || []);
            this.placement = placement;
            this.profile = profile;
            if (m && m.stale) this.metrics.stale = m.stale;
            this.markDirty('tasks', 'placement', 'steptime', 'profile');
        } catch (e) {
            /* A failed poll is retried on the next tick. */
        }
    }

    /* The serving tasks' figures (status.serving), which change without events. */
    async pollServing() {
        try {
            const job = await api(jobPath(this.name));
            if (this.destroyed || this.loading || !this.job) return;
            (this.job.status || (this.job.status = {})).serving = (job.status || {}).serving;
            this.markDirty('serving');
        } catch (e) {
            /* retried on the next tick */
        }
    }

    /* ---------- rendering, batched per animation frame */

    markDirty(...parts) {
        for (const p of parts) {
            if (p === 'all') {
                for (const q of PARTS) this.dirty.add(q);
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
        if (d.has('loss')) this.metrics.renderLoss();
        if (d.has('acc')) this.metrics.renderAcc();
        if (d.has('steptime') && isSync(this.job)) this.metrics.renderStepTime();
        if (d.has('tasks')) this.tasks.render();
        if (d.has('profile')) this.profileView.render(this.profile);
        if (d.has('serving') || d.has('stats')) this.servingView.render(this.job);
        if (d.has('placement')) this.placementView.render(this.placement);
        if (d.has('checkpoints')) this.checkpoints.render();
        if (d.has('log')) this.log.render();
    }

    renderStats() {
        const st = this.job.status || {};
        const phase = st.phase || 'Unknown';
        if (this.phaseSlot.textContent !== phase) this.phaseSlot.replaceChildren(phaseBadge(phase));
        document.body.dataset.phase = phase;
        this.summary.render(this.job);
        this.actions.render(phase, ((this.job.spec || {}).replicas || {}).worker);
        this.metrics.syncCard.hidden = !isSync(this.job);
    }

    tick() {
        if (!this.job) return;
        this.tasks.tick();
        const st = this.job.status || {};
        if (!TERMINAL.has(st.phase)) this.summary.renderDuration(this.job);
        if (st.phase === 'Running') this.markDirty('stats');
    }
}
