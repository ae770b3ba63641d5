/*
 * The jobs page's "Submit a job" form: quick fields and the whole spec as JSON text, both
 * editing the same spec; POST /api/v1/jobs; a problem+json answer shown next to each field
 * it names and listed, pointer by pointer, under the spec text.
 */

import {ApiError, api} from './api.js';
import {h} from './dom.js';
import {getPointer, locatePointer, setPointer} from './json_pointer.js';
import {card} from './widgets.js';

/* The quick fields of the submit form: each edits one JSON pointer of the spec. */
const QUICK_FIELDS = [
    {pointer: '/name', label: 'Name', type: 'text'},
    {pointer: '/model/type', label: 'Model', type: 'select', options: ['linear', 'softmax', 'mlp']},
    {pointer: '/replicas/ps', label: 'ps replicas', type: 'number'},
    {pointer: '/replicas/worker', label: 'Workers', type: 'number'},
    {pointer: '/training/mode', label: 'Mode', type: 'select', options: ['sync', 'async']},
    {pointer: '/training/batch_size', label: 'Batch size', type: 'number'},
    {pointer: '/training/max_steps', label: 'Max steps', type: 'number'},
    {pointer: '/optimizer/type', label: 'Optimizer', type: 'select',
        options: ['sgd', 'momentum', 'adagrad', 'adam', 'lazy_adam']},
    {pointer: '/optimizer/learning_rate', label: 'Learning rate', type: 'number', step: 'any'},
];

const DEFAULT_SPEC = {
    name: 'linear',
    replicas: {ps: 1, worker: 2},
    model: {type: 'linear', inputs: 1},
    data: {format: 'synthetic_linear', w: 2, b: 10, noise: 0.1, n: 10000},
    optimizer: {type: 'sgd', learning_rate: 0.5},
    training: {mode: 'async', batch_size: 100, max_steps: 3000, seed: 1, eval_every_steps: 500},
};

/* An errors[] entry's message without a leading copy of its pointer ("/a/b: ..."), which
 * the page already shows beside it. */
function problemMessage(e) {
    const msg = String(e.message || 'invalid');
    const prefix = (e.pointer || '') + ': ';
    return e.pointer && msg.startsWith(prefix) ? msg.slice(prefix.length) : msg;
}

/* new SpecForm(onSubmitted): el is the form's card; onSubmitted(job) gets the created job. */
export class SpecForm {
    constructor(onSubmitted) {
        this.onSubmitted = onSubmitted;
        this.el = this.build();
    }

