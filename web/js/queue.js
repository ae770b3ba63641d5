/*
 * The Jobs page's queue: the jobs waiting for agents in the order the coordinator admits them
 * (status.queue, api/rest.md; docs/design.md "The queue"), each with its priority, what it
 * waits for and, for the first that holds agents, when it is expected to start. One job's admission moves every job behind it, and the coordinator sends no
 * event for a move, so the card asks again (GET /api/v1/jobs?waiting=true) shortly after any
 * event that can change the queue (a job submitted, admitted, finished or preempted) and every
 * few seconds while a job waits.
 *
 * Below them, the queues jobs are admitted through (GET /api/v1/queues; docs/design.md "The
 * queue"): each one's quota, the agents its running jobs hold, those borrowed beyond its quota,
 * its running and waiting jobs and its weight; memory beside the agents where a queue has a
 * quota of it (the bytes its jobs' tasks count, the submit-time estimate), and a Priority
 * classes column while some queue has classes. Shown, with a Queue column in the waiting jobs,
 * once there is a queue besides the default one or the default one has a quota or classes, so
 * a cluster with one queue sees the card as before. A quota, weight, class or deletion sends
 * no event either: the card asks for the queues with the waiting jobs and every few seconds.
 *
 * Test hooks: [data-testid=queue-table] with a row per waiting job, whose dataset holds key
 * (the job), position, reason (capacity, reserved, cluster_too_small, preempted or quota) and
 * queue (its queue's name); [data-testid=queues-table] with a row per queue (dataset key).
 */

import {api, listAll} from './api.js';
import {KeyedRows, h, setText} from './dom.js';
import {fmtBytes, fmtDuration, fmtInt, parseTime} from './format.js';
import {card, errorBox, phaseBadge} from './widgets.js';

/* How often the card asks while jobs wait, and how soon after an event that moves them. */
const POLL_MS = 5000;
const SETTLE_MS = 300;

function jobLink(name) {
    return h('a', {href: '#/jobs/' + encodeURIComponent(name)}, name);
}

/* "2 ps · 1 worker" from {ps, workers}; parts that are 0 left out when `skipZero`; "—" when
 * nothing is left. */
export function agentsText(a, skipZero) {
    const parts = [];
    if (!skipZero || a.ps) parts.push(fmtInt(a.ps) + ' ps');
    if (!skipZero || a.workers) parts.push(fmtInt(a.workers) + (a.workers === 1 ? ' worker' : ' workers'));
    return a.ps || a.workers ? parts.join(' · ') : '—';
}

/* Whether a quota field is no limit (null, or absent from an older coordinator). */
const none = (v) => v === null || v === undefined;

/* agentsText with the memory after the agents ("1 ps · 6 workers · 24.0 MiB") when `memory`;
 * "—" when all of it is 0. */
export function amountsText(a, skipZero, memory) {
    const agents = agentsText(a, skipZero);
    if (!memory || !a.memory_bytes) return agents;
    return (agents === '—' ? '' : agents + ' · ') + fmtBytes(a.memory_bytes);
}

/* A queue's quota in words: "2 ps · 4 workers", "no ps limit · 4 workers", "2 ps · 4 workers ·
 * 32.0 MiB", "no agent limit · 32.0 MiB", "no limit". Memory is named only where the queue has
 * a quota of it. */
export function quotaText(quota) {
    const q = quota || {};
    let agents = null;
    if (!none(q.ps) || !none(q.workers)) {
        const workers = none(q.workers) ? 'no worker limit' :
            fmtInt(q.workers) + (q.workers === 1 ? ' worker' : ' workers');
        agents = (none(q.ps) ? 'no ps limit' : fmtInt(q.ps) + ' ps') + ' · ' + workers;
    }
    if (none(q.memory_bytes)) return agents === null ? 'no limit' : agents;
    return (agents === null ? 'no agent limit' : agents) + ' · ' + fmtBytes(q.memory_bytes);
}

