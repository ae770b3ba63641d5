/*
 * The compare page's spec table: each job's normalised spec flattened to JSON pointers, a row
 * per pointer and a column per job, the rows whose values differ marked, and an option to
 * show only those.
 *
 * Test hooks: [data-testid=spec-diff] is the table; each body row has data-path (the pointer)
 * and data-differs "1" or "0"; [data-testid=spec-only-diff] is the "only differences" switch.
 */

import {h, setText} from './dom.js';
import {card} from './widgets.js';

/* The pointer token for a key (RFC 6901: "~" as "~0", "/" as "~1"). */
function escapeToken(key) {
    return String(key).replace(/~/g, '~0').replace(/\//g, '~1');
}

/* flattenSpec(value): [[pointer, leaf], ...] in the spec's own order. A leaf is a number,
 * string, boolean, null, or an empty object or array (kept, so that "{}" and an absent
 * field read differently). */
export function flattenSpec(value) {
    const out = [];
    const walk = (v, ptr) => {
        if (v !== null && typeof v === 'object') {
            const keys = Array.isArray(v) ? v.map((x, i) => i) : Object.keys(v);
            if (keys.length === 0) out.push([ptr, v]);
            for (const k of keys) walk(v[k], ptr + '/' + escapeToken(k));
            return;
        }
        out.push([ptr, v]);
    };
    walk(value, '');
    return out;
}

/* A leaf as the table shows it; undefined is a field that job's spec does not have. */
function showValue(v) {
    if (v === undefined) return '—';
    if (typeof v === 'string') return v;
    return JSON.stringify(v);
}

/* diffSpecs(specs): {rows: [{path, values, differs}], differing} over every pointer of any
 * spec (a spec's /name is left out: the columns are headed by it). */
export function diffSpecs(specs) {
    const order = [];
    const seen = new Set();
    const maps = specs.map((spec) => {
        const m = new Map();
        for (const [ptr, v] of flattenSpec(spec || {})) {
            if (ptr === '/name') continue;
            if (!seen.has(ptr)) {
                seen.add(ptr);
                order.push(ptr);
            }
            m.set(ptr, v);
        }
        return m;
    });
    let differing = 0;
    const rows = order.map((path) => {
        const values = maps.map((m) => m.get(path));
        const keys = values.map((v) => (v === undefined ? '\u0000absent' : JSON.stringify(v)));
        const differs = keys.some((k) => k !== keys[0]);
        if (differs) differing++;
        return {path, values, differs};
    });
    return {rows, differing};
}

/* new CompareSpecs(): el is its card; show(jobs) draws the table for [{name, spec}]. */
export class CompareSpecs {
    constructor() {
        this.onlyDiff = false;
        this.only = h('input', {type: 'checkbox', id: 'spec-only-diff',
            dataset: {testid: 'spec-only-diff'}});
        this.only.addEventListener('change', () => {
            this.onlyDiff = this.only.checked;
            this.applyFilter();
        });
        this.summary = h('span', {class: 'muted', dataset: {testid: 'spec-diff-summary'}});
        this.table = h('table', {class: 'table table-compact spec-diff', dataset: {testid: 'spec-diff'}});
        this.empty = h('p', {class: 'empty'}, 'No specs to compare.');
        this.el = card('Specs', {id: 'compare-specs', extra: h('div', {class: 'chart-controls'},
            this.summary, h('label', {class: 'control'}, this.only, 'Only differences'))},
        h('div', {class: 'table-wrap'}, this.table), this.empty);
    }

    show(jobs) {
        const {rows, differing} = diffSpecs(jobs.map((j) => j.spec));
        this.table.replaceChildren(
            h('caption', {class: 'sr-only'}, 'Spec fields by job; rows that differ are marked'),
            h('thead', null, h('tr', null, h('th', {scope: 'col'}, 'Field'),
                jobs.map((j) => h('th', {scope: 'col'}, j.name)))),
            h('tbody', null, rows.map((r) => h('tr', {
                class: r.differs ? 'differs' : null,
                dataset: {path: r.path, differs: r.differs ? '1' : '0'},
            }, h('th', {scope: 'row', class: 'mono'}, r.path,
                r.differs ? h('span', {class: 'sr-only'}, ' (differs)') : null),
            r.values.map((v) => h('td', {class: 'mono' + (v === undefined ? ' muted' : '')},
                showValue(v)))))));
        setText(this.summary, jobs.length < 2 ? '' :
            differing + ' of ' + rows.length + ' field' + (rows.length === 1 ? '' : 's') + ' differ');
        this.empty.hidden = jobs.length > 0;
        this.table.hidden = jobs.length === 0;
        this.applyFilter();
    }

    applyFilter() {
        for (const tr of this.table.querySelectorAll('tbody tr')) {
            tr.hidden = this.onlyDiff && tr.dataset.differs !== '1';
        }
    }
}
