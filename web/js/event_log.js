/*
 * The job page's event log: the job's events (GET /jobs/NAME/events, then "log" events),
 * newest first. An event seen twice (a snapshot after a reconnect) is kept once; the log
 * keeps the latest 1000 and shows the latest 300.
 */

import {h} from './dom.js';
import {card, timeEl} from './widgets.js';

const KEEP = 1000;
const SHOW = 300;

function eventKey(e) {
    return [e.time, e.type, e.reason, e.message].join('\u0000');
}

/* new EventLog(): el is its card. */
export class EventLog {
    constructor() {
        this.log = [];
        this.keys = new Set();
        this.list = h('ol', {class: 'log', dataset: {testid: 'event-log'}, 'aria-live': 'off'});
        this.empty = h('p', {class: 'empty'}, 'No events yet.');
        this.el = card('Event log', {id: 'log', class: 'span-1'}, this.list, this.empty);
    }

    /* Replaces the log with a GET /events answer's items. */
    setAll(items) {
        this.log = [];
        this.keys = new Set();
        for (const e of items) this.add(e);
    }

    add(e) {
        const key = eventKey(e);
        if (this.keys.has(key)) return;
        this.keys.add(key);
        this.log.push(e);
        if (this.log.length > KEEP) this.keys.delete(eventKey(this.log.shift()));
    }

    render() {
        const items = this.log.slice(-SHOW).reverse();
        this.empty.hidden = items.length > 0;
        this.list.replaceChildren(...items.map((e) => h('li', {class: 'log-' + String(e.type || '').toLowerCase()},
            timeEl(e.time), ' ', h('span', {class: 'log-type'}, e.type || ''), ' ',
            e.reason ? h('span', {class: 'log-reason'}, e.reason) : null, ' ',
            h('span', {class: 'log-message'}, e.message || ''))));
    }
}
