/*
 * "#/compare?jobs=a,b,c": jobs side by side. Their metric curves overlaid (compare_chart.js),
 * a table of their final figures, and their specs with the differing fields marked
 * (compare_spec.js). The selection lives in the URL, so a comparison can be shared and a
 * reload shows it again; adding or removing a job here rewrites the URL (a history entry, so
 * Back undoes it). A job the URL names that does not exist (deleted, or a typo) is listed as
 * missing, with a button to drop it, and the others are compared as usual.
 *
 * The page follows the stream's "job" and "metric" events of its jobs: their phase, step,
 * loss and test figures update at once, and their metrics and status are fetched again a few
 * seconds later.
 *
 * Test hooks: [data-testid=compare-jobs] lists the selection (li[data-name], each with a
 * [data-testid=remove-job] button); [data-testid=compare-missing] names the missing jobs;
 * [data-testid=finals-table] has a row per job (tr[data-key]) whose cells carry data-field
 * and, for numbers, data-value (the API's figure, unrounded).
 */

import {ApiError, api, jobPath, listAll} from './api.js';
import {seriesColor} from './charts.js';
import {CompareChart} from './compare_chart.js';
import {CompareSpecs} from './compare_spec.js';
import {h, setText} from './dom.js';
import {fmtDuration, fmtInt, fmtNum, isNum, parseTime} from './format.js';
import {TERMINAL, card, errorBox, phaseBadge} from './widgets.js';

const METRIC_POINTS = 2000;
const REFRESH_DELAY_MS = 3000;

/* The job names of a "/compare?jobs=a,b" route (the hash without "#"), in order, once each. */
export function parseCompareHash(hash) {
    const m = /[?&]jobs=([^&]*)/.exec(hash);
    if (!m) return [];
    const names = m[1].split(',').map((s) => {
        try {
            return decodeURIComponent(s).trim();
        } catch (e) {
            return '';
        }
    }).filter((s) => s);
    return [...new Set(names)];
}

/* The URL fragment that compares names. */
export function compareHash(names) {
    return '#/compare' + (names.length ? '?jobs=' + names.map(encodeURIComponent).join(',') : '');
}

/* A job's wall time: start to completion, or to now while it runs; null before it starts. */
function durationOf(status) {
    const start = parseTime(status.start_time);
    if (start === null) return null;
    const end = parseTime(status.completion_time);
    return ((end !== null ? end : Date.now()) - start) / 1000;
}

/* Fetches a job and its metrics: {name, spec, status, metrics}, or {name, missing} on 404. */
async function fetchJob(name) {
    try {
        const [job, metrics] = await Promise.all([
            api(jobPath(name)),
            api(jobPath(name, '/metrics?max_points=' + METRIC_POINTS)),
        ]);
        return {name, spec: job.spec || {}, status: job.status || {}, metrics: metrics || {}};
    } catch (e) {
        if (e instanceof ApiError && e.status === 404) return {name, missing: true};
        throw e;
    }
}

const FINALS = [
    {field: 'phase', label: 'Phase'},
    {field: 'global_step', label: 'Final step', num: true, fmt: fmtInt},
    {field: 'loss', label: 'Final loss', num: true, fmt: (v) => fmtNum(v, 4)},
    {field: 'accuracy', label: 'Test accuracy', num: true, fmt: (v) => fmtNum(v, 4)},
    {field: 'test_auc', label: 'Test AUC', num: true, fmt: (v) => fmtNum(v, 4)},
    {field: 'test_loss', label: 'Test loss', num: true, fmt: (v) => fmtNum(v, 4),
        title: 'The chief\'s latest test loss: the logloss for a two-class model'},
    {field: 'duration', label: 'Duration', num: true, fmt: fmtDuration,
        title: 'From start to completion, or until now while the job runs'},
];

export class ComparePage {
    constructor(names) {
        this.kind = 'compare';
        this.names = names;
        this.data = new Map();
        this.allJobs = new Map();
        this.pending = new Set();
        this.refreshTimer = null;
        this.loading = false;
        this.queue = [];
        this.err = errorBox();
        this.build();
    }

