/*
 * The job page's metric charts and the series behind them: training loss (per task, with
 * their aggregate, smoothing, a wall-time x and a log y), test accuracy and loss, and for
 * sync jobs the step time per worker with the count of dropped stale gradients.
 *
 * Long runs stay fast: the page loads at most MAX_POINTS points per series
 * (/metrics?max_points=2000, downsampled by the server), appends live "metric" events, and
 * redraws at most once per animation frame (the host's markDirty). Past 20000 appended points
 * it reloads the downsampled series.
 *
 * window.psflowStats is the browser test's view of the loss chart (see main.js).
 */

import {api, jobPath} from './api.js';
import {Chart, legendValue, seriesColor, xAxis, yAxis} from './charts.js';
import {h} from './dom.js';
import {fmtClock, fmtInt, fmtNum, fmtSeconds, isNum} from './format.js';
import {SeriesTable, ema, taskOrder} from './series.js';
import {card} from './widgets.js';

export const MAX_POINTS = 2000;
const RELOAD_AFTER_APPENDED = 20000;

const stats = {
    points: 0, lastDrawMs: 0, loadMs: null, lastPointStep: null, lastPointDrawnAt: null,
};
window.psflowStats = stats;

function storedSmoothing() {
    const v = Number(localStorage.getItem('psflow.smoothing') ?? 0.6);
    return Number.isFinite(v) && v >= 0 && v <= 0.99 ? v : 0.6;
}

/*
 * new JobMetrics(name, host): lossCard, accCard and syncCard are its cards. host gives
 * markDirty(...parts) (parts "loss", "acc", "steptime", "stats"), current() (false once the
 * page is gone) and settled() (true once the page's snapshot is applied and none is loading).
 */
export class JobMetrics {
    constructor(name, host) {
        this.name = name;
        this.host = host;
        this.loss = new SeriesTable();
        this.stepTime = new SeriesTable();
        this.evals = new SeriesTable();
        this.stale = {};
        this.appended = 0;
        this.settings = {
            smoothing: storedSmoothing(),
            timeAxis: false,
            logY: false,
        };
        this.openedAt = performance.now();
        this.firstDrawPending = true;
        this.pendingPointStep = null;
        stats.loadMs = null;
        stats.points = 0;
        stats.lastPointStep = null;
        stats.lastPointDrawnAt = null;
        this.build();
    }

    build() {
        const markDirty = (...parts) => this.host.markDirty(...parts);
        /* Loss chart controls. */
        const smooth = h('input', {type: 'range', min: 0, max: 0.99, step: 0.01, id: 'smoothing',
            value: this.settings.smoothing, dataset: {testid: 'smoothing'}});
        const smoothVal = h('output', {for: 'smoothing'}, this.settings.smoothing.toFixed(2));
        smooth.addEventListener('input', () => {
            this.settings.smoothing = Number(smooth.value);
            smoothVal.value = this.settings.smoothing.toFixed(2);
            localStorage.setItem('psflow.smoothing', smooth.value);
            markDirty('loss');
        });
        const timeToggle = h('input', {type: 'checkbox', id: 'x-time', dataset: {testid: 'x-time'}});
        timeToggle.addEventListener('change', () => {
            this.settings.timeAxis = timeToggle.checked;
            markDirty('loss', 'steptime');
        });
        const logToggle = h('input', {type: 'checkbox', id: 'log-y', dataset: {testid: 'log-y'}});
        logToggle.addEventListener('change', () => {
            this.settings.logY = logToggle.checked;
            markDirty('loss');
        });
        const resetZoom = h('button', {type: 'button', class: 'btn btn-small',
            onclick: () => this.lossChart.resetZoom()}, 'Reset zoom');
        const controls = h('div', {class: 'chart-controls'},
            h('label', {for: 'smoothing', class: 'control'}, 'Smoothing', smooth, smoothVal),
            h('label', {class: 'control'}, timeToggle, 'Wall time on x'),
            h('label', {class: 'control'}, logToggle, 'Log y'),
            resetZoom);

        this.lossBox = h('div', {class: 'chart', role: 'group', 'aria-label': 'Loss by step',
            dataset: {testid: 'loss-chart'}});
        this.lossEmpty = h('p', {class: 'empty chart-empty'}, 'No training metrics yet.');
        this.accBox = h('div', {class: 'chart', role: 'group', 'aria-label': 'Test accuracy and loss by step',
            dataset: {testid: 'accuracy-chart'}});
        this.accEmpty = h('p', {class: 'empty chart-empty'}, 'No evaluations yet.');
        this.stBox = h('div', {class: 'chart', role: 'group', 'aria-label': 'Step time per worker',
            dataset: {testid: 'step-time-chart'}});
        this.stEmpty = h('p', {class: 'empty chart-empty'}, 'No step times yet.');
        this.staleList = h('dl', {class: 'stale-list', dataset: {testid: 'stale'}});

        this.lossChart = new Chart(this.lossBox, 300, () => this.lossDrawn());
        this.accChart = new Chart(this.accBox, 220);
        this.stChart = new Chart(this.stBox, 220);

        this.lossCard = card('Loss', {id: 'loss', class: 'span-2', extra: controls}, this.lossBox, this.lossEmpty,
            h('p', {class: 'hint'}, 'Drag across the chart to zoom, double-click to reset. ' +
                'Click a legend entry to hide that series.'));
        this.accCard = card('Accuracy', {id: 'accuracy', class: 'span-1'}, this.accBox, this.accEmpty);
        this.syncCard = card('Step time per worker', {id: 'steptime', class: 'span-1'},
            this.stBox, this.stEmpty,
            h('h3', {class: 'subhead'}, 'Dropped stale gradients'), this.staleList);
        this.syncCard.hidden = true;
    }

