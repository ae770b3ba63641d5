/*
 * Small pieces both pages use: phase and state badges, a <time> element, a card, an error
 * box that explains a failed request.
 */

import {ApiError} from './api.js';
import {h} from './dom.js';
import {fmtClock, parseTime} from './format.js';

/* The phases after which a job changes no more. */
export const TERMINAL = new Set(['Succeeded', 'Failed']);

export function phaseBadge(phase) {
    const p = phase || 'Unknown';
    return h('span', {class: 'badge phase-' + p.toLowerCase(), dataset: {testid: 'phase'}}, p);
}

export function stateBadge(state) {
    const s = state || 'Unknown';
    return h('span', {class: 'badge state-' + s.toLowerCase()}, s);
}

export function timeEl(iso) {
    const ms = parseTime(iso);
    return h('time', {datetime: iso || null, title: iso || null}, fmtClock(ms));
}

/* card(title, {id, class, extra}, ...body): a titled section; extra sits beside the title. */
export function card(title, opts, ...body) {
    const o = opts || {};
    return h('section', {class: 'card ' + (o.class || ''), 'aria-labelledby': o.id + '-title',
        id: o.id}, h('div', {class: 'card-head'}, h('h2', {id: o.id + '-title'}, title),
        o.extra || null), ...body);
}

/* {el, show(err, what)}: an alert saying what could not be done and why; show(null) hides it. */
export function errorBox() {
    const el = h('div', {class: 'alert', role: 'alert', hidden: true});
    return {
        el,
        show(err, what) {
            if (!err) {
                el.hidden = true;
                return;
            }
            el.hidden = false;
            el.textContent = err instanceof ApiError && err.status === 401 ?
                'The coordinator needs an access token (see the banner above).' :
                (what || 'Could not load') + ': ' + (err.message || err);
        },
    };
}