/* A queue's priority classes in words, highest first: "high 100, low -10"; "" when none. The
 * values go without a thousands separator, which would read as one between classes. */
export function classesText(classes) {
    return Object.entries(classes || {})
        .sort(([n1, v1], [n2, v2]) => v2 - v1 || n1.localeCompare(n2))
        .map(([name, value]) => name + ' ' + String(value)).join(', ');
}

/* What a waiting job waits for, in words, from its queue object. */
export function waitingFor(q) {
    switch (q.reason) {
    case 'capacity':
        return ['agents to free up'];
    case 'reserved':
        return q.behind ? ['agents held for ', jobLink(q.behind), ', ahead of it'] : ['agents held for a job ahead'];
    case 'cluster_too_small':
        return ['more agents than the cluster has'];
    case 'preempted':
        return q.preempted_by ? ['preempted by ', jobLink(q.preempted_by), '; resumes when agents free up'] :
            ['preempted; resumes when agents free up'];
    case 'quota':
        return ['queue ' + (q.name || 'default') + '\'s quota, until its jobs end or idle agents can be borrowed'];
    default:
        return [q.reason || '—'];
    }
}

/* The queues table: a row per queue, in the API's order (the default queue first). Its last
 * column, Priority classes, is there only while some queue has classes (its cells removed, not
 * hidden, otherwise). */
class QueuesTable {
    constructor() {
        const tbody = h('tbody');
        const heads = [['Queue'],
            ['Quota', 'The agents its running jobs may hold, and the memory their tasks may need (each job\'s ' +
                'estimate at submission); beyond it they only borrow idle agents'],
            ['In use', 'The agents its running jobs hold, and, where it has a quota of memory, the memory they count'],
            ['Borrowed', 'Held beyond its quota (agents, memory): taken back when a job of another queue within ' +
                'its quota needs them'],
            ['Running'], ['Waiting'], ['Weight', 'Its share of the cluster when queues borrow']];
        this.classesHead = h('th', {scope: 'col', title: 'Named priorities its jobs may give ' +
            '(run_policy.priority_class); a job keeps the value its class had when it was submitted'},
        'Priority classes');
        this.withClasses = false;
        this.headRow = h('tr', null, heads.map(([t, title], i) =>
            h('th', {scope: 'col', class: i >= 4 ? 'num' : null, title}, t)));
        this.table = h('table', {class: 'table table-compact', dataset: {testid: 'queues-table'}},
            h('caption', {class: 'sr-only'},
                'Queues: their quotas, the agents and memory their jobs hold and borrow, their jobs, their priority classes'),
            h('thead', null, this.headRow),
            tbody);
        this.rows = new KeyedRows(tbody, (row, q, fresh) => this.renderRow(row, q, fresh));
        this.el = h('div', {hidden: true}, h('h3', {class: 'subhead'}, 'Queues'),
            h('div', {class: 'table-wrap'}, this.table));
    }

    renderRow(row, q, fresh) {
        if (fresh) {
            row.append(h('th', {scope: 'row'}, q.name), h('td'), h('td'), h('td'), h('td', {class: 'num'}),
                h('td', {class: 'num'}), h('td', {class: 'num'}));
        }
        if (this.withClasses && row.children.length === 7) row.append(h('td'));
        if (!this.withClasses && row.children.length > 7) row.lastChild.remove();
        const c = row.children;
        const jobs = q.jobs || {};
        const memory = !none((q.quota || {}).memory_bytes);
        setText(c[1], quotaText(q.quota));
        setText(c[2], amountsText(q.usage || {}, false, memory));
        setText(c[3], amountsText(q.borrowed || {}, true, true));
        setText(c[4], fmtInt(jobs.running));
        setText(c[5], fmtInt(jobs.waiting));
        setText(c[6], fmtInt(q.weight));
        if (this.withClasses) setText(c[7], classesText(q.priority_classes) || '—');
    }

