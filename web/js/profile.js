/*
 * The job page's step breakdown (GET /jobs/NAME/profile, docs/profile.md): one stacked bar per
 * training task and ps, each segment a phase's share of the task's time over its newest
 * window (its total before there is one), with the time a step took (a ps: pulls a second),
 * and a legend. A segment's title gives its seconds and share. Hidden until a task reports.
 * Below the bars, a trace on demand (POST/GET /jobs/NAME/trace): record 20 steps of every
 * task, then download them as a Chrome trace-event file.
 */

import {api, jobPath} from './api.js';
import {KeyedRows, h, setText} from './dom.js';
import {fmtNum, fmtRate, isNum} from './format.js';
import {card} from './widgets.js';

const TRAINING = ['input', 'pull', 'compute', 'push', 'barrier', 'checkpoint', 'evaluate'];
const PS = ['apply', 'copy'];
const TRACE_STEPS = 20;

function taskName(t) {
    return t.type + '-' + t.index;
}

/* The window shown: the newest one, or the totals before there is one. */
function shown(t) {
    return t.recent || t.total;
}

/* new ProfileView(name): el is its card; render(profile) shows GET .../profile's answer or
 * none; destroy() stops watching a trace. */
export class ProfileView {
    constructor(name) {
        this.name = name;
        this.trace = null;
        this.traceTimer = null; /* the next poll of a recording trace */
        this.traceId = null; /* the trace being recorded, or null */
        this.destroyed = false;
        this.traceButton = h('button', {type: 'button', class: 'btn btn-small',
            dataset: {testid: 'trace-record'}, onclick: () => this.recordTrace()},
        'Record a trace of ' + TRACE_STEPS + ' steps');
        this.traceDownload = h('button', {type: 'button', class: 'btn btn-small', hidden: true,
            dataset: {testid: 'trace-download'}, onclick: () => this.downloadTrace()},
        'Download trace');
        this.traceState = h('span', {class: 'muted', dataset: {testid: 'trace-state'}});
        this.legend = h('div', {class: 'breakdown-legend', dataset: {testid: 'breakdown-legend'}},
            [...TRAINING, ...PS, 'other'].map((p) =>
                h('span', {class: 'breakdown-key'}, h('i', {class: 'phase-' + p}), p)));
        this.bars = h('div', {class: 'breakdown-bars', dataset: {testid: 'breakdown-bars'}});
        this.rows = new KeyedRows(this.bars, (row, t, fresh) => this.renderRow(row, t, fresh), 'div');
        this.note = h('p', {class: 'muted breakdown-note'});
        this.el = card('Step breakdown', {id: 'profile', class: 'span-2'},
            this.legend, this.bars, this.note,
            h('div', {class: 'breakdown-trace'}, this.traceButton, this.traceDownload, this.traceState));
        this.el.hidden = true;
    }

    destroy() {
        this.destroyed = true;
        clearTimeout(this.traceTimer);
    }

    async recordTrace() {
        this.traceButton.disabled = true;
        this.traceDownload.hidden = true;
        try {
            const trace = await api(jobPath(this.name, '/trace'), {method: 'POST', body: {steps: TRACE_STEPS}});
            if (this.destroyed) return;
            this.traceId = trace.psflow.id;
            this.showTrace(trace);
        } catch (e) {
            setText(this.traceState, 'Not recorded: ' + e.message);
            this.traceButton.disabled = false;
        }
    }

    /* One poll a second while the trace records, each after the last one's answer. */
    async pollTrace() {
        this.traceTimer = null;
        try {
            const trace = await api(jobPath(this.name, '/trace'));
            if (!this.destroyed) this.showTrace(trace);
        } catch (e) {
            if (this.destroyed) return;
            this.traceId = null;
            setText(this.traceState, 'Trace lost: ' + e.message);
            this.traceButton.disabled = false;
        }
    }

