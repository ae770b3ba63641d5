/*
 * The job page's variable placement view (GET /jobs/NAME/placement): the total size and the
 * imbalance across ps tasks, one bar per ps task, and one table row per variable shard. An
 * embedding table's shards say so and how many rows they hold, and each ps bar how many rows
 * a second it serves and receives. A dynamic table has a shard on every ps (its ids hashed
 * over them), and each ps bar says how many rows it holds of it, how many it admitted and
 * evicted, and its lookups a second.
 */

import {KeyedRows, fillRow, h, setText} from './dom.js';
import {fmtBytes, fmtInt, fmtRate, isNum} from './format.js';
import {card} from './widgets.js';

/* new PlacementView(): el is its card; render(placement) shows a placement or none (null). */
export class PlacementView {
    constructor() {
        this.psBars = h('div', {class: 'ps-bars', dataset: {testid: 'ps-bars'}});
        this.summary = h('p', {class: 'placement-summary', dataset: {testid: 'placement-summary'}});
        const shardBody = h('tbody');
        this.table = h('table', {class: 'table table-compact', dataset: {testid: 'placement-table'}},
            h('thead', null, h('tr', null, ['Variable', 'Shard', 'Shape', 'Offset', 'Bytes', 'ps', 'Rows'].map(
                (t, i) => h('th', {scope: 'col', class: i === 1 || i >= 3 ? 'num' : null}, t)))),
            shardBody);
        this.shardRows = new KeyedRows(shardBody, (row, s) => {
            const table = s.kind === 'table', dynamic = s.kind === 'dynamic';
            fillRow(row, [s.variable, fmtInt(s.shard), '[' + (s.shape || []).join(', ') + ']',
                fmtInt(s.offset), fmtInt(s.bytes), 'ps ' + s.ps_task,
                dynamic ? 'up to ' + fmtInt(s.max_rows) + ' (dynamic)' : table ? fmtInt(s.rows) + ' (table)' : '—']);
            if (!row.dataset.styled) {
                row.dataset.styled = '1';
                row.dataset.variable = s.variable;
                row.dataset.kind = s.kind || 'dense';
                row.children[0].className = 'mono';
                for (const i of [1, 3, 4, 5, 6]) row.children[i].className = 'num';
                row.children[2].className = 'mono';
            }
            row.dataset.bytes = s.bytes;
        });
        this.empty = h('p', {class: 'empty'}, 'No placement yet: it is fixed when the job starts.');
        this.el = card('Variable placement', {id: 'placement', class: 'span-2'},
            this.summary, this.psBars,
            h('div', {class: 'table-wrap'}, this.table), this.empty);
    }

    render(p) {
        const shards = (p && p.shards) || [];
        this.empty.hidden = shards.length > 0;
        this.table.hidden = shards.length === 0;
        this.shardRows.update(shards, (s) => s.variable + '#' + s.shard);
        if (!p || !shards.length) {
            this.psBars.replaceChildren();
            setText(this.summary, '');
            return;
        }
        const total = isNum(p.total_bytes) ? p.total_bytes : shards.reduce((a, s) => a + s.bytes, 0);
        this.summary.replaceChildren(
            h('span', null, 'Total ', h('strong', {dataset: {testid: 'placement-total'}, title: fmtInt(total) + ' bytes'},
                fmtBytes(total)), ' in ', String(shards.length), ' shard' + (shards.length === 1 ? '' : 's')),
            h('span', {class: 'imbalance' + (p.imbalance > 1.2 ? ' warn' : ''),
                title: 'Largest ps bytes / mean ps bytes (1.00 is perfectly even)'},
            'Imbalance ', h('strong', {dataset: {testid: 'imbalance'}}, isNum(p.imbalance) ? p.imbalance.toFixed(2) : '—')));
        const ps = (p.ps || []).slice().sort((a, b) => a.task - b.task);
        const tables = shards.some((s) => s.kind === 'table' || s.kind === 'dynamic');
        /* a table's rows a second, served (pulled) and received (pushed) */
        const rowRates = (x) => !tables ? [] : [h('span', {class: 'muted', dataset: {testid: 'ps-rows'},
            title: fmtInt(x.rows_pulled) + ' rows pulled, ' + fmtInt(x.rows_pushed) + ' pushed so far'},
        fmtRate(x.rows_pulled_per_sec) + ' rows/s pulled, ' + fmtRate(x.rows_pushed_per_sec) + ' pushed')];
        /* each dynamic table's share on this ps */
        const dynamic = (x) => (x.tables || []).map((t) => h('span', {class: 'muted', dataset: {testid: 'ps-table', table: t.table},
            title: fmtInt(t.refused) + ' updates refused, ' + fmtInt(t.lookups) + ' lookups (' + fmtInt(t.misses) +
                ' without a row), ' + fmtBytes(t.bytes)},
        t.table + ': ' + fmtInt(t.rows) + ' of ' + fmtInt(t.max_rows) + ' rows, ' + fmtInt(t.admitted) + ' admitted, ' +
            fmtInt(t.evicted) + ' evicted, ' + fmtRate(t.lookups_per_sec) + ' lookups/s'));
        const max = Math.max(1, ...ps.map((x) => x.bytes || 0));
        this.psBars.replaceChildren(...ps.map((x) => h('div', {class: 'ps-bar', dataset: {ps: x.task}},
            h('div', {class: 'ps-bar-label'}, 'ps ' + x.task),
            h('div', {class: 'ps-bar-track', role: 'img',
                'aria-label': 'ps ' + x.task + ': ' + fmtBytes(x.bytes) + ', ' + (x.shards || 0) + ' shards, ' +
                    fmtInt(x.updates) + ' updates'},
            h('div', {class: 'ps-bar-fill', style: 'width:' + ((x.bytes || 0) / max * 100).toFixed(1) + '%'})),
            h('div', {class: 'ps-bar-figures'}, h('span', {title: fmtInt(x.bytes) + ' bytes'}, fmtBytes(x.bytes)),
                h('span', {class: 'muted'}, fmtInt(x.shards) + ' shard' + (x.shards === 1 ? '' : 's')),
                h('span', {class: 'muted', dataset: {testid: 'ps-updates'},
                    title: fmtRate(x.updated_bytes_per_sec) + ' bytes of variables updated a second'},
                fmtInt(x.updates) + ' updates' + (x.updates_per_sec > 0 ? ', ' + fmtRate(x.updates_per_sec) + '/s' : '')),
                ...rowRates(x), ...dynamic(x)))));
    }
}
