// The dashboard's views. Each mounts itself into `root` and returns a function that stops
// its watches and streams when the user goes elsewhere.

import { get, patch, request, stream, watch, ApiError } from './api.js';
import { LiveTable, h, ageCell, keyOf } from './table.js';

const enc = encodeURIComponent;

// ---- small helpers ----

function cond(o, type) {
  return ((o.status && o.status.conditions) || []).find((c) => c.type === type);
}

function badge(text, kind) {
  return h('span', { class: `badge ${kind || ''}` }, text);
}

// A button that runs an async action, showing its failure as the API's message.
function action(ui, label, run, attrs) {
  const b = h('button', { type: 'button', ...attrs }, label);
  b.addEventListener('click', async () => {
    b.disabled = true;
    try { await run(); } catch (e) { ui.error(e); } finally { b.disabled = false; }
  });
  return b;
}

// A modal <dialog>: resolves to the form's values, or null when cancelled.
function ask(title, fields) {
  return new Promise((resolve) => {
    const inputs = fields.map((f) => h('input', { name: f.name, type: f.type || 'text', value: f.value ?? '', min: f.min, required: true }));
    const form = h('form', { method: 'dialog' },
      h('h3', {}, title),
      fields.map((f, i) => h('label', {}, f.label, inputs[i])),
      h('menu', {}, h('button', { value: 'cancel', type: 'button', class: 'cancel' }, 'Cancel'), h('button', { value: 'ok', class: 'primary' }, 'OK')));
    const dlg = h('dialog', { class: 'ask' }, form);
    form.querySelector('.cancel').addEventListener('click', () => dlg.close('cancel'));
    dlg.addEventListener('close', () => {
      dlg.remove();
      if (dlg.returnValue !== 'ok') { resolve(null); return; }
      resolve(Object.fromEntries(inputs.map((i) => [i.name, i.value])));
    });
    document.body.append(dlg);
    dlg.showModal();
    if (inputs[0]) inputs[0].select();
  });
}

const confirmAction = (title) => ask(title, []).then((v) => v !== null);

function watchInto(ui, table, path, extra = {}) {
  return watch(path, {
    reset: (items) => { table.reset(items); extra.reset && extra.reset(items); },
    event: (type, o) => { table.apply(type, o); extra.event && extra.event(type, o); },
    error: extra.error || ((e) => ui.error(e)),
    recovered: () => ui.recovered(),
  });
}

// A namespaced collection: in `ns`, or across every namespace when `ns` is ''.
export const collection = (base, plural, ns) => (ns ? `${base}/namespaces/${enc(ns)}/${plural}` : `${base}/${plural}`);

// Lists and watches `plural` in the chosen namespace `ns`. When that is every namespace and
// the user may not list them all (403), this falls back to the user's own namespace (a
// ServiceAccount's, or the one last chosen in the picker) and says so, rather than leaving a
// bare 403; with no namespace to fall back to, it asks for one.
function scopedWatch(ui, ns, base, plural, handlers) {
  let stop = () => {};
  let stopped = false;
  const start = (where) => {
    stop = watch(collection(base, plural, where), {
      ...handlers,
      error: (e) => {
        if (where === '' && e instanceof ApiError && e.code === 403) {
          stop();
          ui.ownNamespace().then((own) => {
            if (stopped) return;
            ui.narrowed(plural, own, e);
            if (own) start(own);
          });
          return;
        }
        (handlers.error || ((x) => ui.error(x)))(e);
      },
    });
  };
  start(ns);
  return () => { stopped = true; stop(); };
}

// scopedWatch into a LiveTable.
function watchScoped(ui, table, ns, base, plural, extra = {}) {
  return scopedWatch(ui, ns, base, plural, {
    reset: (items) => { table.reset(items); extra.reset && extra.reset(items); },
    event: (type, o) => { table.apply(type, o); extra.event && extra.event(type, o); },
    error: extra.error,
    recovered: () => ui.recovered(),
  });
}

function filterBox(table, placeholder = 'Filter by namespace/name') {
  const input = h('input', { type: 'search', placeholder, class: 'filter', 'aria-label': placeholder });
  input.addEventListener('input', () => table.filter(input.value.trim()));
  return input;
}

