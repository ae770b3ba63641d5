/*
 * "#/": every job (newest first, with a cancel button and a checkbox to pick it for
 * "#/compare"), the queue of jobs waiting for agents (queue.js), the submit form, and the
 * agents registered with the coordinator. Live
 * updates come from the stream's "job" and "node" events; ages tick every second.
 *
 * A page (this one and job_page.js) offers what main.js's router uses: kind, root, load()
 * (fetches a snapshot), onEvent(ev), showError(err), mounted(), destroy(), and the fields
 * loading, queue and loadedOnce that the router keeps.
 */

import {api, jobPath, listAll} from './api.js';
import {compareHash} from './compare_page.js';
import {KeyedRows, fillRow, h, setText} from './dom.js';
import {fmtDuration, fmtInt, fmtNum, isNum, parseTime} from './format.js';
import {QueueCard} from './queue.js';
import {SpecForm} from './spec_form.js';
import {TERMINAL, card, errorBox, phaseBadge, stateBadge} from './widgets.js';

/* A job as GET /jobs lists it, made from a whole job (POST and cancel answer with one). */
function summaryFromJob(job) {
    const st = job.status || {};
    const cond = (st.conditions || []).filter((c) => c.status === 'True').pop() ||
        (st.conditions || []).slice(-1)[0] || {};
    const rs = st.replica_statuses || {};
    const spec = job.spec || {};
    const rep = spec.replicas || {};
    const replicas = {};
    for (const t of ['ps', 'worker']) {
        if (rep[t] !== undefined) replicas[t] = {ready: (rs[t] || {}).active || 0, desired: rep[t]};
    }
    return {
        name: job.name, phase: st.phase, reason: cond.reason, message: st.message,
        mode: (spec.training || {}).mode, global_step: st.global_step, max_steps: st.max_steps,
        loss: st.loss, accuracy: st.accuracy, examples_per_sec: st.examples_per_sec,
        create_time: st.create_time, start_time: st.start_time,
        completion_time: st.completion_time, replicas, queue: st.queue,
    };
}

export class JobsPage {
    constructor() {
        this.kind = 'jobs';
        this.jobs = new Map();
        this.nodes = new Map();
        this.loading = false;
        this.queue = [];
        this.err = errorBox();
        this.renderPending = false;
        /* Jobs ticked for comparison, kept while the page lives. */
        this.selected = new Set();
        /* The jobs waiting for agents, in queue order (queue.js). */
        this.queueCard = new QueueCard();
        this.build();
    }

    build() {
        const tbody = h('tbody');
        this.table = h('table', {class: 'table', dataset: {testid: 'jobs-table'}},
            h('caption', {class: 'sr-only'}, 'Jobs, newest first'),
            h('thead', null, h('tr', null,
                ['Name', 'Phase', 'Reason', 'Age', 'Step', 'Workers', 'ps', 'Loss', ''].map(
                    (t, i) => h('th', {scope: 'col', class: i >= 3 && i <= 7 ? 'num' : null},
                        t || h('span', {class: 'sr-only'}, 'Actions'))))),
            tbody);
        this.rows = new KeyedRows(tbody, (row, job, fresh) => this.renderJobRow(row, job, fresh));
        this.empty = h('p', {class: 'empty', hidden: true},
            'No jobs yet. Submit one below, or with ', h('code', null, 'psflow submit JOB.json'), '.');

        const nodeBody = h('tbody');
        this.nodeTable = h('table', {class: 'table table-compact', dataset: {testid: 'nodes-table'}},
            h('thead', null, h('tr', null, ['Agent', 'Role', 'Address', 'State', 'Job', 'Task',
                'Heartbeat'].map((t, i) => h('th', {scope: 'col', class: i === 6 ? 'num' : null}, t)))),
            nodeBody);
        this.nodeRows = new KeyedRows(nodeBody, (row, n) => {
            fillRow(row, [
                n.id, n.role, n.address || '—', stateBadge(n.state),
                n.job ? h('a', {href: '#/jobs/' + encodeURIComponent(n.job)}, n.job) : '—',
                n.type ? n.type + ' ' + n.index : '—',
                fmtDuration(this.nodeAge(n)),
            ]);
            row.lastChild.className = 'num';
        });
        this.nodesEmpty = h('p', {class: 'empty', hidden: true}, 'No agents registered.');

        this.compareButton = h('button', {type: 'button', class: 'btn btn-small btn-primary',
            disabled: true, dataset: {testid: 'compare-selected'}, onclick: () => this.compare()},
        'Compare');
        this.compareCount = h('span', {class: 'muted'});
        const compareBar = h('div', {class: 'inline-form'}, this.compareCount, this.compareButton);

        this.root = h('div', {class: 'page page-jobs'},
            h('div', {class: 'page-head'}, h('h1', null, 'Jobs'),
                this.summary = h('span', {class: 'muted'})),
            this.err.el,
            card('All jobs', {id: 'jobs', extra: compareBar}, h('div', {class: 'table-wrap'}, this.table),
                this.empty),
            this.queueCard.el,
            new SpecForm((job) => this.upsertJob(summaryFromJob(job))).el,
            card('Agents', {id: 'agents'}, h('div', {class: 'table-wrap'}, this.nodeTable),
                this.nodesEmpty));
    }