    showTrace(trace) {
        const m = (trace || {}).psflow || {};
        if (m.id !== this.traceId) { /* ours ended and another started (from another page) */
            this.traceId = null;
            setText(this.traceState, 'A newer trace (' + m.id + ') replaced it: record again.');
            this.traceButton.disabled = false;
            return;
        }
        const steps = 'steps ' + m.from + '–' + (m.from + m.steps - 1);
        if (m.state !== 'complete') {
            setText(this.traceState, 'Trace ' + m.id + ': recording ' + steps + '…');
            this.traceTimer = setTimeout(() => this.pollTrace(), 1000);
            return;
        }
        this.traceId = null;
        this.trace = trace;
        const spans = (trace.traceEvents || []).filter((e) => e.ph === 'X').length;
        const tasks = (m.tasks || []).length;
        const missing = (m.missing || []).length ? '; no spans from ' + m.missing.join(', ') : '';
        setText(this.traceState, 'Trace ' + m.id + ' of ' + steps + ': ' + spans + ' spans of ' +
            tasks + ' tasks' + missing + '. Open it in Chromium DevTools (Performance, Load trace) or Perfetto.');
        this.traceDownload.hidden = false;
        this.traceButton.disabled = false;
    }

    downloadTrace() {
        if (!this.trace) return;
        const m = this.trace.psflow || {};
        const url = URL.createObjectURL(new Blob([JSON.stringify(this.trace)], {type: 'application/json'}));
        const a = h('a', {href: url, download: this.name + '-trace-' + m.id + '.json', hidden: true});
        document.body.append(a);
        a.click();
        a.remove();
        setTimeout(() => URL.revokeObjectURL(url), 60000);
    }

    renderRow(row, t, fresh) {
        const ps = t.type === 'ps';
        const phases = ps ? PS : TRAINING;
        if (fresh) {
            row.className = 'breakdown-row';
            row.dataset.task = taskName(t);
            const track = h('div', {class: 'breakdown-track'},
                [...phases, 'other'].map((p) => h('span', {class: 'phase-' + p, dataset: {phase: p}})));
            row.append(h('span', {class: 'breakdown-label'}, taskName(t)), track,
                h('span', {class: 'breakdown-figure num'}));
        }
        const w = shown(t);
        const secs = w && w.seconds > 0 ? w.seconds : 0;
        /* A span in progress at either end of a window can put its phases a little over its
         * time: the bar then shows their shares of their sum. */
        const sum = !w ? 0 : phases.reduce((a, p) => a + (isNum((w.phases || {})[p]) ? w.phases[p] : 0), 0);
        const whole = Math.max(secs, sum);
        for (const seg of row.children[1].children) {
            const p = seg.dataset.phase;
            const v = !w ? 0 : p === 'other' ? w.other : (w.phases || {})[p];
            const share = whole > 0 && isNum(v) ? Math.max(0, Math.min(1, v / whole)) : 0;
            const width = (100 * share).toFixed(2) + '%';
            if (seg.style.width !== width) seg.style.width = width;
            seg.dataset.share = share.toFixed(4);
            seg.title = p + ': ' + (isNum(v) ? fmtNum(v, 3) : '0') + ' s, ' + (100 * share).toFixed(1) + '%';
        }
        let figure = '—';
        if (w && w.count > 0 && secs > 0)
            figure = ps ? fmtRate(w.count / secs) + ' pulls/s' : fmtNum(1e3 * secs / w.count, 3) + ' ms/step';
        if (ps && w && w.count > 0 && isNum((w.phases || {}).queue))
            figure += ', queued ' + fmtNum(1e3 * w.phases.queue / w.count, 3) + ' ms/pull';
        setText(row.children[2], figure);
        row.dataset.window = t.recent ? 'recent' : 'total';
        row.dataset.seconds = String(secs); /* which window it shows */
    }

    render(profile) {
        const tasks = ((profile || {}).tasks || []).filter((t) => t.total);
        this.el.hidden = tasks.length === 0;
        this.rows.update(tasks, taskName);
        const win = (profile || {}).window_seconds;
        setText(this.note, 'Each bar: the task\'s time over its newest window of ' +
            (isNum(win) ? fmtNum(win, 2) : '2') + ' s or more, by phase (hover for seconds). ' +
            'ps: its service thread; queued: how long a pull waits for its version.');
    }
}