    destroy() {
        this.lossChart.destroy();
        this.accChart.destroy();
        this.stChart.destroy();
    }

    /* ---------- data */

    /* Replaces every series with a GET /metrics answer (null: none). */
    set(m) {
        this.loss.clear();
        this.stepTime.clear();
        this.evals.clear();
        this.appended = 0;
        this.reloadingMetrics = false;
        let points = 0;
        if (m) {
            for (const pt of m.points || []) {
                if (this.loss.set(pt.task, pt.step, pt.time, pt.loss)) points++;
                if (isNum(pt.step_time_seconds)) this.stepTime.set(pt.task, pt.step, pt.time, pt.step_time_seconds);
            }
            for (const e of m.evals || []) this.setEval(e);
            this.stale = m.stale || {};
            this.totalPoints = m.total_points;
        }
        this.points = points;
        stats.points = points;
    }

    /* The chief's evaluations, or the evaluator task's (one per checkpoint): two series each. */
    setEval(e) {
        const pre = e.task === 'evaluator' ? 'eval_' : '';
        this.evals.set(pre + 'accuracy', e.step, e.time, e.accuracy);
        this.evals.set(pre + 'test_loss', e.step, e.time, e.test_loss);
    }

    /* A "metric" event: a training point of one task, or an evaluation. */
    add(pt) {
        const markDirty = (...parts) => this.host.markDirty(...parts);
        if (isNum(pt.accuracy) || isNum(pt.test_loss)) {
            this.setEval(pt);
            markDirty('acc');
            return;
        }
        if (!isNum(pt.step) || !pt.task) return;
        if (this.loss.set(pt.task, pt.step, pt.time, pt.loss)) {
            this.points++;
            this.appended++;
            stats.points = this.points;
        }
        if (isNum(pt.step_time_seconds)) this.stepTime.set(pt.task, pt.step, pt.time, pt.step_time_seconds);
        if (isNum(pt.loss) && (this.pendingPointStep === null || pt.step > this.pendingPointStep)) {
            this.pendingPointStep = pt.step;
        }
        markDirty('loss', 'steptime', 'stats');
        if (this.appended > RELOAD_AFTER_APPENDED && !this.reloadingMetrics) this.reload();
    }

