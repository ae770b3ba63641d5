/*
 * The job page's status summary: the job's message, the figures (global step, steps/s,
 * examples/s, ETA, loss, accuracy, a two-class job's test AUC and calibration, a synthetic_ctr
 * job's Bayes-optimal AUC beside them, replicas, restarts, running time), the progress bar and
 * the conditions.
 *
 * Steps/s and the ETA are the coordinator's (status.steps_per_sec, status.eta_seconds: a 30 s
 * window of the reported steps, restarted at each membership change; "—" while it is too
 * short), never measured on the page, so the page and the API show one figure. A job whose
 * step has not advanced for 30 s shows "stalled" and for how long (status.stalled_seconds).
 */

import {h, setText} from './dom.js';
import {fmtDuration, fmtInt, fmtNum, fmtRate, isNum, parseTime} from './format.js';
import {timeEl} from './widgets.js';

/* new JobSummary(): el is the summary section. */
export class JobSummary {
    constructor() {
        this.liveReplicas = null;
        this.stallAt = 0;
        const stat = (label, testid, hint, wide) => {
            const v = h('dd', {dataset: {testid}});
            return [h('div', {class: 'stat' + (wide ? ' stat-wide' : ''), title: hint || null},
                h('dt', null, label), v), v];
        };
        const [sStep, vStep] = stat('Global step', 'global-step', 'Global step / max steps', true);
        const [sSps, vSps] = stat('Steps/s', 'steps-per-sec', 'Global steps per second');
        const [sEps, vEps] = stat('Examples/s', 'examples-per-sec');
        const [sEta, vEta] = stat('ETA', 'eta', 'Time left at the current rate');
        const [sLoss, vLoss] = stat('Loss', 'loss');
        const [sAcc, vAcc] = stat('Accuracy', 'accuracy', 'Latest evaluation on the test set');
        const [sAuc, vAuc] = stat('AUC', 'test-auc', 'Area under the ROC curve on the test set');
        const [sCal, vCal] = stat('Calibration', 'test-calibration',
            'Mean prediction over mean label on the test set (1: calibrated)');
        const [sBayes, vBayes] = stat('Bayes-optimal AUC', 'bayes-auc',
            'synthetic_ctr: the true model\'s AUC on the test set, the best any model can reach');
        /* until a two-class job's chief has evaluated; Bayes-optimal: synthetic_ctr data only */
        sAuc.hidden = sCal.hidden = sBayes.hidden = true;
        const [sRep, vRep] = stat('Workers / ps', 'replicas', 'Ready / desired');
        const [sRst, vRst] = stat('Restarts', 'restarts', 'Gang restarts (generation)');
        const [sDur, vDur] = stat('Running for', 'duration');
        this.v = {step: vStep, sps: vSps, eps: vEps, eta: vEta, loss: vLoss, acc: vAcc,
            auc: vAuc, cal: vCal, bayes: vBayes, rep: vRep, rst: vRst, dur: vDur};
        this.progress = h('div', {class: 'progress', role: 'progressbar', 'aria-valuemin': 0,
            'aria-label': 'Training progress'}, h('div', {class: 'progress-bar'}));
        this.message = h('p', {class: 'job-message', dataset: {testid: 'job-message'}});
        this.conditions = h('ol', {class: 'conditions', dataset: {testid: 'conditions'}});
        this.el = h('section', {class: 'summary', 'aria-label': 'Job status'},
            this.message,
            h('dl', {class: 'stats'}, sStep, sSps, sEps, sEta, sLoss, sAcc, sAuc, sBayes, sCal, sRep,
                sRst, sDur),
            this.progress,
            h('details', {class: 'conditions-box'}, h('summary', null, 'Conditions'), this.conditions));
    }

    /* A "job" event's summary: its replica counts. */
    noteSummary(s) {
        if (s.replicas) this.liveReplicas = s.replicas;
        this.stallAt = performance.now();
    }

