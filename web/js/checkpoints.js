/*
 * The job page's checkpoint list: one row per checkpointed step, newest first, with its
 * time, size and files (name, size, CRC-32).
 */

import {KeyedRows, fillRow, h} from './dom.js';
import {fmtBytes, fmtInt} from './format.js';
import {card, timeEl} from './widgets.js';

/* new CheckpointTable(): el is its card; it keeps the checkpoints it was given, by step. */
export class CheckpointTable {
    constructor() {
        this.checkpoints = new Map();
        const ckBody = h('tbody');
        this.table = h('table', {class: 'table table-compact', dataset: {testid: 'checkpoints'}},
            h('thead', null, h('tr', null, ['Step', 'Time', 'Size', 'Files'].map((t, i) =>
                h('th', {scope: 'col', class: i === 0 || i === 2 ? 'num' : null}, t)))),
            ckBody);
        this.rows = new KeyedRows(ckBody, (row, c) => {
            const files = h('ul', {class: 'files'}, (c.files || []).map((f) =>
                h('li', null, h('span', {class: 'mono'}, f.name), ' ',
                    h('span', {class: 'muted'}, fmtBytes(f.bytes) + (f.crc32 ? ' · crc32 ' + f.crc32 : '')))));
            fillRow(row, [fmtInt(c.step), timeEl(c.time), fmtBytes(c.bytes), files]);
            row.children[0].className = 'num';
            row.children[2].className = 'num';
        });
        this.empty = h('p', {class: 'empty'}, 'No checkpoints yet.');
        this.el = card('Checkpoints', {id: 'checkpoints-card', class: 'span-1'},
            h('div', {class: 'table-wrap'}, this.table), this.empty);
    }

    /* Replaces every checkpoint with a GET /checkpoints answer's items. */
    setAll(items) {
        this.checkpoints = new Map();
        for (const c of items) this.checkpoints.set(c.step, c);
    }

    /* A "checkpoint" event; its "kept" names every checkpoint still on disk. */
    set(c) {
        this.checkpoints.set(c.step, c);
        if (Array.isArray(c.kept)) {
            const kept = new Set(c.kept);
            for (const step of this.checkpoints.keys()) if (!kept.has(step)) this.checkpoints.delete(step);
        }
    }

    render() {
        const items = [...this.checkpoints.values()].sort((a, b) => b.step - a.step);
        this.rows.update(items, (c) => String(c.step));
        this.empty.hidden = items.length > 0;
        this.table.hidden = items.length === 0;
    }
}
