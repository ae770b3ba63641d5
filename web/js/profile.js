/*
 * The job page's step breakdown (GET /jobs/NAME/profile, docs/profile.md): one stacked bar per
 * training task and ps, each segment a phase's share of the task's time over its newest
 * window (its total before there is one), with the time a step took (a ps: pulls a second),
 * and a legend. A segment's title gives its seconds and share. Hidden until a task reports.
 */

import {KeyedRows, h, setText} from './dom.js';
import {fmtNum, fmtRate, isNum} from './format.js';
import {card} from './widgets.js';

const TRAINING = ['input', 'pull', 'compute', 'push', 'barrier', 'checkpoint', 'evaluate'];
const PS = ['apply', 'copy'];

function taskName(t) {
    return t.type + '-' + t.index;
}

/* The window shown: the newest one, or the totals before there is one. */
function shown(t) {
    return t.recent || t.total;
}

/* new ProfileView(): el is its card; render(profile) shows GET .../profile's answer or none. */
export class ProfileView {
    constructor() {
        this.legend = h('div', {class: 'breakdown-legend', dataset: {testid: 'breakdown-legend'}},
            [...TRAINING, ...PS, 'other'].map((p) =>
                h('span', {class: 'breakdown-key'}, h('i', {class: 'phase-' + p}), p)));
        this.bars = h('div', {class: 'breakdown-bars', dataset: {testid: 'breakdown-bars'}});
        this.rows = new KeyedRows(this.bars, (row, t, fresh) => this.renderRow(row, t, fresh), 'div');
        this.note = h('p', {class: 'muted breakdown-note'});
        this.el = card('Step breakdown', {id: 'profile', class: 'span-2'},
            this.legend, this.bars, this.note);
        this.el.hidden = true;
    }

    renderRow(row, t, fresh) {
        const ps = t.type === 'ps';
        const phases = ps ? PS : TRAINING;
        if (fresh) {
            row.className = 'breakdown-row';
            row.dataset.task = taskName(t);
            const track = h('div', {class: 'breakdown-track'},
                [...phases, 'other'].map((p) => h('span', {class: 'phase-' + p, dataset: {phase: p}})));
            row.append(h('span', {class: 'breakdown-label'}, taskName(t)), track,
                h('span', {class: 'breakdown-figure num'}));
        }
        const w = shown(t);
        const secs = w && w.seconds > 0 ? w.seconds : 0;
        /* A span in progress at either end of a window can put its phases a little over its
         * time: the bar then shows their shares of their sum. */
        const sum = !w ? 0 : phases.reduce((a, p) => a + (isNum((w.phases || {})[p]) ? w.phases[p] : 0), 0);
        const whole = Math.max(secs, sum);
        for (const seg of row.children[1].children) {
            const p = seg.dataset.phase;
            const v = !w ? 0 : p === 'other' ? w.other : (w.phases || {})[p];
            const share = whole > 0 && isNum(v) ? Math.max(0, Math.min(1, v / whole)) : 0;
            const width = (100 * share).toFixed(2) + '%';
            if (seg.style.width !== width) seg.style.width = width;
            seg.dataset.share = share.toFixed(4);
            seg.title = p + ': ' + (isNum(v) ? fmtNum(v, 3) : '0') + ' s, ' + (100 * share).toFixed(1) + '%';
        }
        let figure = '—';
        if (w && w.count > 0 && secs > 0)
            figure = ps ? fmtRate(w.count / secs) + ' pulls/s' : fmtNum(1e3 * secs / w.count, 3) + ' ms/step';
        if (ps && w && w.count > 0 && isNum((w.phases || {}).queue))
            figure += ', queued ' + fmtNum(1e3 * w.phases.queue / w.count, 3) + ' ms/pull';
        setText(row.children[2], figure);
        row.dataset.window = t.recent ? 'recent' : 'total';
        row.dataset.seconds = String(secs); /* which window it shows */
    }

    render(profile) {
        const tasks = ((profile || {}).tasks || []).filter((t) => t.total);
        this.el.hidden = tasks.length === 0;
        this.rows.update(tasks, taskName);
        const win = (profile || {}).window_seconds;
        setText(this.note, 'Each bar: the task\'s time over its newest window of ' +
            (isNum(win) ? fmtNum(win, 2) : '2') + ' s or more, by phase (hover for seconds). ' +
            'ps: its service thread; queued: how long a pull waits for its version.');
    }
}