    async reload() {
        this.reloadingMetrics = true;
        try {
            const m = await api(jobPath(this.name, '/metrics?max_points=' + MAX_POINTS));
            if (this.host.current()) {
                this.set(m);
                this.host.markDirty('loss', 'acc', 'steptime');
            }
        } catch (e) {
            this.reloadingMetrics = false;
        }
    }

    /* The largest step with a training point, or null. */
    lastStep() {
        return this.loss.lastStep();
    }

    /* ---------- rendering */

    lossSeriesKeys() {
        return [...this.loss.cols.keys()].sort(taskOrder);
    }

    /* The aggregate loss at each row: the mean over tasks of each task's latest loss at or
     * before that step, counting a task only between its first and last point. Tasks report
     * at different steps, so a mean of only the points at exactly one step would jump
     * between tasks; this is the live counterpart of the API's bucketed "aggregate". */
    aggregateColumn(keys) {
        const n = this.loss.x.length;
        const cols = keys.map((k) => this.loss.cols.get(k));
        const first = cols.map((c) => c.findIndex((v) => v !== null));
        const last = cols.map((c) => {
            for (let i = c.length - 1; i >= 0; i--) if (c[i] !== null) return i;
            return -1;
        });
        const cur = cols.map(() => null);
        const out = new Array(n);
        for (let i = 0; i < n; i++) {
            let sum = 0;
            let count = 0;
            for (let j = 0; j < cols.length; j++) {
                const v = cols[j][i];
                if (v !== null) cur[j] = v;
                if (cur[j] !== null && i >= first[j] && i <= last[j]) {
                    sum += cur[j];
                    count++;
                }
            }
            out[i] = count ? sum / count : null;
        }
        return out;
    }

    renderLoss() {
        const keys = this.lossSeriesKeys();
        const hasAgg = keys.length > 0;
        const empty = this.loss.x.length === 0;
        this.lossEmpty.hidden = !empty;
        this.lossBox.hidden = empty;
        if (empty) return;
        const {timeAxis, logY, smoothing} = this.settings;
        const pos = (col) => (logY ? col.map((v) => (v !== null && v > 0 ? v : null)) : col);
        const data = [timeAxis ? this.loss.times() : this.loss.x];
        if (hasAgg) {
            const agg = this.aggregateColumn(keys);
            data.push(pos(agg), pos(ema(agg, smoothing)));
        }
        for (const k of keys) data.push(pos(ema(this.loss.cols.get(k), smoothing)));
        const sig = [timeAxis, logY, hasAgg, keys.join(',')].join('|');
        this.drawStartedAt = performance.now();
        this.drawStep = this.pendingPointStep;
        this.lossChart.draw(sig, () => {
            const series = [{label: timeAxis ? 'Time' : 'Step',
                value: legendValue((v) => (timeAxis ? fmtClock(v * 1000) : fmtInt(v)))}];
            const fmtv = legendValue((v) => fmtNum(v, 4));
            if (hasAgg) {
                series.push({label: 'aggregate (raw)', stroke: 'rgba(17,24,39,0.28)', width: 1,
                    spanGaps: true, value: fmtv, points: {show: false}});
                series.push({label: 'aggregate (smoothed)', stroke: '#111827', width: 2,
                    spanGaps: true, value: fmtv, points: {show: false}});
            }
            keys.forEach((k, i) => series.push({label: k, stroke: seriesColor(k, i), width: 1.25,
                spanGaps: true, value: fmtv, points: {show: false}, alpha: 0.85}));
            return {
                scales: {x: {time: timeAxis}, y: logY ? {distr: 3, log: 10} : {}},
                series,
                axes: [xAxis(timeAxis), yAxis('y', {label: 'loss', labelSize: 18})],
                legend: {live: true},
            };
        }, data);
    }

    /* uPlot's draw hook for the loss chart: the figures window.psflowStats reports. */
    lossDrawn() {
        const now = performance.now();
        if (this.drawStartedAt !== undefined) stats.lastDrawMs = now - this.drawStartedAt;
        if (this.firstDrawPending && this.host.settled() && this.loss.x.length) {
            this.firstDrawPending = false;
            stats.loadMs = now - this.openedAt;
        }
        if (this.drawStep !== null && this.drawStep !== undefined &&
            (stats.lastPointStep === null || this.drawStep > stats.lastPointStep)) {
            stats.lastPointStep = this.drawStep;
            stats.lastPointDrawnAt = now;
        } else if (stats.lastPointStep === null && this.loss.x.length) {
            stats.lastPointStep = this.loss.lastStep();
            stats.lastPointDrawnAt = now;
        }
    }

