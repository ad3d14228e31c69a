// Tables kept in step with a watch: one row per object, kept sorted; an event re-renders only
// its own row (a thousand pods stay cheap), and a list builds all rows in one fragment.

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

export function age(ts) {
  if (!ts) return '';
  const s = Math.max(0, Math.floor((Date.now() - Date.parse(ts)) / 1000));
  if (s < 120) return `${s}s`;
  if (s < 7200) return `${Math.floor(s / 60)}m`;
  if (s < 172800) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86400)}d`;
}

// An age that stays current: refreshAges() rewrites every one on the page.
export function ageCell(ts) {
  return h('span', { class: 'age', 'data-t': ts || '', title: ts || '' }, age(ts));
}

export function refreshAges(root) {
  for (const el of root.querySelectorAll('.age')) el.textContent = age(el.dataset.t);
}

export const keyOf = (o) => `${o.metadata.namespace || ''}/${o.metadata.name}`;
export const byKey = (a, b) => (keyOf(a) < keyOf(b) ? -1 : keyOf(a) > keyOf(b) ? 1 : 0);

export class LiveTable {
  // columns: [{ title, value(obj) -> string | Node, cls }]
  constructor(columns, { compare = byKey, rowClass, empty = 'Nothing here yet.' } = {}) {
    this.columns = columns;
    this.compare = compare;
    this.rowClass = rowClass;
    this.rows = new Map(); // key -> { obj, tr }
    this.order = []; // entries, sorted by compare
    this.filterText = '';
    this.tbody = h('tbody');
    this.empty = h('p', { class: 'empty' }, empty);
    this.el = h('div', { class: 'table' },
      h('table', {}, h('thead', {}, h('tr', {}, columns.map((c) => h('th', { class: c.cls }, c.title)))), this.tbody),
      this.empty);
  }

  get size() { return this.rows.size; }

  render(obj) {
    const tr = h('tr', { class: this.rowClass && this.rowClass(obj), 'data-key': keyOf(obj) });
    for (const c of this.columns) {
      const v = c.value(obj);
      tr.append(h('td', { class: c.cls, 'data-label': c.title }, v === undefined || v === null ? '' : v));
    }
    this.applyFilter(tr, keyOf(obj));
    return tr;
  }

  applyFilter(tr, key) {
    tr.hidden = this.filterText !== '' && !key.includes(this.filterText);
  }

  reset(items) {
    this.rows.clear();
    this.order = items.slice().sort(this.compare).map((obj) => ({ obj, tr: this.render(obj) }));
    for (const e of this.order) this.rows.set(keyOf(e.obj), e);
    const frag = document.createDocumentFragment();
    for (const e of this.order) frag.append(e.tr);
    this.tbody.replaceChildren(frag);
    this.empty.hidden = this.rows.size > 0;
  }

  position(obj) {
    let lo = 0;
    let hi = this.order.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.compare(this.order[mid].obj, obj) < 0) lo = mid + 1; else hi = mid;
    }
    return lo;
  }

  upsert(obj) {
    const key = keyOf(obj);
    const old = this.rows.get(key);
    if (old && this.compare(old.obj, obj) === 0) {
      const tr = this.render(obj);
      old.tr.replaceWith(tr);
      old.tr = tr;
      old.obj = obj;
      return;
    }
    if (old) this.remove(old.obj);
    const e = { obj, tr: this.render(obj) };
    const i = this.position(obj);
    const next = this.order[i];
    this.order.splice(i, 0, e);
    this.rows.set(key, e);
    this.tbody.insertBefore(e.tr, next ? next.tr : null);
    this.empty.hidden = true;
  }

  remove(obj) {
    const key = keyOf(obj);
    const e = this.rows.get(key);
    if (!e) return;
    this.rows.delete(key);
    this.order.splice(this.order.indexOf(e), 1);
    e.tr.remove();
    this.empty.hidden = this.rows.size > 0;
  }

  // Applies one watch event.
  apply(type, obj) {
    if (type === 'DELETED') this.remove(obj); else this.upsert(obj);
  }

  // Re-renders the rows `pick` selects (something they show changed elsewhere).
  refresh(pick) {
    for (const e of this.order) {
      if (!pick(e.obj)) continue;
      const tr = this.render(e.obj);
      e.tr.replaceWith(tr);
      e.tr = tr;
    }
  }

  filter(text) {
    this.filterText = text;
    for (const [key, e] of this.rows) this.applyFilter(e.tr, key);
  }
}