    nodeAge(n) {
        if (!isNum(n.heartbeat_age_seconds)) return null;
        return n.heartbeat_age_seconds + (performance.now() - n._at) / 1000;
    }

    renderJobRow(row, j, fresh) {
        if (fresh) {
            const pick = h('input', {type: 'checkbox', class: 'compare-pick',
                'aria-label': 'Select ' + j.name + ' to compare', dataset: {testid: 'compare-pick'}});
            pick.addEventListener('change', () => {
                if (pick.checked) this.selected.add(j.name);
                else this.selected.delete(j.name);
                this.renderCompareBar();
            });
            row._pick = pick;
            row.append(
                h('th', {scope: 'row'}, pick, h('a', {href: '#/jobs/' + encodeURIComponent(j.name),
                    class: 'job-link'}, j.name)),
                h('td'), h('td'), h('td', {class: 'num'}), h('td', {class: 'num'}),
                h('td', {class: 'num'}), h('td', {class: 'num'}), h('td', {class: 'num'}),
                h('td', {class: 'actions'}));
            const btn = h('button', {type: 'button', class: 'btn btn-small btn-danger',
                'aria-label': 'Cancel job ' + j.name, onclick: () => this.cancel(j.name, btn)},
            'Cancel');
            row.lastChild.append(btn);
            row._cancel = btn;
        }
        const c = row.children;
        const phaseText = j.phase || '—';
        if (c[1].textContent !== phaseText) c[1].replaceChildren(phaseBadge(j.phase));
        setText(c[2], j.reason || '—');
        c[2].title = j.message || '';
        setText(c[3], fmtDuration(this.ageOf(j)));
        setText(c[4], fmtInt(j.global_step) + ' / ' + fmtInt(j.max_steps));
        const r = j.replicas || {};
        const rd = (x) => (x ? fmtInt(x.ready) + '/' + fmtInt(x.desired) : '—');
        setText(c[5], rd(r.worker));
        setText(c[6], rd(r.ps));
        setText(c[7], fmtNum(j.loss, 4));
        row._cancel.hidden = TERMINAL.has(j.phase);
        row._pick.checked = this.selected.has(j.name);
    }

    /* The ticked jobs that still exist, in the table's order. */
    picked() {
        return [...this.rows.tbody.children].map((tr) => tr.dataset.key).filter((n) => this.selected.has(n));
    }

    renderCompareBar() {
        const n = this.picked().length;
        setText(this.compareCount, n ? n + ' selected' : 'Tick jobs to compare them');
        this.compareButton.disabled = n < 2;
        this.compareButton.title = n < 2 ? 'Select at least two jobs' : '';
    }

