/*
 * uPlot wrappers: a chart whose width follows its container, the dashboard's axes and
 * colours, and legend values that read the line drawn through a gap. uPlot itself is the
 * global loaded by index.html from /vendor/uplot/uPlot.iife.min.js.
 */

/* global uPlot */

import {setText} from './dom.js';
import {fmtCompact} from './format.js';

const PALETTE = ['#2563eb', '#d97706', '#059669', '#db2777', '#7c3aed', '#0891b2',
    '#65a30d', '#dc2626', '#4f46e5', '#ca8a04'];

export function seriesColor(key, i) {
    return PALETTE[i % PALETTE.length];
}

/* A uPlot chart in a card whose width follows its container. draw(signature, makeOpts,
 * data): the chart is rebuilt from makeOpts() when the signature (the series set and the
 * axis modes) changes and otherwise updated with setData. onDraw is uPlot's draw hook. */
export class Chart {
    constructor(container, height, onDraw) {
        this.container = container;
        this.height = height;
        this.onDraw = onDraw;
        this.u = null;
        this.signature = '';
        this.zoomed = false;
        this.hidden = new Set();
        this.resize = new ResizeObserver(() => {
            if (this.u) {
                const w = this.width();
                if (w !== this.u.width) this.u.setSize({width: w, height: this.height});
            }
        });
        this.resize.observe(container);
    }
    width() {
        return Math.max(240, Math.floor(this.container.clientWidth));
    }
    draw(signature, makeOpts, data) {
        if (typeof uPlot === 'undefined') {
            setText(this.container, 'Charts unavailable: uPlot did not load from /vendor/uplot/.');
            return;
        }
        if (!this.u || signature !== this.signature) {
            if (this.u) this.u.destroy();
            this.signature = signature;
            this.zoomed = false;
            const opts = makeOpts();
            opts.width = this.width();
            opts.height = this.height;
            /* Series hidden from the legend stay hidden when the chart is rebuilt. */
            opts.series.forEach((sr, i) => {
                if (i > 0 && this.hidden.has(sr.label)) sr.show = false;
            });
            opts.hooks = {
                draw: [() => this.onDraw && this.onDraw()],
                setSelect: [(u) => {
                    if (u.select.width > 0) this.zoomed = true;
                }],
                setSeries: [(u, i) => {
                    if (i === null || i === undefined || !u.series[i]) return;
                    const label = u.series[i].label;
                    if (u.series[i].show) this.hidden.delete(label);
                    else this.hidden.add(label);
                }],
            };
            opts.cursor = Object.assign({drag: {x: true, y: false, setScale: true}}, opts.cursor || {});
            this.u = new uPlot(opts, data, this.container);
            this.u.over.addEventListener('dblclick', () => {
                this.zoomed = false;
            });
            this.keyboardLegend();
            return;
        }
        this.u.setData(data, !this.zoomed);
    }
    /* uPlot's legend entries toggle their series on click; make them reachable and usable
     * from the keyboard too. */
    keyboardLegend() {
        const rows = this.u.root.querySelectorAll('.u-legend .u-series');
        rows.forEach((row, i) => {
            const th = row.querySelector('th');
            if (i === 0 || !th) return;
            const sync = () => th.setAttribute('aria-checked', String(!row.classList.contains('u-off')));
            th.tabIndex = 0;
            th.setAttribute('role', 'switch');
            th.title = 'Show or hide this series';
            sync();
            th.addEventListener('click', sync);
            th.addEventListener('keydown', (e) => {
                if (e.key === 'Enter' || e.key === ' ') {
                    e.preventDefault();
                    th.click();
                }
            });
        });
    }
    resetZoom() {
        this.zoomed = false;
        if (this.u) this.u.setData(this.u.data, true);
    }
    destroy() {
        this.resize.disconnect();
        if (this.u) this.u.destroy();
        this.u = null;
    }
}

const axisStyle = {
    stroke: '#4b5563',
    grid: {stroke: 'rgba(0,0,0,0.07)', width: 1},
    ticks: {stroke: 'rgba(0,0,0,0.15)', width: 1},
    font: '12px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif',
    labelFont: '12px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif',
};

/* Whole-number tick spacings for a step axis (uPlot's defaults include 2.5 and 0.5). */
const STEP_INCRS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5,
    5e5, 1e6, 2e6, 5e6, 1e7, 2e7, 5e7, 1e8];

/* The x axis: wall time (uPlot's time ticks) or training step. */
export function xAxis(timeMode) {
    return Object.assign({}, axisStyle, timeMode ? {} : {
        incrs: STEP_INCRS,
        values: (u, splits) => splits.map((v) => (v === null ? '' : fmtCompact(v))),
    });
}

/* A y axis on scale; extra overrides (label, side, values, grid). */
export function yAxis(scale, extra) {
    return Object.assign({}, axisStyle, {scale, size: 60,
        values: (u, splits) => splits.map((v) => (v === null ? '' : fmtCompact(v)))}, extra || {});
}

/* A legend value formatter: the series' value at the cursor, or where it has no point there
 * its last value before it (the line drawn through the gap), or its latest value when the
 * cursor is off the chart. */
export function legendValue(fmt) {
    return (u, v, si, idx) => {
        const col = u.data[si] || [];
        const from = idx === null || idx === undefined ? col.length - 1 : idx;
        for (let i = from; i >= 0; i--) {
            if (col[i] !== null && col[i] !== undefined) return fmt(col[i]);
        }
        return '—';
    };
}
