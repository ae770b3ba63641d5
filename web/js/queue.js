/*
 * The Jobs page's queue: the jobs waiting for agents in the order the coordinator admits them
 * (status.queue, api/rest.md; docs/design.md "The queue"), each with its priority, what it
 * waits for and, for the first that holds agents, when it is expected to start. One job's admission moves every job behind it, and the coordinator sends no
 * event for a move, so the card asks again (GET /api/v1/jobs?waiting=true) shortly after any
 * event that can change the queue (a job submitted, admitted, finished or preempted) and every
 * few seconds while a job waits.
 *
 * Test hooks: [data-testid=queue-table] with a row per waiting job, whose dataset holds key
 * (the job), position and reason (capacity, reserved, cluster_too_small or preempted).
 */

import {listAll} from './api.js';
import {KeyedRows, h, setText} from './dom.js';
import {fmtDuration, fmtInt, parseTime} from './format.js';
import {card, errorBox, phaseBadge} from './widgets.js';

/* How often the card asks while jobs wait, and how soon after an event that moves them. */
const POLL_MS = 5000;
const SETTLE_MS = 300;

function jobLink(name) {
    return h('a', {href: '#/jobs/' + encodeURIComponent(name)}, name);
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
    default:
        return [q.reason || '—'];
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
        this.err = errorBox();
        const tbody = h('tbody');
        this.table = h('table', {class: 'table', dataset: {testid: 'queue-table'}},
            h('caption', {class: 'sr-only'}, 'Jobs waiting for agents, in the order they start'),
            h('thead', null, h('tr', null, ['#', 'Job', 'Priority', 'Phase', 'Waiting for', 'Waiting',
                'Expected start'].map((t, i) => h('th', {scope: 'col', class: i === 0 || i === 2 || i >= 5 ? 'num' : null},
                t)))),
            tbody);
        this.rows = new KeyedRows(tbody, (row, j, fresh) => this.renderRow(row, j, fresh));
        this.empty = h('p', {class: 'empty'}, 'No job is waiting for agents.');
        this.count = h('span', {class: 'muted'});
        this.el = card('Queue', {id: 'queue', extra: this.count}, this.err.el,
            h('div', {class: 'table-wrap'}, this.table), this.empty);
        this.table.hidden = true;
    }

    renderRow(row, j, fresh) {
        if (fresh) {
            row.append(h('td', {class: 'num'}), h('th', {scope: 'row'}, jobLink(j.name)), h('td', {class: 'num'}),
                h('td'), h('td'), h('td', {class: 'num'}), h('td', {class: 'num'}));
        }
        const q = j.queue;
        const c = row.children;
        row.dataset.position = String(q.position);
        row.dataset.reason = q.reason || '';
        setText(c[0], fmtInt(q.position));
        setText(c[2], fmtInt(q.priority));
        if (c[3].textContent !== (j.phase || '—')) c[3].replaceChildren(phaseBadge(j.phase));
        const words = waitingFor(q);
        const text = words.map((w) => (typeof w === 'string' ? w : w.textContent)).join('');
        if (c[4].textContent !== text) c[4].replaceChildren(...words);
        c[4].title = j.message || '';
        setText(c[5], fmtDuration(this.waitedOf(j)));
        setText(c[6], this.startText(q));
        c[6].title = q.estimated_start ||
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
     * refresh has been applied since (it is newer). */
    setSnapshot(jobs, gen) {
        if (gen === this.gen) this.set(jobs);
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

    /* A job event: ask again soon when it can have moved the queue. */
    noteJob(summary, old) {
        const moved = !old || old.phase !== summary.phase || Boolean(old.queue) !== Boolean(summary.queue) ||
            (summary.queue && old.queue && (summary.queue.position !== old.queue.position ||
                summary.queue.reason !== old.queue.reason));
        if (moved) this.schedule(SETTLE_MS);
    }

    schedule(ms) {
        if (this.timer) return;
        this.timer = setTimeout(() => {
            this.timer = null;
            this.refresh();
        }, ms);
    }

    async refresh() {
        if (this.inflight) {
            this.schedule(SETTLE_MS);
            return;
        }
        this.inflight = true;
        try {
            this.set(await listAll('/api/v1/jobs?waiting=true'));
            this.gen++;
            this.err.show(null);
        } catch (e) {
            this.err.show(e, 'Could not read the queue');
        } finally {
            this.inflight = false;
        }
    }

    start() {
        this.poller = setInterval(() => {
            if (this.items.length) this.refresh();
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
            setText(row.children[5], fmtDuration(this.waitedOf(j)));
            setText(row.children[6], this.startText(j.queue));
        }
    }
}