    /* Shows `queues` (GET /api/v1/queues items); returns whether the table is shown: more than
     * the default queue, or a default queue with a quota or priority classes. */
    set(queues) {
        const withClasses = queues.some((q) => classesText(q.priority_classes) !== '');
        if (withClasses !== this.withClasses) {
            this.withClasses = withClasses;
            if (withClasses) this.headRow.append(this.classesHead);
            else this.classesHead.remove();
        }
        this.rows.update(queues, (q) => q.name);
        const only = queues.length === 1 ? queues[0] : null;
        const shown = queues.length > 1 || (only !== null &&
            (quotaText(only.quota) !== 'no limit' || classesText(only.priority_classes) !== ''));
        this.el.hidden = !shown;
        return shown;
    }
}

export class QueueCard {
    constructor() {
        this.items = [];
        this.timer = null;
        this.poller = null;
        this.inflight = false;
        /* refreshes applied: a page snapshot fetched before the latest is not applied */
        this.gen = 0;
        /* queue lists asked for and the newest applied: an older answer is not applied */
        this.asked = 0;
        this.applied = 0;
        /* whether the queues (and the waiting jobs' Queue column) are shown */
        this.multi = false;
        /* the last failure of each request, null once it succeeds again */
        this.failed = {jobs: null, queues: null};
        this.err = errorBox();
        const tbody = h('tbody');
        this.queueHead = h('th', {scope: 'col', hidden: true}, 'Queue');
        this.table = h('table', {class: 'table', dataset: {testid: 'queue-table'}},
            h('caption', {class: 'sr-only'}, 'Jobs waiting for agents, in the order they start'),
            h('thead', null, h('tr', null, ['#', 'Job', this.queueHead, 'Priority', 'Phase', 'Waiting for', 'Waiting',
                'Expected start'].map((t, i) => (typeof t === 'string' ?
                h('th', {scope: 'col', class: i === 0 || i === 3 || i >= 6 ? 'num' : null}, t) : t)))),
            tbody);
        this.rows = new KeyedRows(tbody, (row, j, fresh) => this.renderRow(row, j, fresh));
        this.empty = h('p', {class: 'empty'}, 'No job is waiting for agents.');
        this.count = h('span', {class: 'muted'});
        this.queues = new QueuesTable();
        this.el = card('Queue', {id: 'queue', extra: this.count}, this.err.el,
            h('div', {class: 'table-wrap'}, this.table), this.empty, this.queues.el);
        this.table.hidden = true;
    }

    renderRow(row, j, fresh) {
        if (fresh) {
            row.append(h('td', {class: 'num'}), h('th', {scope: 'row'}, jobLink(j.name)), h('td'),
                h('td', {class: 'num'}), h('td'), h('td'), h('td', {class: 'num'}), h('td', {class: 'num'}));
        }
        const q = j.queue;
        const c = row.children;
        row.dataset.position = String(q.position);
        row.dataset.reason = q.reason || '';
        row.dataset.queue = q.name || 'default';
        setText(c[0], fmtInt(q.position));
        setText(c[2], q.name || 'default');
        c[2].hidden = !this.multi;
        setText(c[3], fmtInt(q.priority));
        if (c[4].textContent !== (j.phase || '—')) c[4].replaceChildren(phaseBadge(j.phase));
        const words = waitingFor(q);
        const text = words.map((w) => (typeof w === 'string' ? w : w.textContent)).join('');
        if (c[5].textContent !== text) c[5].replaceChildren(...words);
        c[5].title = j.message || '';
        setText(c[6], fmtDuration(this.waitedOf(j)));
        setText(c[7], this.startText(q));
        c[7].title = q.estimated_start ||
            'estimated for the first job that holds agents, once the running jobs it waits for have a measured rate';
    }

    /* "in 4 min" from queue.estimated_start (the first job holding agents only), else "—". */
    startText(q) {
        const at = parseTime(q.estimated_start);
        if (at === null) return '—';
        const left = (at - Date.now()) / 1000;
        return left > 1 ? 'in ' + fmtDuration(left) : 'now';
    }

