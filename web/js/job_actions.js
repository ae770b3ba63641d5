/*
 * The job page's actions: scale the workers, suspend or resume, cancel (PATCH and POST
 * /cancel on /api/v1/jobs/NAME). Hidden once the job has finished.
 */

import {api, jobPath} from './api.js';
import {h, setText} from './dom.js';
import {isNum} from './format.js';
import {TERMINAL} from './widgets.js';

/*
 * new JobActions(name, host): el holds the controls. host gives phase() (the job's phase
 * now), applyJob(job) (the job an action answered with) and err (the page's errorBox).
 */
export class JobActions {
    constructor(name, host) {
        this.name = name;
        this.host = host;
        this.suspendBtn = h('button', {type: 'button', class: 'btn', onclick: () => this.toggleSuspend()},
            'Suspend');
        this.cancelBtn = h('button', {type: 'button', class: 'btn btn-danger',
            onclick: () => this.cancel()}, 'Cancel job');
        this.scaleInput = h('input', {type: 'number', min: 1, id: 'scale-workers', class: 'input-small',
            'aria-label': 'Worker replicas'});
        this.scaleForm = h('form', {class: 'inline-form', onsubmit: (e) => {
            e.preventDefault();
            this.scale();
        }}, h('label', {for: 'scale-workers'}, 'Workers'), this.scaleInput,
        h('button', {type: 'submit', class: 'btn'}, 'Scale'));
        this.el = h('div', {class: 'job-actions'}, this.scaleForm, this.suspendBtn, this.cancelBtn);
    }

    /* Shows the actions that apply in phase; workers is the spec's worker replicas. */
    render(phase, workers) {
        const terminal = TERMINAL.has(phase);
        this.cancelBtn.hidden = terminal;
        this.suspendBtn.hidden = terminal;
        this.scaleForm.hidden = terminal;
        setText(this.suspendBtn, phase === 'Suspended' ? 'Resume' : 'Suspend');
        if (document.activeElement !== this.scaleInput && isNum(workers)) {
            this.scaleInput.value = workers;
        }
    }

    async toggleSuspend() {
        const phase = this.host.phase();
        await this.act(phase === 'Suspended' ? 'Could not resume' : 'Could not suspend',
            () => api(jobPath(this.name), {method: 'PATCH', body: {suspend: phase !== 'Suspended'}}));
    }

    async cancel() {
        if (!window.confirm('Cancel job ' + this.name + '? Its tasks are stopped; checkpoints are kept.')) return;
        await this.act('Could not cancel', () => api(jobPath(this.name, '/cancel'), {method: 'POST'}));
    }

    async scale() {
        const n = Number(this.scaleInput.value);
        if (!Number.isInteger(n) || n < 1) {
            this.host.err.show(new Error('worker replicas must be a whole number of at least 1'), 'Cannot scale');
            return;
        }
        await this.act('Could not scale', () => api(jobPath(this.name), {method: 'PATCH', body: {replicas: {worker: n}}}));
    }

    async act(what, fn) {
        for (const b of [this.suspendBtn, this.cancelBtn]) b.disabled = true;
        try {
            const job = await fn();
            if (job && job.status) this.host.applyJob(job);
            this.host.err.show(null);
        } catch (e) {
            this.host.err.show(e, what);
        } finally {
            for (const b of [this.suspendBtn, this.cancelBtn]) b.disabled = false;
        }
    }
}
