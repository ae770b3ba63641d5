/*
 * JSON pointers (RFC 6901) on a parsed job spec, and where a pointer's key sits in the
 * spec's pretty-printed text.
 */

function pointerTokens(ptr) {
    if (!ptr || ptr === '/') return [];
    return ptr.replace(/^\//, '').split('/').map((t) => t.replace(/~1/g, '/').replace(/~0/g, '~'));
}

export function getPointer(obj, ptr) {
    let cur = obj;
    for (const t of pointerTokens(ptr)) {
        if (cur === null || typeof cur !== 'object') return undefined;
        cur = cur[t];
    }
    return cur;
}

/* Sets the value at ptr, creating the objects on the way; undefined deletes the key. */
export function setPointer(obj, ptr, value) {
    const toks = pointerTokens(ptr);
    let cur = obj;
    for (let i = 0; i < toks.length - 1; i++) {
        if (cur[toks[i]] === null || typeof cur[toks[i]] !== 'object') cur[toks[i]] = {};
        cur = cur[toks[i]];
    }
    const last = toks[toks.length - 1];
    if (value === undefined) {
        delete cur[last];
    } else {
        cur[last] = value;
    }
}

/* Where a pointer's key sits in pretty-printed JSON text: the last token's key, searched
 * after each parent key in turn. Good enough to select the offending line. */
export function locatePointer(text, ptr) {
    let pos = 0;
    let found = null;
    for (const t of pointerTokens(ptr)) {
        const i = /^\d+$/.test(t) ? -1 : text.indexOf(JSON.stringify(t), pos);
        if (i < 0) break;
        found = [i, i + JSON.stringify(t).length];
        pos = found[1];
    }
    if (!found) return null;
    const lineEnd = text.indexOf('\n', found[0]);
    return [found[0], lineEnd < 0 ? text.length : lineEnd];
}