function section(title, ...children) {
  return h('section', {}, h('h2', {}, title), ...children);
}

// Quantities: "250m", "2", "1500n", "512Mi", "1G" as numbers of base units.
const SUFFIX = { n: 1e-9, u: 1e-6, m: 1e-3, '': 1, k: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, E: 1e18, Ki: 1024, Mi: 1024 ** 2, Gi: 1024 ** 3, Ti: 1024 ** 4, Pi: 1024 ** 5, Ei: 1024 ** 6 };
export function quantity(q) {
  if (q === undefined || q === null) return NaN;
  const m = /^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$/.exec(String(q).trim());
  if (!m || !(m[2] in SUFFIX)) return NaN;
  return parseFloat(m[1]) * SUFFIX[m[2]];
}

function cores(n) { return n < 10 ? n.toFixed(2).replace(/\.?0+$/, '') || '0' : n.toFixed(0); }
function bytes(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return `${n < 10 && i > 0 ? n.toFixed(1) : Math.round(n)} ${units[i]}`;
}

function use(used, capacity, fmt) {
  const cap = quantity(capacity);
  if (Number.isNaN(cap)) return '';
  if (used === undefined) return fmt(cap);
  const u = quantity(used);
  const pct = cap > 0 ? Math.round((100 * u) / cap) : 0;
  return h('span', { class: 'use' }, h('meter', { min: 0, max: 100, value: pct, high: 85, optimum: 0 }), ` ${fmt(u)} / ${fmt(cap)}`);
}

// ---- nodes ----

export function nodesView(root, ui) {
  const podNode = new Map(); // pod key -> node it counts on
  const perNode = new Map(); // node -> non-terminated pods
  let metrics = new Map(); // node -> usage
  const table = new LiveTable([
    { title: 'Name', value: (n) => n.metadata.name },
    {
      title: 'Status',
      value: (n) => {
        const r = cond(n, 'Ready');
        const ready = r && r.status === 'True';
        return h('span', {}, badge(ready ? 'Ready' : 'NotReady', ready ? 'ok' : 'bad'),
          n.spec.unschedulable ? badge('SchedulingDisabled', 'warn') : '');
      },
    },
    { title: 'Heartbeat', value: (n) => ageCell(cond(n, 'Ready') && cond(n, 'Ready').lastHeartbeatTime), cls: 'opt' },
    { title: 'CPU (cores)', value: (n) => use(metrics.get(n.metadata.name) && metrics.get(n.metadata.name).cpu, (n.status.capacity || {}).cpu, cores) },
    { title: 'Memory', value: (n) => use(metrics.get(n.metadata.name) && metrics.get(n.metadata.name).memory, (n.status.capacity || {}).memory, bytes) },
    { title: 'Pods', value: (n) => `${perNode.get(n.metadata.name) || 0} / ${(n.status.capacity || {}).pods || '?'}` },
    { title: 'Taints', value: (n) => (n.spec.taints || []).map((t) => `${t.key}${t.value ? `=${t.value}` : ''}:${t.effect}`).join(', '), cls: 'opt' },
    {
      title: '',
      value: (n) => action(ui, n.spec.unschedulable ? 'Uncordon' : 'Cordon',
        () => patch(`/api/v1/nodes/${enc(n.metadata.name)}`, { spec: { unschedulable: n.spec.unschedulable ? null : true } }),
        { class: 'cordon' }),
    },
  ], { empty: 'No nodes.' });

  const count = (pod, sign) => {
    const k = keyOf(pod);
    const node = pod.spec.nodeName;
    const counted = podNode.get(k);
    const live = node && !['Succeeded', 'Failed'].includes(pod.status && pod.status.phase) && sign > 0;
    const changed = [];
    if (counted && (!live || counted !== node)) {
      perNode.set(counted, (perNode.get(counted) || 1) - 1);
      podNode.delete(k);
      changed.push(counted);
    }
    if (live && counted !== node) {
      perNode.set(node, (perNode.get(node) || 0) + 1);
      podNode.set(k, node);
      changed.push(node);
    }
    return changed;
  };

  const loadMetrics = async () => {
    try {
      const list = await get('/apis/metrics.k8s.io/v1beta1/nodes');
      metrics = new Map(list.items.map((m) => [m.metadata.name, m.usage]));
      table.refresh(() => true);
    } catch (e) {
      if (!(e instanceof ApiError) || e.code === 401) throw e;
      metrics = new Map(); // no metrics API: capacity only
    }
  };

  root.append(section('Nodes',
    h('div', { class: 'bar' }, action(ui, 'Refresh usage', loadMetrics)),
    table.el));
  // Pods are counted across every namespace; a user who may not list them all sees the
  // nodes without their counts (the nodes' own refusal, if any, is the message to show).
  const stopPods = watch('/api/v1/pods', {
    reset: (pods) => {
      podNode.clear();
      perNode.clear();
      for (const p of pods) count(p, 1);
      table.refresh(() => true);
    },
    event: (type, p) => {
      const changed = count(p, type === 'DELETED' ? -1 : 1);
      if (changed.length) table.refresh((n) => changed.includes(n.metadata.name));
    },
    error: (e) => { if (e instanceof ApiError && e.code === 403) stopPods(); else ui.error(e); },
  });
  const stopNodes = watchInto(ui, table, '/api/v1/nodes');
  loadMetrics().catch((e) => ui.error(e));
  return () => { stopNodes(); stopPods(); };
}