    /* Seconds it has waited: since its preemption, or since it was submitted. */
    waitedOf(j) {
        const since = parseTime((j.queue && j.queue.preempted_since) || j.create_time);
        return since === null ? null : Math.max(0, (Date.now() - since) / 1000);
    }

    /* The waiting jobs of the page's snapshot, fetched when this.gen was `gen`: skipped when a
     * refresh has been applied since (it is newer). The queues are asked for with it. */
    setSnapshot(jobs, gen) {
        if (gen === this.gen) this.set(jobs);
        this.refreshQueues();
    }

    /* The waiting jobs among `jobs` (summaries), shown in queue order. */
    set(jobs) {
        this.items = jobs.filter((j) => j.queue && j.queue.position > 0)
            .sort((a, b) => a.queue.position - b.queue.position || a.name.localeCompare(b.name));
        this.rows.update(this.items, (j) => j.name);
        const n = this.items.length;
        this.table.hidden = n === 0;
        this.empty.hidden = n > 0;
        setText(this.count, n ? n + ' waiting' : '');
    }

    /* The queues (GET /api/v1/queues items) of the answer to ask number `ask`. */
    setQueues(queues, ask) {
        if (ask < this.applied) return;
        this.applied = ask;
        const multi = this.queues.set(queues);
        if (multi === this.multi) return;
        this.multi = multi;
        this.queueHead.hidden = !multi;
        for (const row of this.rows.rows.values()) row.children[2].hidden = !multi;
    }

    /* A job event: ask again soon when it can have moved the queue or what a queue holds. */
    noteJob(summary, old) {
        const ready = (s) => JSON.stringify(s.replicas || null);
        const moved = !old || old.phase !== summary.phase || Boolean(old.queue) !== Boolean(summary.queue) ||
            (summary.queue && old.queue && (summary.queue.position !== old.queue.position ||
                summary.queue.reason !== old.queue.reason)) ||
            (this.multi && summary.replicas !== undefined && ready(summary) !== ready(old));
        if (moved) this.schedule(SETTLE_MS);
    }

    schedule(ms) {
        if (this.timer) return;
        this.timer = setTimeout(() => {
            this.timer = null;
            this.refresh();
        }, ms);
    }

    /* Asks for the waiting jobs and the queues. */
    async refresh() {
        if (this.inflight) {
            this.schedule(SETTLE_MS);
            return;
        }
        this.inflight = true;
        try {
            const [jobs] = await Promise.all([listAll('/api/v1/jobs?waiting=true'), this.refreshQueues()]);
            this.set(jobs);
            this.gen++;
            this.failed.jobs = null;
        } catch (e) {
            this.failed.jobs = e;
        } finally {
            this.inflight = false;
            this.showFailure();
        }
    }

    /* Asks for the queues alone; a failure is shown, not thrown. */
    async refreshQueues() {
        const ask = ++this.asked;
        try {
            const queues = await api('/api/v1/queues');
            this.setQueues((queues && queues.items) || [], ask);
            this.failed.queues = null;
        } catch (e) {
            this.failed.queues = e;
        }
        this.showFailure();
    }

    showFailure() {
        const f = this.failed;
        if (f.jobs) this.err.show(f.jobs, 'Could not read the queue');
        else this.err.show(f.queues, 'Could not read the queues');
    }

    start() {
        this.poller = setInterval(() => {
            if (this.items.length) this.refresh();
            else this.refreshQueues();
        }, POLL_MS);
    }

    stop() {
        clearInterval(this.poller);
        clearTimeout(this.timer);
        this.timer = null;
    }

    tick() {
        for (const j of this.items) {
            const row = this.rows.rows.get(j.name);
            if (!row) continue;
            setText(row.children[6], fmtDuration(this.waitedOf(j)));
            setText(row.children[7], this.startText(j.queue));
        }
    }
}
