/*
 * The coordinator's Server-Sent Events stream (GET /api/v1/events), one for the whole page,
 * and the live / stale / reconnecting indicator in the top bar.
 *
 * The stream is read with fetch() rather than EventSource: EventSource hides comment lines, so
 * the ": keepalive" the coordinator sends every 10 s could not keep the indicator "live" on an
 * idle cluster, and fetch() sends the Authorization header like every other request.
 * Indicator: "live" while the stream is open and bytes (events or keepalives) arrived in the
 * last 30 s, "stale" when it is open but silent for longer, "reconnecting" while it is closed
 * and being retried (backoff 0.5 s doubling to 4 s). After 60 s of silence the stream is
 * dropped and reopened.
 *
 * What the stream reports goes to the handlers given to onStream(): open() each time it opens,
 * failed() when an attempt fails before opening, event({type, data, id}) for each event whose
 * data is JSON.
 */

import {authHeaders, showTokenBanner} from './api.js';
import {setText} from './dom.js';

const STALE_MS = 30000;
const DROP_MS = 60000;

const handlers = {open() {}, failed() {}, event() {}};

export function onStream(h) {
    Object.assign(handlers, h);
}

let connection = 'reconnecting';

/* "live" | "stale" | "reconnecting" */
export function connectionState() {
    return connection;
}

export const stream = {
    state: 'reconnecting',
    everOpened: false,
    failures: 0,
    lastActivity: 0,
    controller: null,
    retryTimer: null,
    gen: 0,

    start() {
        const gen = ++this.gen;
        clearTimeout(this.retryTimer);
        this.retryTimer = null;
        this.run(gen);
    },

    restart() {
        if (this.controller) this.controller.abort();
        this.start();
    },

    async run(gen) {
        const controller = new AbortController();
        this.controller = controller;
        let opened = false;
        try {
            const res = await fetch('/api/v1/events', {
                headers: authHeaders({Accept: 'text/event-stream'}),
                cache: 'no-store', signal: controller.signal,
            });
            if (res.status === 401) showTokenBanner();
            if (!res.ok || !res.body) throw new Error('events: HTTP ' + res.status);
            if (gen !== this.gen) return;
            opened = true;
            this.failures = 0;
            this.everOpened = true;
            this.lastActivity = performance.now();
            setConnection('live');
            handlers.open();
            await this.read(res.body.getReader(), gen);
        } catch (e) {
            /* A network error or an abort: both end in the retry below unless the abort
             * came from restart(), which already started a newer run. */
        }
        if (gen !== this.gen) return;
        this.failures++;
        setConnection('reconnecting');
        if (!opened) handlers.failed();
        const delay = Math.min(4000, 500 * Math.pow(2, Math.min(this.failures - 1, 3)));
        this.retryTimer = setTimeout(() => {
            if (gen === this.gen) this.start();
        }, delay);
    },

    async read(reader, gen) {
        const decoder = new TextDecoder();
        let buf = '';
        let ev = {type: 'message', data: [], id: null};
        for (;;) {
            const {value, done} = await reader.read();
            if (done || gen !== this.gen) return;
            this.lastActivity = performance.now();
            if (connection !== 'live') setConnection('live');
            buf += decoder.decode(value, {stream: true});
            let nl;
            while ((nl = buf.search(/\r\n|\r|\n/)) >= 0) {
                const line = buf.slice(0, nl);
                const skip = buf[nl] === '\r' && buf[nl + 1] === '\n' ? 2 : 1;
                /* A lone \r at the end of the buffer may be the first half of \r\n. */
                if (buf[nl] === '\r' && nl + 1 === buf.length) break;
                buf = buf.slice(nl + skip);
                if (line === '') {
                    if (ev.data.length) deliverEvent(ev.type, ev.data.join('\n'), ev.id);
                    ev = {type: 'message', data: [], id: null};
                    continue;
                }
                if (line[0] === ':') continue;
                const colon = line.indexOf(':');
                const field = colon < 0 ? line : line.slice(0, colon);
                let val = colon < 0 ? '' : line.slice(colon + 1);
                if (val[0] === ' ') val = val.slice(1);
                if (field === 'event') ev.type = val;
                else if (field === 'data') ev.data.push(val);
                else if (field === 'id') ev.id = val;
            }
        }
    },

    /* Called every second: marks a silent stream stale, drops one silent for too long. */
    watchdog() {
        if (this.state === 'reconnecting' || !this.everOpened) return;
        const idle = performance.now() - this.lastActivity;
        if (idle > DROP_MS && this.controller) this.controller.abort();
        else if (idle > STALE_MS && connection === 'live') setConnection('stale');
    },
};

/* Shows the stream's state in the top bar and on document.body.dataset.connection. */
export function setConnection(state) {
    connection = state;
    stream.state = state;
    document.body.dataset.connection = state;
    const el = document.getElementById('connection');
    const label = state === 'live' ? 'Live' :
        state === 'stale' ? 'Stale — no events for 30 s' :
            stream.everOpened ? 'Reconnecting…' : 'Connecting…';
    setText(el.querySelector('.connection-label'), label);
    el.title = state === 'live' ? 'Event stream open' :
        state === 'stale' ? 'Event stream open but silent' : 'Event stream closed, retrying';
}

function deliverEvent(type, data, id) {
    let obj;
    try {
        obj = JSON.parse(data);
    } catch (e) {
        return;
    }
    handlers.event({type, data: obj, id});
}