// ---- workloads ----

const restartedAt = () => new Date().toISOString().replace(/\.\d+Z$/, 'Z');

// The workload kinds. A kind the server does not serve yet (404 on its list) hides its
// section, so a kind that lands later shows up with no change here.
export const WORKLOADS = [
  {
    kind: 'Deployment', base: '/apis/apps/v1', plural: 'deployments',
    counts: (o) => [o.spec.replicas ?? 1, (o.status || {}).readyReplicas || 0, (o.status || {}).updatedReplicas || 0],
    scale: true, restart: true, undo: true,
  },
  {
    kind: 'StatefulSet', base: '/apis/apps/v1', plural: 'statefulsets',
    counts: (o) => [o.spec.replicas ?? 1, (o.status || {}).readyReplicas || 0, (o.status || {}).updatedReplicas || 0],
    scale: true, restart: true,
  },
  {
    kind: 'DaemonSet', base: '/apis/apps/v1', plural: 'daemonsets',
    counts: (o) => [(o.status || {}).desiredNumberScheduled || 0, (o.status || {}).numberReady || 0, (o.status || {}).updatedNumberScheduled || 0],
    restart: true,
  },
  {
    kind: 'Job', base: '/apis/batch/v1', plural: 'jobs', headings: ['Completions', 'Active', 'Succeeded'],
    counts: (o) => [o.spec.completions ?? 1, (o.status || {}).active || 0, (o.status || {}).succeeded || 0],
  },
];

const objectPath = (w, o) => `${w.base}/namespaces/${enc(o.metadata.namespace)}/${w.plural}/${enc(o.metadata.name)}`;

// `kubectl rollout undo`: the pod template of the previous revision's ReplicaSet.
async function undo(d) {
  const ns = d.metadata.namespace;
  const list = await get(`/apis/apps/v1/namespaces/${enc(ns)}/replicasets`);
  const revision = (rs) => parseInt(((rs.metadata.annotations || {})['deployment.kubernetes.io/revision']) || '0', 10);
  const owned = list.items
    .filter((rs) => (rs.metadata.ownerReferences || []).some((r) => r.controller && r.uid === d.metadata.uid))
    .sort((a, b) => revision(b) - revision(a));
  if (owned.length < 2) throw new ApiError(400, `no rollout history found for deployment "${d.metadata.name}"`);
  const template = JSON.parse(JSON.stringify(owned[1].spec.template));
  if (template.metadata && template.metadata.labels) delete template.metadata.labels['pod-template-hash'];
  return patch(`/apis/apps/v1/namespaces/${enc(ns)}/deployments/${enc(d.metadata.name)}`,
    [{ op: 'replace', path: '/spec/template', value: template }], 'application/json-patch+json');
}