    renderAcc() {
        const empty = this.evals.x.length === 0;
        this.accEmpty.hidden = !empty;
        this.accBox.hidden = empty;
        if (empty) return;
        const col = (k) => this.evals.cols.get(k) || this.evals.x.map(() => null);
        const evaluator = this.evals.cols.has('eval_accuracy') || this.evals.cols.has('eval_test_loss');
        const pct = legendValue((v) => (v * 100).toFixed(2) + ' %');
        const num = legendValue((v) => fmtNum(v, 4));
        const series = [
            {label: 'Step', value: legendValue(fmtInt)},
            {label: 'accuracy', scale: 'acc', stroke: '#059669', width: 2, spanGaps: true,
                value: pct, points: {show: true, size: 5}},
            {label: 'test loss', scale: 'tl', stroke: '#d97706', width: 1.5, spanGaps: true,
                dash: [6, 4], value: num, points: {show: true, size: 4}},
        ];
        const data = [this.evals.x, col('accuracy'), col('test_loss')];
        if (evaluator) { /* the evaluator task's series, one point per checkpoint */
            series.push(
                {label: 'evaluator accuracy', scale: 'acc', stroke: '#2563eb', width: 2, spanGaps: true,
                    value: pct, points: {show: true, size: 5}},
                {label: 'evaluator loss', scale: 'tl', stroke: '#7c3aed', width: 1.5, spanGaps: true,
                    dash: [2, 3], value: num, points: {show: true, size: 4}});
            data.push(col('eval_accuracy'), col('eval_test_loss'));
        }
        this.accChart.draw(evaluator ? 'acc+eval' : 'acc', () => ({
            scales: {x: {time: false}, acc: {}, tl: {}},
            series,
            axes: [xAxis(false), yAxis('acc', {label: 'accuracy', labelSize: 18}),
                yAxis('tl', {side: 1, label: 'test loss', labelSize: 18, grid: {show: false}})],
        }), data);
    }

    /* The sync card: step time per worker and the dropped stale gradients per task. */
    renderStepTime() {
        const keys = [...this.stepTime.cols.keys()].sort(taskOrder);
        const empty = this.stepTime.x.length === 0;
        this.stEmpty.hidden = !empty;
        this.stBox.hidden = empty;
        if (!empty) {
            const timeAxis = this.settings.timeAxis;
            const data = [timeAxis ? this.stepTime.times() : this.stepTime.x];
            for (const k of keys) data.push(this.stepTime.cols.get(k));
            this.stChart.draw([timeAxis, keys.join(',')].join('|'), () => ({
                scales: {x: {time: timeAxis}},
                series: [{label: timeAxis ? 'Time' : 'Step',
                    value: legendValue((v) => (timeAxis ? fmtClock(v * 1000) : fmtInt(v)))}]
                    .concat(keys.map((k, i) => ({label: k, stroke: seriesColor(k, i), width: 1.25,
                        spanGaps: true, points: {show: false},
                        value: legendValue(fmtSeconds)}))),
                axes: [xAxis(timeAxis), yAxis('y', {label: 'step time', labelSize: 18,
                    values: (u, splits) => splits.map((v) => (v === null ? '' : fmtSeconds(v)))})],
            }), data);
        }
        const entries = Object.entries(this.stale || {}).sort((a, b) => taskOrder(a[0], b[0]));
        if (!entries.length) {
            this.staleList.replaceChildren(h('div', {class: 'muted'}, 'None dropped.'));
        } else {
            this.staleList.replaceChildren(...entries.map(([k, v]) =>
                h('div', {class: 'stale-item' + (v > 0 ? ' warn' : '')}, h('dt', null, k), h('dd', null, fmtInt(v)))));
        }
    }
}
