/*
 * The coordinator's REST API (api/rest.md): fetch with the bearer token, JSON bodies, and
 * errors as ApiError carrying the problem+json body.
 *
 * The token comes from the URL fragment ("#token=...") or from the banner shown after a
 * 401; it is kept in sessionStorage and sent as "Authorization: Bearer".
 */

const TOKEN_KEY = 'psflow.token';

let token = sessionStorage.getItem(TOKEN_KEY) || '';

/* A failed request: status is the HTTP status, problem the problem+json body (or null). */
export class ApiError extends Error {
    constructor(status, problem, message) {
        super(message);
        this.status = status;
        this.problem = problem;
    }
}

/* Headers with the bearer token added, when there is one. */
export function authHeaders(extra) {
    const hd = Object.assign({}, extra || {});
    if (token) hd.Authorization = 'Bearer ' + token;
    return hd;
}

export function setToken(value) {
    token = value;
    sessionStorage.setItem(TOKEN_KEY, token);
}

/* Moves a "token=..." out of the URL fragment into the session, leaving the route. */
export function takeTokenFromHash() {
    const m = /(?:^#|[#&?])token=([^&]*)/.exec(location.hash);
    if (!m) return;
    setToken(decodeURIComponent(m[1]));
    const rest = location.hash.replace(/[#&?]?token=[^&]*/, '').replace(/^#?&?/, '');
    history.replaceState(null, '', location.pathname + location.search + '#' +
        (rest.startsWith('/') ? rest : '/'));
}

/* Asks for a token: the coordinator answered 401. */
export function showTokenBanner() {
    const banner = document.getElementById('token-banner');
    if (!banner.hidden) return;
    banner.hidden = false;
    document.getElementById('token-input').focus();
}

/* api(path, {method, body}): the parsed JSON answer (null for 204), or throws ApiError. */
export async function api(path, opts) {
    const o = opts || {};
    const init = {method: o.method || 'GET', headers: authHeaders({Accept: 'application/json'}),
        cache: 'no-store'};
    if (o.body !== undefined) {
        init.headers['Content-Type'] = 'application/json';
        init.body = typeof o.body === 'string' ? o.body : JSON.stringify(o.body);
    }
    const res = await fetch(path, init);
    if (res.status === 401) showTokenBanner();
    if (res.status === 204) return null;
    const type = res.headers.get('Content-Type') || '';
    let body = null;
    if (type.includes('json')) {
        try {
            body = await res.json();
        } catch (e) {
            body = null;
        }
    } else {
        body = await res.text();
    }
    if (!res.ok) {
        const problem = body && typeof body === 'object' ? body : null;
        const msg = problem ? (problem.detail || problem.title) : res.status + ' ' + res.statusText;
        throw new ApiError(res.status, problem, msg || 'HTTP ' + res.status);
    }
    return body;
}

/* Every item of a paginated list (GET /api/v1/jobs): follows metadata.continue page after
 * page and returns the items of all pages in order. */
export async function listAll(path, pageSize) {
    const items = [];
    let next = '';
    for (;;) {
        const sep = path.includes('?') ? '&' : '?';
        const page = await api(path + sep + 'limit=' + (pageSize || 500) +
            (next ? '&continue=' + encodeURIComponent(next) : ''));
        const got = (page && page.items) || [];
        items.push(...got);
        next = page && page.metadata && page.metadata.continue;
        if (!next || got.length === 0) return items;
    }
}

export function jobPath(name, rest) {
    return '/api/v1/jobs/' + encodeURIComponent(name) + (rest || '');
}
