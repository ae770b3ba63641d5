/*
 * psflow dashboard: one page that reads the coordinator's public REST API (api/rest.md) and
 * follows its Server-Sent Events stream. Plain browser JavaScript modules, no framework and no
 * build step; the charts are uPlot, served by the coordinator from web/node_modules at
 * /vendor/uplot/. This module routes between the pages and starts everything.
 *
 * DESIGN
 * - Hash routing: "#/" lists the jobs (jobs_page.js), "#/jobs/NAME" shows one job
 *   (job_page.js), "#/compare?jobs=A,B" compares jobs (compare_page.js). A token given in the URL fragment ("#token=..."), or typed into the banner
 *   after a 401, is kept in sessionStorage and sent as "Authorization: Bearer" (api.js).
 * - One event stream for the whole page (stream.js). Every time it opens, the current page
 *   fetches a fresh snapshot over REST; events that arrive while the snapshot loads are queued
 *   and applied after it, and applying an event twice is harmless (rows are keyed, metric
 *   points by task and step). So a dropped stream or a restarted coordinator (whose event ids
 *   may start again) never leaves the page stale or doubled, and no reload is needed.
 * - Long runs stay fast: see job_metrics.js.
 *
 * Test hooks (tests/browser/dashboard.test.js reads them):
 *   document.body.dataset.connection  "live" | "reconnecting" | "stale"
 *   document.body.dataset.page        "jobs" | "job" | "compare"; dataset.loaded = "1" once its snapshot has
 *                                     been applied; dataset.loads counts snapshots (one more after
 *                                     each reconnect); dataset.phase is the job page's phase
 *   [data-testid=...]                 global-step, phase, loss-chart, task-table, placement-table,
 *                                     jobs-table, spec-errors, ...
 *   window.psflowStats = {points, lastDrawMs, loadMs, lastPointStep, lastPointDrawnAt}
 *     points            metric points (per task) that the loss chart holds
 *     loadMs            ms from opening the job page to the first chart draw with its data
 *                       (null until the job has metric points)
 *     lastDrawMs        duration of the latest loss-chart redraw (setData to uPlot's draw hook)
 *     lastPointStep     largest training step drawn on the loss chart
 *     lastPointDrawnAt  performance.now() when that step was first drawn
 */

import {ApiError, setToken, takeTokenFromHash} from './api.js';
import {ComparePage, parseCompareHash} from './compare_page.js';
import {JobPage} from './job_page.js';
import {JobsPage} from './jobs_page.js';
import {connectionState, onStream, setConnection, stream} from './stream.js';

let page = null;

/* Fetches a snapshot for page p and then applies the events queued meanwhile. A failed
 * snapshot is retried after 2 s while the stream is up, except after 401 and 404. */
function loadPage(p) {
    const gen = (p.loadGen = (p.loadGen || 0) + 1);
    p.loading = true;
    p.queue = [];
    p.load().then(() => {
        if (page !== p || gen !== p.loadGen) return;
        p.loading = false;
        p.loadedOnce = true;
        p.showError(null);
        const queued = p.queue;
        p.queue = [];
        for (const ev of queued) p.onEvent(ev);
        document.body.dataset.loaded = '1';
        document.body.dataset.loads = String(Number(document.body.dataset.loads || 0) + 1);
    }, (err) => {
        if (page !== p || gen !== p.loadGen) return;
        p.loading = false;
        const queued = p.queue;
        p.queue = [];
        if (p.loadedOnce) for (const ev of queued) p.onEvent(ev);
        p.showError(err);
        /* A coordinator that is still starting (503) or a dropped request: try again while
         * the stream is up; a reconnect reloads anyway. 401 and 404 wait for the user. */
        const status = err instanceof ApiError ? err.status : 0;
        if (status !== 401 && status !== 404) {
            setTimeout(() => {
                if (page === p && gen === p.loadGen && !p.loading && connectionState() !== 'reconnecting') loadPage(p);
            }, 2000);
        }
    });
}

/* Shows the page the URL fragment names, replacing the current one. */
function route() {
    const main = document.getElementById('main');
    if (page) page.destroy();
    page = null;
    delete document.body.dataset.loaded;
    const hash = location.hash.replace(/^#/, '');
    const m = /^\/jobs\/([^/?&]+)/.exec(hash);
    if (m) {
        page = new JobPage(decodeURIComponent(m[1]));
        document.title = page.name + ' · psflow';
    } else if (/^\/compare(?:[?/]|$)/.test(hash)) {
        page = new ComparePage(parseCompareHash(hash));
        document.title = 'Compare · psflow';
    } else {
        page = new JobsPage();
        document.title = 'Jobs · psflow';
    }
    document.body.dataset.page = page.kind;
    document.getElementById('nav-jobs').setAttribute('aria-current',
        page.kind === 'jobs' ? 'page' : 'false');
    document.getElementById('nav-compare').setAttribute('aria-current',
        page.kind === 'compare' ? 'page' : 'false');
    main.replaceChildren(page.root);
    page.mounted();
    if (connectionState() !== 'reconnecting' || stream.failures > 0) loadPage(page);
}

function setupTokenForm() {
    document.getElementById('token-form').addEventListener('submit', (ev) => {
        ev.preventDefault();
        setToken(document.getElementById('token-input').value.trim());
        document.getElementById('token-banner').hidden = true;
        stream.restart();
    });
}

onStream({
    open() {
        if (page) loadPage(page);
    },
    /* The stream failed before opening: the REST API may still answer, so show what it has. */
    failed() {
        if (page && !page.loadedOnce && !page.loading) loadPage(page);
    },
    event(ev) {
        if (!page) return;
        if (page.loading) page.queue.push(ev);
        else page.onEvent(ev);
    },
});

takeTokenFromHash();
setupTokenForm();
setConnection('reconnecting');
window.addEventListener('hashchange', () => {
    takeTokenFromHash();
    route();
    document.getElementById('main').focus({preventScroll: true});
    window.scrollTo(0, 0);
});
setInterval(() => stream.watchdog(), 1000);
route();
stream.start();
