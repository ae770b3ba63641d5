/*
 * Metric series as uPlot wants them: aligned columns over one sorted x (training step), with
 * TensorBoard's smoothing and the order in which tasks are listed.
 */

import {isNum} from './format.js';

/* Aligned series for uPlot: one sorted x (step) column, the wall time of each row, and one
 * value column per series key, null where that series has no point at that step. */
export class SeriesTable {
    constructor() {
        this.clear();
    }
    clear() {
        this.x = [];
        this.t = [];
        this.idx = new Map();
        this.cols = new Map();
        this.version = 0;
    }
    row(step, time) {
        let i = this.idx.get(step);
        if (i !== undefined) {
            if (isNum(time) && !(this.t[i] <= time)) this.t[i] = time;
            return i;
        }
        const n = this.x.length;
        if (n === 0 || step > this.x[n - 1]) {
            i = n;
            this.x.push(step);
            this.t.push(isNum(time) ? time : null);
            for (const c of this.cols.values()) c.push(null);
        } else {
            let lo = 0;
            let hi = n;
            while (lo < hi) {
                const mid = (lo + hi) >> 1;
                if (this.x[mid] < step) lo = mid + 1;
                else hi = mid;
            }
            i = lo;
            this.x.splice(i, 0, step);
            this.t.splice(i, 0, isNum(time) ? time : null);
            for (const c of this.cols.values()) c.splice(i, 0, null);
            for (let k = i + 1; k < this.x.length; k++) this.idx.set(this.x[k], k);
        }
        this.idx.set(step, i);
        return i;
    }
    /* Sets key's value at step; true when that series had no value there before. */
    set(key, step, time, value) {
        let col = this.cols.get(key);
        if (!col) {
            col = new Array(this.x.length).fill(null);
            this.cols.set(key, col);
            this.version++;
        }
        const i = this.row(step, time);
        const fresh = col[i] === null;
        col[i] = isNum(value) ? value : null;
        return fresh;
    }
    get(key, step) {
        const i = this.idx.get(step);
        const col = this.cols.get(key);
        return i === undefined || !col ? null : col[i];
    }
    lastStep() {
        return this.x.length ? this.x[this.x.length - 1] : null;
    }
    /* Wall times for a time axis: never decreasing, so that uPlot's x stays sorted. */
    times() {
        const out = new Array(this.t.length);
        let prev = -Infinity;
        for (let i = 0; i < this.t.length; i++) {
            const v = this.t[i] === null ? prev : this.t[i];
            prev = Math.max(prev, v);
            out[i] = isFinite(prev) ? prev : 0;
        }
        return out;
    }
}

/* TensorBoard's smoothing: an exponential moving average with weight w over the non-null
 * values, debiased so that the first points are not pulled towards 0. */
export function ema(col, w) {
    if (!(w > 0)) return col;
    const out = new Array(col.length);
    let last = 0;
    let n = 0;
    for (let i = 0; i < col.length; i++) {
        const v = col[i];
        if (v === null || !isFinite(v)) {
            out[i] = null;
            continue;
        }
        last = last * w + (1 - w) * v;
        n++;
        out[i] = last / (1 - Math.pow(w, n));
    }
    return out;
}

/* Series keys in display order: chief first, then by name, then by trailing number. */
export function taskOrder(a, b) {
    const rank = (k) => (k === 'chief' ? -1 : 0);
    const num = (k) => Number((/(\d+)$/.exec(k) || [0, 0])[1]);
    const stem = (k) => k.replace(/\d+$/, '');
    return rank(a) - rank(b) || stem(a).localeCompare(stem(b)) || num(a) - num(b);
}