    /* Steps/s as the coordinator gives it, or "stalled N s". */
    stepsText(st) {
        if (st.phase !== 'Running') return '—';
        if (st.stalled && isNum(st.stalled_seconds)) {
            const at = this.stallAt || performance.now();
            return 'stalled ' + fmtDuration(st.stalled_seconds + (performance.now() - at) / 1000);
        }
        return isNum(st.steps_per_sec) ? fmtRate(st.steps_per_sec) : '—';
    }

    render(job) {
        const st = job.status || {};
        const spec = job.spec || {};
        const phase = st.phase || 'Unknown';
        setText(this.message, st.message || '');
        const maxSteps = isNum(st.max_steps) ? st.max_steps : (spec.training || {}).max_steps;
        setText(this.v.step, fmtInt(st.global_step) + (isNum(maxSteps) ? ' / ' + fmtInt(maxSteps) : ''));
        this.v.step.dataset.value = isNum(st.global_step) ? st.global_step : '';
        setText(this.v.sps, this.stepsText(st));
        this.v.sps.dataset.stalled = st.stalled ? '1' : '';
        setText(this.v.eps, phase === 'Running' ? fmtRate(st.examples_per_sec) : '—');
        /* Progress and time left are the coordinator's (status.progress, status.eta_seconds). */
        let eta = '—';
        if (phase === 'Succeeded') eta = 'done';
        else if (phase === 'Running' && isNum(st.eta_seconds)) eta = fmtDuration(st.eta_seconds);
        setText(this.v.eta, eta);
        setText(this.v.loss, fmtNum(st.loss, 4));
        setText(this.v.acc, isNum(st.accuracy) ? (st.accuracy * 100).toFixed(2) + ' %' : '—');
        this.v.auc.parentNode.hidden = !isNum(st.test_auc);
        setText(this.v.auc, fmtNum(st.test_auc, 4));
        this.v.bayes.parentNode.hidden = !isNum(st.bayes_auc);
        setText(this.v.bayes, fmtNum(st.bayes_auc, 4));
        this.v.cal.parentNode.hidden = !isNum(st.test_calibration);
        setText(this.v.cal, fmtNum(st.test_calibration, 3));
        const rep = spec.replicas || {};
        const rs = st.replica_statuses || {};
        const live = this.liveReplicas || {};
        const ready = (t) => (live[t] ? live[t].ready : (rs[t] || {}).active);
        const desired = (t) => (live[t] ? live[t].desired : rep[t]);
        setText(this.v.rep, fmtInt(ready('worker')) + '/' + fmtInt(desired('worker')) + ' · ' +
            fmtInt(ready('ps')) + '/' + fmtInt(desired('ps')));
        setText(this.v.rst, fmtInt(st.restarts) + (isNum(st.generation) ? ' (gen ' + st.generation + ')' : ''));
        this.renderDuration(job);
        const frac = isNum(st.progress) ? Math.min(1, Math.max(0, st.progress)) : 0;
        this.progress.firstChild.style.width = (frac * 100).toFixed(1) + '%';
        this.progress.setAttribute('aria-valuemax', isNum(maxSteps) ? maxSteps : 0);
        this.progress.setAttribute('aria-valuenow', isNum(st.global_step) ? st.global_step : 0);
        this.progress.className = 'progress progress-' + phase.toLowerCase();

        const conds = st.conditions || [];
        const condSig = JSON.stringify(conds);
        if (condSig !== this.condSig) {
            this.condSig = condSig;
            this.conditions.replaceChildren(...conds.map((c) => h('li', {class: c.status === 'True' ? 'on' : 'off'},
                h('span', {class: 'cond-type'}, c.type), ' ',
                h('span', {class: 'cond-reason'}, c.reason || ''), ' ',
                timeEl(c.last_transition_time),
                c.message ? h('div', {class: 'cond-message'}, c.message) : null)));
        }
    }

    renderDuration(job) {
        const st = job.status || {};
        const start = parseTime(st.start_time);
        const end = parseTime(st.completion_time) || Date.now();
        setText(this.v.dur, start === null ? '—' : fmtDuration((end - start) / 1000));
    }
}
