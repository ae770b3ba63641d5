/*
 * The job page's task table: one row per task (chief, ps, worker, evaluator, each by index)
 * with its address, state, incarnation, restarts, step, examples/s, its lag (a training task
 * of a job with training.max_staleness: pushes ahead of the slowest, as a ps counts them),
 * and the age of its last heartbeat against its lease as text and a meter that fills as the
 * lease runs out.
 */

import {KeyedRows, h, setText} from './dom.js';
import {fmtDuration, fmtInt, fmtRate, isNum} from './format.js';
import {stateBadge} from './widgets.js';

const TYPE_RANK = {chief: 0, ps: 1, worker: 2, evaluator: 3};

function taskKey(t) {
    return t.type + '-' + t.index;
}

/* new TaskTable(): el is the table; it keeps the tasks it was given. */
export class TaskTable {
    constructor() {
        this.tasks = new Map();
        const taskBody = h('tbody');
        this.el = h('table', {class: 'table', dataset: {testid: 'task-table'}},
            h('thead', null, h('tr', null, ['Task', 'Address', 'State', 'Incarnation', 'Restarts',
                'Step', 'Examples/s', 'Lag', 'Heartbeat'].map((t, i) =>
                h('th', {scope: 'col', class: i >= 3 ? 'num' : null}, t)))),
            taskBody);
        this.rows = new KeyedRows(taskBody, (row, t, fresh) => this.renderRow(row, t, fresh));
    }

    /* Replaces every task with a GET /tasks answer's items. */
    setAll(items) {
        this.tasks = new Map();
        const now = performance.now();
        for (const t of items) this.tasks.set(taskKey(t), Object.assign(t, {_at: now}));
    }

    /* A "task" event. */
    set(t) {
        this.tasks.set(taskKey(t), Object.assign(t, {_at: performance.now()}));
    }

    /* The heartbeat age now: the age the coordinator reported plus the time since. */
    taskAge(t) {
        if (!isNum(t.heartbeat_age_seconds)) return null;
        return t.heartbeat_age_seconds + (performance.now() - t._at) / 1000;
    }

    renderRow(row, t, fresh) {
        if (fresh) {
            row.append(h('th', {scope: 'row'}), h('td', {class: 'mono'}), h('td'),
                h('td', {class: 'num mono'}), h('td', {class: 'num'}), h('td', {class: 'num'}),
                h('td', {class: 'num'}), h('td', {class: 'num'}), h('td', {class: 'num hb'}));
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
        setText(c[7], isNum(t.lag) ? fmtInt(t.lag) : '—');
        c[7].title = 'Pushes it was ahead of the slowest training task when its latest pull was ' +
            'answered, 0 .. training.max_staleness';
        this.renderHeartbeat(c[8], t);
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

    render() {
        const items = [...this.tasks.values()].sort((a, b) =>
            (TYPE_RANK[a.type] ?? 9) - (TYPE_RANK[b.type] ?? 9) || a.index - b.index);
        this.rows.update(items, taskKey);
    }

    /* Called every second: heartbeat ages grow between updates. */
    tick() {
        for (const [key, row] of this.rows.rows) {
            const t = this.tasks.get(key);
            if (t) this.renderHeartbeat(row.lastChild, t);
        }
    }
}