function workloadTable(ui, w) {
  const [desired, ready, updated] = w.headings || ['Desired', 'Ready', 'Up-to-date'];
  const n = (i) => (o) => String(w.counts(o)[i]);
  return new LiveTable([
    { title: 'Namespace', value: (o) => o.metadata.namespace, cls: 'opt' },
    { title: 'Name', value: (o) => o.metadata.name },
    { title: desired, value: n(0) },
    {
      title: ready,
      value: (o) => {
        const [d, r] = w.counts(o);
        return badge(String(r), r >= d ? 'ok' : 'warn');
      },
    },
    { title: updated, value: n(2) },
    { title: 'Age', value: (o) => ageCell(o.metadata.creationTimestamp), cls: 'opt' },
    {
      title: '',
      value: (o) => h('span', { class: 'actions' },
        w.scale && action(ui, 'Scale', async () => {
          const v = await ask(`Scale ${w.kind.toLowerCase()}/${o.metadata.name}`, [{ name: 'replicas', label: 'Replicas', type: 'number', min: 0, value: o.spec.replicas ?? 1 }]);
          if (v) await patch(`${objectPath(w, o)}/scale`, { spec: { replicas: parseInt(v.replicas, 10) } });
        }, { class: 'scale' }),
        w.restart && action(ui, 'Restart', async () => {
          if (await confirmAction(`Restart ${w.kind.toLowerCase()}/${o.metadata.name}?`)) {
            await patch(objectPath(w, o), { spec: { template: { metadata: { annotations: { 'kubectl.kubernetes.io/restartedAt': restartedAt() } } } } });
          }
        }, { class: 'restart' }),
        w.undo && action(ui, 'Undo', async () => {
          if (await confirmAction(`Roll ${w.kind.toLowerCase()}/${o.metadata.name} back to its previous revision?`)) await undo(o);
        }, { class: 'undo' })),
    },
  ], { empty: `No ${w.plural}.` });
}

export function workloadsView(root, ui, ns) {
  const stops = WORKLOADS.map((w) => {
    const table = workloadTable(ui, w);
    const sec = section(`${w.kind}s`, table.el);
    sec.dataset.kind = w.kind;
    sec.hidden = true;
    root.append(sec);
    return watchScoped(ui, table, ns, w.base, w.plural, {
      reset: () => { sec.hidden = false; },
      error: (e) => { if (!(e instanceof ApiError && e.code === 404)) ui.error(e); },
    });
  });
  return () => stops.forEach((s) => s());
}

// ---- pods ----

// What `kubectl get pods` shows in STATUS.
export function podStatus(p) {
  if (p.metadata.deletionTimestamp) return 'Terminating';
  const st = p.status || {};
  let reason = st.reason || st.phase || 'Pending';
  for (const c of [...(st.initContainerStatuses || [])]) {
    const s = c.state || {};
    if (s.terminated && s.terminated.exitCode === 0) continue;
    if (s.waiting && s.waiting.reason && s.waiting.reason !== 'PodInitializing') return `Init:${s.waiting.reason}`;
    if (s.terminated) return `Init:${s.terminated.reason || 'Error'}`;
  }
  for (const c of st.containerStatuses || []) {
    const s = c.state || {};
    if (s.waiting && s.waiting.reason) reason = s.waiting.reason;
    else if (s.terminated && s.terminated.reason) reason = s.terminated.reason;
  }
  return reason;
}

function statusKind(s) {
  if (['Running', 'Succeeded', 'Completed'].includes(s)) return 'ok';
  if (['Pending', 'ContainerCreating', 'Terminating', 'PodInitializing'].includes(s)) return 'warn';
  return 'bad';
}

const restarts = (p) => ((p.status || {}).containerStatuses || []).reduce((n, c) => n + (c.restartCount || 0), 0);

const podLink = (ns, name) => h('a', { href: `#/pod/${enc(ns)}/${enc(name)}` }, name);