    build() {
        this.fieldEls = new Map();
        const grid = h('div', {class: 'field-grid'});
        for (const f of QUICK_FIELDS) {
            const id = 'f' + f.pointer.replace(/\//g, '-');
            let input;
            if (f.type === 'select') {
                input = h('select', {id, name: f.pointer}, h('option', {value: ''}, '(default)'),
                    f.options.map((o) => h('option', {value: o}, o)));
            } else {
                input = h('input', {id, name: f.pointer, type: f.type, step: f.step || null, autocomplete: 'off',
                    spellcheck: f.type === 'text' ? 'false' : null});
            }
            const msg = h('div', {class: 'field-error', id: id + '-error', role: 'alert',
                dataset: {testid: 'field-error', pointer: f.pointer}});
            input.setAttribute('aria-describedby', id + '-error');
            input.addEventListener('input', () => this.quickChanged(f, input));
            const wrap = h('div', {class: 'field', dataset: {pointer: f.pointer}},
                h('label', {for: id}, f.label), input, h('span', {class: 'pointer'}, f.pointer), msg);
            grid.append(wrap);
            this.fieldEls.set(f.pointer, {f, input, msg, wrap});
        }
        this.specText = h('textarea', {id: 'spec-text', rows: 18, spellcheck: 'false',
            autocomplete: 'off', 'aria-describedby': 'spec-errors', dataset: {testid: 'spec-text'}});
        this.specText.value = JSON.stringify(DEFAULT_SPEC, null, 2);
        this.specText.addEventListener('input', () => this.textChanged());
        this.errList = h('ul', {class: 'error-list', id: 'spec-errors', dataset: {testid: 'spec-errors'},
            hidden: true});
        this.submitMsg = h('p', {class: 'submit-msg', role: 'status', dataset: {testid: 'submit-result'}});
        this.submitBtn = h('button', {type: 'submit', class: 'btn btn-primary',
            dataset: {testid: 'submit-job'}}, 'Submit job');
        const form = h('form', {class: 'submit-form', novalidate: true, onsubmit: (e) => {
            e.preventDefault();
            this.submit();
        }},
        h('p', {class: 'muted'}, 'Edit the common fields, or paste a whole job spec (JSON, ',
            h('a', {href: '/openapi.yaml'}, 'schema'), '). Both edit the same spec.'),
        grid,
        h('div', {class: 'field field-wide'}, h('label', {for: 'spec-text'}, 'Job spec (JSON)'),
            this.specText),
        this.errList,
        h('div', {class: 'form-actions'}, this.submitBtn, this.submitMsg));
        this.textChanged();
        return card('Submit a job', {id: 'submit'}, form);
    }

    quickChanged(f, input) {
        let spec;
        try {
            spec = JSON.parse(this.specText.value);
        } catch (e) {
            this.showLocalError('The JSON below does not parse: ' + e.message);
            return;
        }
        let v = input.value;
        if (f.type === 'number') v = v === '' ? undefined : Number(v);
        else if (v === '') v = undefined;
        setPointer(spec, f.pointer, v);
        this.specText.value = JSON.stringify(spec, null, 2);
        this.clearFieldError(f.pointer);
    }

    textChanged() {
        let spec;
        try {
            spec = JSON.parse(this.specText.value);
        } catch (e) {
            return;
        }
        for (const {f, input} of this.fieldEls.values()) {
            if (document.activeElement === input) continue;
            const v = getPointer(spec, f.pointer);
            const s = v === undefined || v === null || typeof v === 'object' ? '' : String(v);
            if (input.value !== s) input.value = s;
        }
    }

    clearFieldError(ptr) {
        const fe = this.fieldEls.get(ptr);
        if (!fe) return;
        fe.msg.textContent = '';
        fe.input.removeAttribute('aria-invalid');
        fe.wrap.classList.remove('invalid');
    }

    clearErrors() {
        for (const ptr of this.fieldEls.keys()) this.clearFieldError(ptr);
        this.errList.replaceChildren();
        this.errList.hidden = true;
        this.specText.classList.remove('invalid');
        this.specText.removeAttribute('aria-invalid');
        this.submitMsg.className = 'submit-msg';
        this.submitMsg.textContent = '';
    }

    showLocalError(text) {
        this.submitMsg.className = 'submit-msg error';
        this.submitMsg.textContent = text;
    }

    /* Shows a problem+json: each errors[] entry next to its quick field when there is
     * one, and every entry in the list under the spec text with its pointer. */
    showProblem(err) {
        const p = err.problem || {};
        const errors = Array.isArray(p.errors) ? p.errors : [];
        this.showLocalError((p.title ? p.title + ' (' + err.status + ')' : 'Error ' + err.status) +
            (p.detail && !errors.length ? ': ' + p.detail : ''));
        if (!errors.length) return;
        this.specText.classList.add('invalid');
        this.specText.setAttribute('aria-invalid', 'true');
        this.errList.hidden = false;
        let firstField = null;
        for (const e of errors) {
            const ptr = e.pointer || '';
            const message = problemMessage(e);
            const fe = this.fieldEls.get(ptr);
            if (fe) {
                fe.msg.textContent = message;
                fe.input.setAttribute('aria-invalid', 'true');
                fe.wrap.classList.add('invalid');
                if (!firstField) firstField = fe.input;
            }
            const loc = h('button', {type: 'button', class: 'link-button pointer-link',
                title: 'Select this field in the spec', onclick: () => this.selectPointer(ptr)},
            h('code', null, ptr || '/'));
            this.errList.append(h('li', {dataset: {pointer: ptr}}, loc, ' ', message));
        }
        if (firstField) firstField.focus();
    }

    selectPointer(ptr) {
        const fe = this.fieldEls.get(ptr);
        const range = locatePointer(this.specText.value, ptr);
        if (range) {
            this.specText.focus();
            this.specText.setSelectionRange(range[0], range[1]);
        } else if (fe) {
            fe.input.focus();
        }
    }

    async submit() {
        this.clearErrors();
        let spec;
        try {
            spec = JSON.parse(this.specText.value);
        } catch (e) {
            this.specText.classList.add('invalid');
            this.showLocalError('The job spec is not valid JSON: ' + e.message);
            return;
        }
        this.submitBtn.disabled = true;
        try {
            const job = await api('/api/v1/jobs', {method: 'POST', body: spec});
            const name = job && job.name ? job.name : spec.name;
            this.submitMsg.className = 'submit-msg ok';
            this.submitMsg.replaceChildren('Submitted ',
                h('a', {href: '#/jobs/' + encodeURIComponent(name)}, name), '.');
            if (job && job.status) this.onSubmitted(job);
        } catch (e) {
            if (e instanceof ApiError) this.showProblem(e);
            else this.showLocalError('Could not submit: ' + e.message);
        } finally {
            this.submitBtn.disabled = false;
        }
    }
}
