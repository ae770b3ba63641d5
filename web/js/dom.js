/*
 * Building and updating DOM elements: the h() element helper, text updates that leave an
 * unchanged node alone, and keyed table rows that are updated in place.
 */

function appendChildren(el, children) {
    for (const c of children) {
        if (c === null || c === undefined || c === false) continue;
        if (Array.isArray(c)) appendChildren(el, c);
        else el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
}

/* h('div', {class: 'x', onclick: fn}, child, ...): builds an element. Children may be
 * strings, nodes, arrays or null. */
export function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    if (attrs) {
        for (const [k, v] of Object.entries(attrs)) {
            if (v === null || v === undefined || v === false) continue;
            if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
            else if (k === 'class') el.className = v;
            else if (k === 'dataset') Object.assign(el.dataset, v);
            else if (k === 'text') el.textContent = v;
            else el.setAttribute(k, v === true ? '' : String(v));
        }
    }
    appendChildren(el, children);
    return el;
}

/* Sets text only when it changed, so that live updates do not disturb selection. */
export function setText(el, text) {
    const s = String(text);
    if (el.textContent !== s) el.textContent = s;
}

/* Keyed table body: rows are created once per key and updated in place, so focus, hover
 * and selection survive live updates. render(row, item, fresh) fills the row; rows are <tr>
 * unless `tag` names another element (a list of <div> rows). */
export class KeyedRows {
    constructor(tbody, render, tag = 'tr') {
        this.tbody = tbody;
        this.render = render;
        this.tag = tag;
        this.rows = new Map();
    }
    update(items, keyOf) {
        const seen = new Set();
        let prev = null;
        for (const item of items) {
            const key = keyOf(item);
            seen.add(key);
            let row = this.rows.get(key);
            const fresh = !row;
            if (fresh) {
                row = h(this.tag, {dataset: {key}});
                this.rows.set(key, row);
            }
            this.render(row, item, fresh);
            const want = prev ? prev.nextSibling : this.tbody.firstChild;
            if (want !== row) this.tbody.insertBefore(row, want);
            prev = row;
        }
        for (const [key, row] of this.rows) {
            if (!seen.has(key)) {
                row.remove();
                this.rows.delete(key);
            }
        }
    }
}

/* Fills a row's cells, creating them on first use; cells[i] is a string or a node. */
export function fillRow(row, cells) {
    while (row.children.length < cells.length) row.append(h('td'));
    cells.forEach((c, i) => {
        const td = row.children[i];
        if (c instanceof Node) {
            if (td.firstChild !== c || td.childNodes.length !== 1) td.replaceChildren(c);
        } else {
            setText(td, c === null || c === undefined ? '—' : c);
        }
    });
}
