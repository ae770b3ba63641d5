/*
 * The job page's serving view (status.serving of a job with a `serving` section): one row per
 * serving task with its state, the endpoint it answers at, the version (checkpoint step) it
 * serves, predict requests a second, the p50 and p99 latency over its last 10 s, the requests
 * it answered (and of those with an error) and the agent that runs it. Hidden for a job
 * without the section.
 */

import {KeyedRows, h, setText} from './dom.js';
import {fmtInt, fmtNum, fmtRate, isNum} from './format.js';
import {card, stateBadge} from './widgets.js';

function ms(v) {
    return isNum(v) ? fmtNum(v, 3) + ' ms' : '—';
}

/* new ServingView(): el is its card; render(job) shows the job's serving tasks. */
export class ServingView {
    constructor() {
        const body = h('tbody');
        this.table = h('table', {class: 'table', dataset: {testid: 'serving-table'}},
            h('thead', null, h('tr', null, ['Server', 'State', 'Endpoint', 'Version', 'Requests/s',
                'p50', 'p99', 'Requests', 'Agent'].map((t, i) =>
                h('th', {scope: 'col', class: i >= 3 && i <= 7 ? 'num' : null}, t)))),
            body);
        this.rows = new KeyedRows(body, (row, s, fresh) => this.renderRow(row, s, fresh));
        this.el = card('Serving', {id: 'serving', class: 'span-2'},
            h('div', {class: 'table-wrap'}, this.table));
        this.el.hidden = true;
    }

    renderRow(row, s, fresh) {
        if (fresh) {
            row.dataset.serve = s.index;
            const num = (testid) => h('td', {class: 'num', dataset: testid ? {testid} : {}});
            row.append(h('th', {scope: 'row'}), h('td'), h('td', {class: 'mono'}),
                num('serving-version'), num('serving-rate'), num('serving-p50'), num('serving-p99'),
                num(null), h('td', {class: 'mono'}));
        }
        const c = row.children;
        setText(c[0], 'serve ' + s.index);
        if (c[1].dataset.state !== s.state) {
            c[1].dataset.state = s.state;
            c[1].replaceChildren(stateBadge(s.state));
        }
        c[1].title = s.message || '';
        const ep = s.endpoint || '';
        if (c[2].dataset.endpoint !== ep) {
            c[2].dataset.endpoint = ep;
            c[2].replaceChildren(ep ? h('a', {href: ep, target: '_blank', rel: 'noopener'}, ep) : '—');
        }
        const cells = [isNum(s.version) ? fmtInt(s.version) : '—',
            s.state === 'Running' ? fmtRate(s.requests_per_sec) : '—',
            ms(s.latency_p50_ms), ms(s.latency_p99_ms),
            fmtInt(s.requests) + (s.failed ? ' (' + fmtInt(s.failed) + ' failed)' : ''),
            s.node || '—'];
        cells.forEach((text, i) => setText(c[3 + i], text));
    }

    render(job) {
        const serving = ((job || {}).status || {}).serving;
        this.el.hidden = !Array.isArray(serving) || serving.length === 0;
        this.rows.update(Array.isArray(serving) ? serving : [], (s) => String(s.index));
    }
}