    compare() {
        const names = this.picked();
        if (names.length >= 2) location.hash = compareHash(names);
    }

    ageOf(j) {
        const t = parseTime(j.create_time);
        return t === null ? null : (Date.now() - t) / 1000;
    }

    async cancel(name, btn) {
        if (!window.confirm('Cancel job ' + name + '? Its tasks are stopped; checkpoints are kept.')) return;
        btn.disabled = true;
        try {
            const job = await api(jobPath(name, '/cancel'), {method: 'POST'});
            if (job && job.status) this.upsertJob(summaryFromJob(job));
        } catch (e) {
            this.err.show(e, 'Could not cancel ' + name);
        } finally {
            btn.disabled = false;
        }
    }

    mounted() {
        this.ticker = setInterval(() => this.tick(), 1000);
        this.queueCard.start();
    }

    destroy() {
        clearInterval(this.ticker);
        this.queueCard.stop();
    }

    showError(err) {
        this.err.show(err);
    }

    async load() {
        const queueGen = this.queueCard.gen;
        const [jobs, nodes] = await Promise.all([
            listAll('/api/v1/jobs'),
            api('/api/v1/nodes').catch(() => ({items: []})),
        ]);
        this.jobs = new Map();
        for (const j of jobs) this.jobs.set(j.name, j);
        this.queueCard.setSnapshot(jobs, queueGen);
        this.nodes = new Map();
        const now = performance.now();
        for (const n of (nodes && nodes.items) || []) this.nodes.set(n.id, Object.assign(n, {_at: now}));
        this.render();
    }

    upsertJob(summary) {
        const old = this.jobs.get(summary.name);
        this.jobs.set(summary.name, Object.assign({}, old || {}, summary));
        this.queueCard.noteJob(summary, old);
        this.scheduleRender();
    }

    onEvent(ev) {
        if (ev.type === 'job' && ev.data.name) {
            this.upsertJob(ev.data);
        } else if (ev.type === 'node' && ev.data.id) {
            this.nodes.set(ev.data.id, Object.assign(ev.data, {_at: performance.now()}));
            this.scheduleRender();
        }
    }

    scheduleRender() {
        if (this.renderPending) return;
        this.renderPending = true;
        requestAnimationFrame(() => {
            this.renderPending = false;
            this.render();
        });
    }

    render() {
        const jobs = [...this.jobs.values()].sort((a, b) =>
            (parseTime(b.create_time) || 0) - (parseTime(a.create_time) || 0) ||
            a.name.localeCompare(b.name));
        this.rows.update(jobs, (j) => j.name);
        this.renderCompareBar();
        this.empty.hidden = jobs.length > 0;
        this.table.hidden = jobs.length === 0;
        const running = jobs.filter((j) => j.phase === 'Running').length;
        setText(this.summary, jobs.length ? jobs.length + ' job' + (jobs.length === 1 ? '' : 's') +
            ', ' + running + ' running' : '');
        const order = {ps: 0, worker: 1};
        const nodes = [...this.nodes.values()].sort((a, b) =>
            (order[a.role] ?? 2) - (order[b.role] ?? 2) || String(a.id).localeCompare(String(b.id)));
        this.nodeRows.update(nodes, (n) => n.id);
        this.nodesEmpty.hidden = nodes.length > 0;
        this.nodeTable.hidden = nodes.length === 0;
    }

    tick() {
        for (const [name, row] of this.rows.rows) {
            const j = this.jobs.get(name);
            if (j) setText(row.children[3], fmtDuration(this.ageOf(j)));
        }
        for (const [id, row] of this.nodeRows.rows) {
            const n = this.nodes.get(id);
            if (n) setText(row.lastChild, fmtDuration(this.nodeAge(n)));
        }
        this.queueCard.tick();
    }
}