export function podsView(root, ui, ns) {
  const table = new LiveTable([
    { title: 'Namespace', value: (p) => p.metadata.namespace, cls: 'opt' },
    { title: 'Name', value: (p) => podLink(p.metadata.namespace, p.metadata.name) },
    {
      title: 'Ready',
      value: (p) => {
        const cs = (p.status || {}).containerStatuses || [];
        return `${cs.filter((c) => c.ready).length}/${p.spec.containers.length}`;
      },
    },
    { title: 'Status', value: (p) => { const s = podStatus(p); return badge(s, statusKind(s)); } },
    { title: 'Restarts', value: (p) => String(restarts(p)) },
    { title: 'Node', value: (p) => p.spec.nodeName || '', cls: 'opt' },
    { title: 'Age', value: (p) => ageCell(p.metadata.creationTimestamp) },
  ], { empty: 'No pods.' });
  const total = h('span', { class: 'count' });
  const shown = () => { total.textContent = `${table.size} pods`; };
  root.append(section('Pods', h('div', { class: 'bar' }, filterBox(table), total), table.el));
  return watchScoped(ui, table, ns, '/api/v1', 'pods', { reset: shown, event: shown });
}

function kv(rows) {
  return h('dl', { class: 'kv' }, rows.filter(([, v]) => v !== undefined && v !== null && v !== '').map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
}

function containerState(c) {
  const s = c.state || {};
  if (s.running) return badge('Running', 'ok');
  if (s.waiting) return badge(s.waiting.reason || 'Waiting', 'warn');
  if (s.terminated) return badge(`${s.terminated.reason || 'Terminated'} (${s.terminated.exitCode})`, s.terminated.exitCode === 0 ? 'ok' : 'bad');
  return '';
}

export function podView(root, ui, ns, name) {
  const summary = h('div');
  const containers = h('div');
  const conditions = h('div');
  const events = eventsTable(false);
  const select = h('select', { class: 'container', 'aria-label': 'Container' });
  const tail = h('input', { type: 'number', min: 0, value: 100, class: 'tail', 'aria-label': 'Lines of tail' });
  const follow = h('input', { type: 'checkbox', checked: true, class: 'follow' });
  const log = h('pre', { class: 'log', tabindex: 0 });
  const logState = h('span', { class: 'log-state' });
  let stopLog = () => {};
  let known = false;

  const startLog = () => {
    stopLog();
    const ctl = new AbortController();
    stopLog = () => ctl.abort();
    log.replaceChildren();
    const q = new URLSearchParams({ container: select.value });
    if (follow.checked) q.set('follow', 'true');
    if (tail.value !== '') q.set('tailLines', tail.value);
    logState.textContent = follow.checked ? 'following' : '';
    stream(`/api/v1/namespaces/${enc(ns)}/pods/${enc(name)}/log?${q}`, ctl.signal, (text) => {
      const atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
      log.append(text);
      // Keep the page light however long it follows: drop the oldest pieces.
      while (log.childNodes.length > 2000) log.firstChild.remove();
      if (atEnd) log.scrollTop = log.scrollHeight;
    }).then(() => { logState.textContent = 'ended'; }, (e) => {
      if (ctl.signal.aborted) return;
      logState.textContent = '';
      log.append(h('span', { class: 'bad' }, e.message));
    });
  };
  for (const el of [select, tail, follow]) el.addEventListener('change', startLog);

  const show = (p) => {
    const st = p.status || {};
    summary.replaceChildren(kv([
      ['Namespace', ns], ['Node', p.spec.nodeName], ['Status', badge(podStatus(p), statusKind(podStatus(p)))],
      ['Pod IP', st.podIP], ['Started', st.startTime && ageCell(st.startTime)], ['Restarts', String(restarts(p))],
    ]));
    const statuses = new Map((st.containerStatuses || []).map((c) => [c.name, c]));
    containers.replaceChildren(h('div', { class: 'table' }, h('table', {},
      h('thead', {}, h('tr', {}, ['Name', 'Image', 'Ready', 'Restarts', 'State'].map((t) => h('th', {}, t)))),
      h('tbody', {}, p.spec.containers.map((c) => {
        const s = statuses.get(c.name) || {};
        return h('tr', {}, h('td', { 'data-label': 'Name' }, c.name), h('td', { 'data-label': 'Image' }, c.image || ''),
          h('td', { 'data-label': 'Ready' }, s.ready ? 'yes' : 'no'), h('td', { 'data-label': 'Restarts' }, String(s.restartCount || 0)),
          h('td', { 'data-label': 'State' }, containerState(s)));
      })))));
    conditions.replaceChildren(h('div', { class: 'table' }, h('table', {},
      h('thead', {}, h('tr', {}, ['Type', 'Status', 'Changed', 'Reason'].map((t) => h('th', {}, t)))),
      h('tbody', {}, (st.conditions || []).map((c) => h('tr', {},
        h('td', { 'data-label': 'Type' }, c.type), h('td', { 'data-label': 'Status' }, badge(c.status, c.status === 'True' ? 'ok' : 'warn')),
        h('td', { 'data-label': 'Changed' }, ageCell(c.lastTransitionTime)), h('td', { 'data-label': 'Reason' }, [c.reason, c.message].filter(Boolean).join(': '))))))));
    if (!known) {
      known = true;
      select.replaceChildren(...p.spec.containers.map((c) => h('option', { value: c.name }, c.name)));
      startLog();
    }
  };

  root.append(
    h('p', { class: 'crumbs' }, h('a', { href: '#/pods' }, 'Pods'), ' / ', ns, ' / ', h('strong', {}, name)),
    section(`Pod ${name}`, summary),
    section('Containers', containers),
    section('Conditions', conditions),
    section('Log', h('div', { class: 'bar' }, h('label', {}, 'Container ', select), h('label', {}, 'Tail ', tail),
      h('label', {}, follow, ' Follow'), action(ui, 'Reload', async () => startLog()), logState), log),
    section('Events', events.el),
  );
  const stopPod = watch(`/api/v1/namespaces/${enc(ns)}/pods?fieldSelector=${enc(`metadata.name=${name}`)}`, {
    reset: (items) => { if (items[0]) show(items[0]); else summary.replaceChildren(h('p', { class: 'bad' }, `pods "${name}" not found`)); },
    event: (type, p) => { if (type !== 'DELETED') show(p); else summary.prepend(badge('Deleted', 'bad')); },
    error: (e) => ui.error(e),
  });
  const stopEvents = watchInto(ui, events, `/api/v1/namespaces/${enc(ns)}/events?fieldSelector=${enc(`involvedObject.name=${name}`)}`);
  return () => { stopPod(); stopEvents(); stopLog(); };
}

// ---- services ----

function ports(s) {
  return (s.spec.ports || []).map((p) => `${p.port}${p.nodePort ? `:${p.nodePort}` : ''}/${p.protocol || 'TCP'}`).join(', ');
}

function endpointsText(ep) {
  if (!ep) return '';
  const out = [];
  for (const sub of ep.subsets || []) {
    for (const a of sub.addresses || []) for (const p of sub.ports || [{}]) out.push(p.port ? `${a.ip}:${p.port}` : a.ip);
    for (const a of sub.notReadyAddresses || []) out.push(`${a.ip} (not ready)`);
  }
  return out.join(', ') || '<none>';
}

export function servicesView(root, ui, ns) {
  const endpoints = new Map();
  const services = new LiveTable([
    { title: 'Namespace', value: (s) => s.metadata.namespace, cls: 'opt' },
    { title: 'Name', value: (s) => s.metadata.name },
    { title: 'Type', value: (s) => s.spec.type || 'ClusterIP' },
    { title: 'Cluster IP', value: (s) => s.spec.clusterIP || '', cls: 'opt' },
    { title: 'Ports', value: ports },
    { title: 'Endpoints', value: (s) => endpointsText(endpoints.get(keyOf(s))), cls: 'endpoints' },
  ], { empty: 'No services.' });
  const ingresses = new LiveTable([
    { title: 'Namespace', value: (i) => i.metadata.namespace, cls: 'opt' },
    { title: 'Name', value: (i) => i.metadata.name },
    { title: 'Class', value: (i) => i.spec.ingressClassName || '' },
    { title: 'Hosts', value: (i) => (i.spec.rules || []).map((r) => r.host || '*').join(', ') },
    { title: 'Address', value: (i) => (((i.status || {}).loadBalancer || {}).ingress || []).map((x) => x.ip || x.hostname).join(', ') },
  ], { empty: 'No ingresses.' });
  const ingressSection = section('Ingresses', ingresses.el);
  ingressSection.hidden = true;
  root.append(section('Services', services.el), ingressSection);
  const refresh = (k) => services.refresh((s) => keyOf(s) === k);
  return [
    watchScoped(ui, services, ns, '/api/v1', 'services'),
    scopedWatch(ui, ns, '/api/v1', 'endpoints', {
      reset: (items) => { endpoints.clear(); for (const e of items) endpoints.set(keyOf(e), e); services.refresh(() => true); },
      event: (type, e) => { if (type === 'DELETED') endpoints.delete(keyOf(e)); else endpoints.set(keyOf(e), e); refresh(keyOf(e)); },
      error: (e) => ui.error(e),
    }),
    watchScoped(ui, ingresses, ns, '/apis/networking.k8s.io/v1', 'ingresses', {
      reset: () => { ingressSection.hidden = false; },
      error: (e) => { if (!(e instanceof ApiError && e.code === 404)) ui.error(e); },
    }),
  ].reduce((all, s) => () => { all(); s(); }, () => {});
}

// ---- events ----

const eventTime = (e) => e.lastTimestamp || e.eventTime || (e.series && e.series.lastObservedTime) || e.metadata.creationTimestamp || '';
const newestFirst = (a, b) => {
  const ta = eventTime(a);
  const tb = eventTime(b);
  if (ta !== tb) return ta < tb ? 1 : -1;
  // Times are to the second: the later write (higher resourceVersion) first.
  const ra = Number(a.metadata.resourceVersion);
  const rb = Number(b.metadata.resourceVersion);
  if (ra !== rb && !Number.isNaN(ra) && !Number.isNaN(rb)) return rb - ra;
  return keyOf(a) < keyOf(b) ? -1 : keyOf(a) > keyOf(b) ? 1 : 0;
};

function eventsTable(withObject) {
  return new LiveTable([
    { title: 'Last seen', value: (e) => ageCell(eventTime(e)) },
    { title: 'Type', value: (e) => badge(e.type || 'Normal', e.type === 'Warning' ? 'bad' : '') },
    { title: 'Reason', value: (e) => e.reason || '' },
    withObject && { title: 'Object', value: (e) => { const o = e.involvedObject || {}; return `${(o.kind || '').toLowerCase()}/${o.name || ''}`; } },
    withObject && { title: 'Namespace', value: (e) => e.metadata.namespace, cls: 'opt' },
    { title: 'Message', value: (e) => e.message || '', cls: 'message' },
    { title: 'Count', value: (e) => String(e.count || (e.series && e.series.count) || 1), cls: 'opt' },
  ].filter(Boolean), { compare: newestFirst, rowClass: (e) => (e.type === 'Warning' ? 'warning' : ''), empty: 'No events.' });
}

export function eventsView(root, ui, ns) {
  const table = eventsTable(true);
  root.append(section('Events', h('div', { class: 'bar' }, filterBox(table)), table.el));
  return watchScoped(ui, table, ns, '/api/v1', 'events');
}

// ---- apply ----

// The few header fields of a manifest that name where it goes. The server parses the whole
// document (server-side apply takes YAML), so only top-level `apiVersion`, `kind` and
// `metadata.name`/`namespace` are read here, from plain block YAML.
export function manifestHeader(doc) {
  const out = {};
  let top = null;
  let indent = null;
  const scalar = (v) => v.replace(/\s+#.*$/, '').trim().replace(/^(['"])(.*)\1$/, '$2');
  for (const line of doc.split('\n')) {
    if (/^\s*(#|$)/.test(line)) continue;
    const m = /^(\s*)([A-Za-z]+):(?:\s+(.*))?$/.exec(line);
    if (!m) continue;
    if (m[1] === '') {
      top = m[2];
      indent = null;
      if ((top === 'apiVersion' || top === 'kind') && m[3]) out[top] = scalar(m[3]);
    } else if (top === 'metadata' && (indent === null || m[1] === indent)) {
      indent = m[1];
      if ((m[2] === 'name' || m[2] === 'namespace') && m[3]) out[m[2]] = scalar(m[3]);
    }
  }
  return out;
}

export function splitManifest(text) {
  const t = text.trim();
  if (t.startsWith('{') || t.startsWith('[')) {
    const v = JSON.parse(t);
    const docs = Array.isArray(v) ? v : v.kind && v.kind.endsWith('List') && Array.isArray(v.items) ? v.items : [v];
    return docs.map((d) => ({ body: JSON.stringify(d), apiVersion: d.apiVersion, kind: d.kind, name: (d.metadata || {}).name, namespace: (d.metadata || {}).namespace }));
  }
  return text.split(/^---[^\n]*$/m).filter((d) => d.replace(/^\s*#.*$/gm, '').trim() !== '')
    .map((d) => ({ body: d, ...manifestHeader(d) }));
}

const discovery = new Map();
async function resourceFor(apiVersion, kind) {
  const base = apiVersion.includes('/') ? `/apis/${apiVersion}` : `/api/${apiVersion}`;
  if (!discovery.has(base)) discovery.set(base, get(base).catch((e) => { discovery.delete(base); throw e; }));
  const list = await discovery.get(base);
  const r = list.resources.find((x) => x.kind === kind && !x.name.includes('/'));
  if (!r) throw new ApiError(404, `no matches for kind "${kind}" in version "${apiVersion}"`);
  return { base, plural: r.name, namespaced: r.namespaced };
}

async function applyOne(doc, defaultNs, force) {
  if (!doc.apiVersion || !doc.kind) throw new ApiError(400, 'apiVersion and kind must be set');
  if (!doc.name) throw new ApiError(400, 'metadata.name must be set');
  const r = await resourceFor(doc.apiVersion, doc.kind);
  const ns = r.namespaced ? `/namespaces/${enc(doc.namespace || defaultNs)}` : '';
  const q = new URLSearchParams({ fieldManager: 'skiff-dashboard' });
  if (force) q.set('force', 'true');
  await request('PATCH', `${r.base}${ns}/${r.plural}/${enc(doc.name)}?${q}`, doc.body, 'application/apply-patch+yaml');
  const group = doc.apiVersion.includes('/') ? `.${doc.apiVersion.split('/')[0]}` : '';
  return `${doc.kind.toLowerCase()}${group}/${doc.name} serverside-applied`;
}

export function applyView(root, ui, ns) {
  const text = h('textarea', { class: 'manifest', rows: 18, spellcheck: 'false', placeholder: 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: example\ndata:\n  key: value', 'aria-label': 'Manifest (YAML or JSON)' });
  const nsInput = h('input', { type: 'text', value: ns || 'default', class: 'namespace', 'aria-label': 'Namespace' });
  if (!ns) ui.ownNamespace().then((own) => { if (own && nsInput.value === 'default') nsInput.value = own; });
  const force = h('input', { type: 'checkbox', class: 'force' });
  const results = h('ul', { class: 'results' });
  const run = async () => {
    results.replaceChildren();
    let docs;
    try { docs = splitManifest(text.value); } catch (e) { results.append(h('li', { class: 'bad' }, `not valid JSON: ${e.message}`)); return; }
    if (!docs.length) { results.append(h('li', { class: 'bad' }, 'nothing to apply')); return; }
    for (const d of docs) {
      try {
        results.append(h('li', { class: 'ok' }, await applyOne(d, nsInput.value.trim() || 'default', force.checked)));
      } catch (e) {
        if (e instanceof ApiError && e.code === 401) throw e;
        results.append(h('li', { class: 'bad' }, `${d.kind || '?'}/${d.name || '?'}: ${e.message}`));
      }
    }
  };
  root.append(section('Apply a manifest',
    h('p', { class: 'hint' }, 'YAML or JSON, several documents separated by ---. Applied with server-side apply, as the field manager skiff-dashboard.'),
    text,
    h('div', { class: 'bar' }, h('label', {}, 'Default namespace ', nsInput), h('label', {}, force, ' Force conflicts'), action(ui, 'Apply', run, { class: 'primary apply' })),
    results));
  return () => {};
}