    build() {
        this.chips = h('ul', {class: 'compare-jobs', dataset: {testid: 'compare-jobs'}});
        this.noneText = h('p', {class: 'empty'}, 'No jobs selected. Tick jobs in the ',
            h('a', {href: '#/'}, 'jobs list'), ' and press Compare, or add them here.');
        this.missing = h('div', {class: 'alert', role: 'alert', hidden: true,
            dataset: {testid: 'compare-missing'}});
        this.addSelect = h('select', {id: 'compare-add-select', dataset: {testid: 'compare-add-select'}});
        this.addButton = h('button', {type: 'submit', class: 'btn btn-small', dataset: {testid: 'compare-add'}}, 'Add');
        const addForm = h('form', {class: 'inline-form'},
            h('label', {for: 'compare-add-select'}, 'Add a job'), this.addSelect, this.addButton);
        addForm.addEventListener('submit', (ev) => {
            ev.preventDefault();
            if (this.addSelect.value) this.add(this.addSelect.value);
        });

        this.finalsBody = h('tbody');
        this.finals = h('table', {class: 'table', dataset: {testid: 'finals-table'}},
            h('caption', {class: 'sr-only'}, 'Final figures of each job'),
            h('thead', null, h('tr', null, h('th', {scope: 'col'}, 'Job'),
                FINALS.map((c) => h('th', {scope: 'col', class: c.num ? 'num' : null, title: c.title || null},
                    c.label)))),
            this.finalsBody);
        this.chart = new CompareChart();
        this.specs = new CompareSpecs();
        this.content = h('div', null,
            card('Final figures', {id: 'compare-finals'}, h('div', {class: 'table-wrap'}, this.finals)),
            this.chart.el, this.specs.el);

        this.root = h('div', {class: 'page page-compare'},
            h('div', {class: 'page-head'}, h('h1', null, 'Compare'),
                this.summary = h('span', {class: 'muted'})),
            this.err.el, this.missing,
            card('Jobs', {id: 'compare-selection', extra: addForm}, this.chips, this.noneText),
            this.content);
    }

    mounted() {}

    destroy() {
        this.destroyed = true;
        clearTimeout(this.refreshTimer);
        clearInterval(this.ticker);
        this.chart.destroy();
    }

    showError(err) {
        this.err.show(err);
    }

    async load() {
        const [all, ...jobs] = await Promise.all([
            listAll('/api/v1/jobs').catch(() => null),
            ...this.names.map(fetchJob),
        ]);
        if (all) this.allJobs = new Map(all.map((j) => [j.name, j]));
        /* Set one by one: a job added while this loaded keeps its entry. */
        for (const j of jobs) this.data.set(j.name, j);
        this.render();
    }

    /* Rewrites the URL for the current selection without routing again. */
    pushUrl() {
        history.pushState(null, '', location.pathname + location.search + compareHash(this.names));
    }

    remove(name) {
        this.names = this.names.filter((n) => n !== name);
        this.pushUrl();
        this.render();
    }

    async add(name) {
        if (this.names.includes(name)) return;
        this.names = [...this.names, name];
        this.pushUrl();
        this.addButton.disabled = true;
        try {
            const j = await fetchJob(name);
            if (this.destroyed) return;
            this.data.set(name, j);
            this.err.show(null);
        } catch (e) {
            this.err.show(e, 'Could not load ' + name);
        } finally {
            this.addButton.disabled = false;
        }
        this.render();
    }

    onEvent(ev) {
        if (ev.type === 'metric') {
            this.onMetric(ev.data);
            return;
        }
        if (ev.type !== 'job' || !ev.data.name) return;
        const name = ev.data.name;
        const known = this.allJobs.has(name);
        this.allJobs.set(name, Object.assign(this.allJobs.get(name) || {}, ev.data));
        const j = this.data.get(name);
        if (!this.names.includes(name) || !j || j.missing) {
            if (!known) this.renderAddSelect();
            return;
        }
        for (const k of ['phase', 'global_step', 'loss', 'accuracy', 'start_time', 'completion_time']) {
            if (ev.data[k] !== undefined) j.status[k] = ev.data[k];
        }
        this.renderFinals(this.present());
        this.refreshLater(name);
    }

    /* A metric point of a compared job: the chief's evaluation is the status's test figures
     * at once; the chart follows with the next refresh. */
    onMetric(m) {
        const j = this.data.get(m.job);
        if (!this.names.includes(m.job) || !j || j.missing) return;
        if (m.task === 'chief' && 'test_loss' in m) {
            for (const k of ['accuracy', 'test_loss', 'test_auc']) {
                if (m[k] !== undefined) j.status[k] = m[k];
            }
            this.renderFinals(this.present());
        }
        this.refreshLater(m.job);
    }

    refreshLater(name) {
        this.pending.add(name);
        if (!this.refreshTimer) {
            this.refreshTimer = setTimeout(() => this.refresh(), REFRESH_DELAY_MS);
        }
    }

    /* Fetches again the jobs that changed since the last refresh. */
    async refresh() {
        const names = [...this.pending].filter((n) => this.names.includes(n));
        this.pending.clear();
        /* Events from here on schedule the next refresh. */
        this.refreshTimer = null;
        try {
            const got = await Promise.all(names.map(fetchJob));
            if (this.destroyed) return;
            for (const j of got) this.data.set(j.name, j);
            this.render();
        } catch (e) {
            /* The next event, or a reconnect's reload, tries again. */
        }
    }

