/*
 * The compare page's chart: one line per job for a metric the jobs have (training loss, test
 * accuracy, test AUC, test loss), by training step or by time since each job started, so that
 * runs made at different times overlay.
 *
 * The series come from GET /jobs/NAME/metrics: training loss is its "aggregate" (the mean
 * over the job's training tasks per step bucket), the test figures its "evals".
 *
 * Test hooks on [data-testid=compare-chart]: data-series (lines drawn), data-points (each
 * line's points, comma-separated), data-metric, data-xmode ("step" | "time"), data-draws
 * (uPlot draws so far).
 */

import {Chart, legendValue, seriesColor, xAxis, yAxis} from './charts.js';
import {h} from './dom.js';
import {fmtDuration, fmtInt, fmtNum, isNum, parseTime} from './format.js';
import {card} from './widgets.js';

/* The metrics offered, in menu order: where each is read from and its field. */
export const METRICS = [
    {key: 'loss', label: 'Training loss', from: 'aggregate'},
    {key: 'accuracy', label: 'Test accuracy', from: 'evals'},
    {key: 'test_auc', label: 'Test AUC', from: 'evals'},
    {key: 'test_loss', label: 'Test loss', from: 'evals'},
];

/* A job's points of metric m as [x, value] pairs, x the step or the seconds since the job
 * started (its status.start_time, else its first point). */
function jobSeries(job, m, timeMode) {
    const rows = ((job.metrics || {})[m.from] || []).filter((p) => isNum(p[m.key]) && isNum(p.step));
    if (!timeMode) return rows.map((p) => [p.step, p[m.key]]);
    const started = parseTime((job.status || {}).start_time);
    const first = Math.min(...rows.filter((p) => isNum(p.time)).map((p) => p.time));
    const t0 = started !== null ? started / 1000 : first;
    return rows.filter((p) => isNum(p.time)).map((p) => [Math.max(0, p.time - t0), p[m.key]])
        .sort((a, b) => a[0] - b[0]);
}

/* uPlot's aligned data: one sorted x over every job's points, null where a job has none. */
function align(seriesList) {
    const xs = [...new Set(seriesList.flatMap((s) => s.map((p) => p[0])))].sort((a, b) => a - b);
    const at = new Map(xs.map((x, i) => [x, i]));
    const cols = seriesList.map((s) => {
        const col = new Array(xs.length).fill(null);
        for (const [x, y] of s) col[at.get(x)] = y;
        return col;
    });
    return [xs, ...cols];
}

/* new CompareChart(): el is its card; show(jobs) draws [{name, status, metrics}]. */
export class CompareChart {
    constructor() {
        this.metric = 'loss';
        this.timeMode = false;
        this.logY = false;
        this.jobs = [];
        this.draws = 0;
        this.select = h('select', {id: 'compare-metric', dataset: {testid: 'compare-metric'}});
        this.select.addEventListener('change', () => {
            this.metric = this.select.value;
            this.draw();
        });
        this.timeToggle = h('input', {type: 'checkbox', id: 'compare-x-time',
            dataset: {testid: 'compare-x-time'}});
        this.timeToggle.addEventListener('change', () => {
            this.timeMode = this.timeToggle.checked;
            this.draw();
        });
        const logToggle = h('input', {type: 'checkbox', id: 'compare-log-y', dataset: {testid: 'compare-log-y'}});
        logToggle.addEventListener('change', () => {
            this.logY = logToggle.checked;
            this.draw();
        });
        const controls = h('div', {class: 'chart-controls'},
            h('label', {for: 'compare-metric', class: 'control'}, 'Metric', this.select),
            h('label', {class: 'control'}, this.timeToggle, 'Time since start on x'),
            h('label', {class: 'control'}, logToggle, 'Log y'),
            h('button', {type: 'button', class: 'btn btn-small', onclick: () => this.chart.resetZoom()},
                'Reset zoom'));
        this.box = h('div', {class: 'chart', role: 'group', 'aria-label': 'Metric by job',
            dataset: {testid: 'compare-chart', series: '0', draws: '0'}});
        this.empty = h('p', {class: 'empty chart-empty'}, 'No metrics for these jobs yet.');
        this.chart = new Chart(this.box, 320, () => {
            this.draws++;
            this.box.dataset.draws = String(this.draws);
        });
        this.el = card('Metrics', {id: 'compare-metrics', extra: controls}, this.box, this.empty,
            h('p', {class: 'hint'}, 'Drag across the chart to zoom, double-click to reset. ' +
                'Click a legend entry to hide that job.'));
    }

    show(jobs) {
        this.jobs = jobs;
        /* Offer the metrics some job has; keep the choice while it stays available. */
        const have = METRICS.filter((m) => jobs.some((j) => jobSeries(j, m, false).length > 0));
        const keys = have.map((m) => m.key).join(',');
        if (this.select.dataset.keys !== keys) {
            this.select.dataset.keys = keys;
            this.select.replaceChildren(...have.map((m) => h('option', {value: m.key}, m.label)));
        }
        if (!have.some((m) => m.key === this.metric) && have.length) this.metric = have[0].key;
        this.select.value = this.metric;
        this.select.disabled = have.length < 2;
        this.draw();
    }

    draw() {
        const m = METRICS.find((x) => x.key === this.metric) || METRICS[0];
        const withData = this.jobs.map((j, i) => ({job: j, i, pts: jobSeries(j, m, this.timeMode)}))
            .filter((s) => s.pts.length > 0);
        Object.assign(this.box.dataset, {series: String(withData.length), metric: m.key,
            points: withData.map((s) => s.pts.length).join(','),
            xmode: this.timeMode ? 'time' : 'step'});
        this.empty.hidden = withData.length > 0;
        this.box.hidden = withData.length === 0;
        if (withData.length === 0) return;
        const timeMode = this.timeMode;
        const fmtX = timeMode ? (v) => fmtDuration(v) : (v) => fmtInt(v);
        const fmtY = (v) => fmtNum(v, 4);
        /* A log scale needs values above 0: a series with 0 or less keeps the linear one. */
        const logY = this.logY && withData.every((s) => s.pts.every((p) => p[1] > 0));
        const signature = [m.key, timeMode, logY, ...withData.map((s) => s.job.name)].join('|');
        const makeOpts = () => ({
            scales: {x: {time: false}, y: logY ? {distr: 3, log: 10} : {}},
            axes: [
                /* xAxis(true) is the plain style: uPlot's numeric ticks, shown as durations. */
                Object.assign(xAxis(timeMode), timeMode ? {
                    values: (u, splits) => splits.map((v) => (v === null ? '' : fmtDuration(v))),
                    label: 'Time since start',
                } : {label: 'Step'}),
                yAxis('y', {label: m.label}),
            ],
            series: [
                {label: timeMode ? 'Time' : 'Step', value: (u, v) => (v === null ? '—' : fmtX(v))},
                ...withData.map((s) => ({
                    label: s.job.name, stroke: seriesColor(s.job.name, s.i), width: 1.75,
                    /* uPlot marks the points of a sparse line itself; evaluations always. */
                    spanGaps: true, points: m.from === 'evals' ? {show: true} : {}, value: legendValue(fmtY),
                })),
            ],
        });
        this.chart.draw(signature, makeOpts, align(withData.map((s) => s.pts)));
    }

    destroy() {
        this.chart.destroy();
    }
}