    present() {
        return this.names.map((n) => this.data.get(n)).filter((j) => j && !j.missing);
    }

    render() {
        const jobs = this.present();
        const missing = this.names.filter((n) => (this.data.get(n) || {}).missing);
        setText(this.summary, this.names.length ? jobs.length + ' job' + (jobs.length === 1 ? '' : 's') : '');
        this.renderChips(jobs, missing);
        this.renderMissing(missing);
        this.renderAddSelect();
        this.content.hidden = jobs.length === 0;
        this.renderFinals(jobs);
        this.chart.show(jobs);
        this.specs.show(jobs);
    }

    renderChips(jobs, missing) {
        const colour = new Map(jobs.map((j, i) => [j.name, seriesColor(j.name, i)]));
        this.chips.replaceChildren(...this.names.filter((n) => this.data.has(n)).map((n) => {
            const j = this.data.get(n);
            return h('li', {class: 'compare-chip' + (j.missing ? ' missing' : ''), dataset: {name: n}},
                h('span', {class: 'swatch', 'aria-hidden': 'true',
                    style: colour.has(n) ? 'background:' + colour.get(n) : null}),
                j.missing ? h('span', null, n, ' (not found)') :
                    h('a', {href: '#/jobs/' + encodeURIComponent(n)}, n),
                j.missing ? null : phaseBadge(j.status.phase),
                h('button', {type: 'button', class: 'link-button', dataset: {testid: 'remove-job'},
                    'aria-label': 'Remove ' + n + ' from the comparison', title: 'Remove',
                    onclick: () => this.remove(n)}, '×'));
        }));
        this.noneText.hidden = this.names.length > 0;
        this.chips.hidden = this.names.length === 0;
    }

    renderMissing(missing) {
        this.missing.hidden = missing.length === 0;
        if (!missing.length) return;
        this.missing.replaceChildren(h('span', null,
            (missing.length === 1 ? 'This job does not exist: ' : 'These jobs do not exist: '),
            missing.map((n, i) => [i ? ', ' : '', h('code', null, n)]),
            ' (deleted, or a wrong name in the link). '),
            h('button', {type: 'button', class: 'btn btn-small', dataset: {testid: 'drop-missing'},
                onclick: () => {
                    this.names = this.names.filter((n) => !missing.includes(n));
                    this.pushUrl();
                    this.render();
                }}, missing.length === 1 ? 'Remove it' : 'Remove them'));
    }

    renderAddSelect() {
        const others = [...this.allJobs.keys()].filter((n) => !this.names.includes(n)).sort();
        const keep = this.addSelect.value;
        this.addSelect.replaceChildren(h('option', {value: ''}, others.length ? 'Choose a job…' : 'No other jobs'),
            ...others.map((n) => h('option', {value: n}, n)));
        if (others.includes(keep)) this.addSelect.value = keep;
        this.addSelect.disabled = others.length === 0;
        this.addButton.disabled = others.length === 0;
    }

    /* Only the duration cells change while a job runs: rows, links and focus stay. */
    tickDurations() {
        for (const tr of this.finalsBody.children) {
            const j = this.data.get(tr.dataset.key);
            const td = tr.querySelector('td[data-field="duration"]');
            if (!j || j.missing || !td) continue;
            const d = durationOf(j.status);
            setText(td, fmtDuration(d));
            if (isNum(d)) td.dataset.value = String(d);
        }
    }

    renderFinals(jobs) {
        this.finalsBody.replaceChildren(...jobs.map((j, i) => {
            const st = j.status;
            const values = Object.assign({}, st, {duration: durationOf(st)});
            return h('tr', {dataset: {key: j.name}},
                h('th', {scope: 'row'}, h('span', {class: 'swatch', 'aria-hidden': 'true',
                    style: 'background:' + seriesColor(j.name, i)}),
                h('a', {href: '#/jobs/' + encodeURIComponent(j.name)}, j.name)),
                FINALS.map((c) => {
                    const v = values[c.field];
                    if (!c.num) return h('td', {dataset: {field: c.field}}, phaseBadge(v));
                    const dataset = isNum(v) ? {field: c.field, value: String(v)} : {field: c.field};
                    return h('td', {class: 'num', dataset}, c.fmt(v));
                }));
        }));
        /* A running job's duration grows: tick it while any is running. */
        const running = jobs.some((j) => !TERMINAL.has(j.status.phase) && j.status.start_time);
        if (running && !this.ticker) {
            this.ticker = setInterval(() => this.tickDurations(), 1000);
        } else if (!running && this.ticker) {
            clearInterval(this.ticker);
            this.ticker = null;
        }
    }
}
